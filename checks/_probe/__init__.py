"""Shared machinery of the gates that run the patched tree's own code in the isolated environment
(backend, calls): the probe subprocess, the dependency-keyed result cache, and the trace from a
failing probe back to the line the series added."""
