"""Verification gates for patched SGLang trees: one module per gate, ordered in checks.registry."""
