"""Every registered gate's EXAMPLES become tests (the Fixit pattern): add an example, get a test.

An example's files are written into a fresh git tree as one patch on top of a base commit; paths
starting with ``@base/`` go into the base commit (present but untouched), paths starting with
``@set/`` into the patch-set directory. ``config`` becomes the manifest's ``[verify.<gate>]`` table.
A passing example has no error or warning finding; a failing one has an error or warning finding whose
message contains ``expect``. A passing example with ``expect`` must still report it (e.g. an info row).
"""

from __future__ import annotations

import pytest

from patchkit.checks.registry import GATES
from patchkit.verify.api import Severity
from patchkit.verify.run import run_gate

CASES = [(name, example) for name in GATES for example in GATES[name].EXAMPLES]


def test_every_gate_ships_passing_and_failing_examples():
    for name in GATES:
        module = GATES[name]
        assert module.NAME == name and module.DESCRIPTION
        kinds = {example.passes for example in module.EXAMPLES}
        assert kinds == {True, False}, f"gate {name} needs both passing and failing examples"


@pytest.mark.parametrize(("gate", "example"), CASES, ids=[f"{g}:{e.name}" for g, e in CASES])
def test_gate_example(gate, example, make_ctx):
    ctx = make_ctx(example.files, {"verify": {gate: example.config}} if example.config else {})
    run = run_gate(gate, GATES.__getitem__, ctx)  # as the runner does: a refused config becomes a finding
    assert run.status != "crash", run.traceback
    findings = run.findings
    assert all(f.gate == gate for f in findings)
    blocking = [f for f in findings if f.severity in (Severity.ERROR, Severity.WARNING)]
    if example.passes:
        assert not blocking, blocking
    else:
        assert any(example.expect in f.message for f in blocking), findings
        assert all(f.file for f in blocking), "every blocking finding names a file"
    if example.expect:
        assert any(example.expect in f.message for f in findings), findings
