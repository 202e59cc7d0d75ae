"""The static gates' EXAMPLES, run directly (the generic registry test runs them too)."""

from __future__ import annotations

import pytest

from patchkit.checks import backend, dispatch, xref
from patchkit.verify.api import Severity

MODULES = [backend, dispatch, xref]
CASES = [(m, e) for m in MODULES for e in m.EXAMPLES]


@pytest.mark.parametrize(("module", "example"), CASES, ids=[f"{m.NAME}:{e.name}" for m, e in CASES])
def test_example(module, example, make_ctx):
    ctx = make_ctx(example.files, {"verify": {module.NAME: example.config}} if example.config else {})
    findings = module.run(ctx)
    blocking = [f for f in findings if f.severity in (Severity.ERROR, Severity.WARNING)]
    if example.passes:
        assert not blocking, blocking
    else:
        assert any(example.expect in f.message for f in blocking), findings
        assert all(f.file for f in blocking)
