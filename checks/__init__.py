"""Verification gates for patched SGLang trees: one module per gate, ordered in ``registry.py``.

This folder is the package ``patchkit.checks`` (``patchkit/checks`` links here, and a wheel installs it
there); it is never a top-level ``checks`` package, which another project could shadow.
"""

if __name__ != "patchkit.checks":
    raise ImportError(f"the gates are the package patchkit.checks, not {__name__!r}: import patchkit.checks")
