"""The patch-set engine: series, path safety, staging, the apply transaction, the base and its state, and the verbs."""
