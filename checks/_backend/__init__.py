"""Subprocess probe of the backend gate (runs in the isolated interpreter)."""
