"""The tests gate's runner (run inside the verify environment) and its test-impact selection."""
