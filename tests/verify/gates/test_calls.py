"""The calls gate's placement on its own example tree (the running interpreter, no environment)."""

from __future__ import annotations

from patchkit.checks import calls
from patchkit.verify.api import Severity


def _example(name: str):
    return next(e for e in calls.EXAMPLES if e.name == name)


def test_a_failing_call_is_placed_where_it_left_a_passing_call_of_the_same_function(make_ctx):
    """The DDTREE request and the DFLASH one run the same handler; only the DDTREE one fails. Of the lines
    it ran, the one the passing call did not run (the validator it was sent to) is named, not the
    queueing line both share, which merely mentions the name the expectation reads."""
    bad = _example("the scheduler sends DDTREE to DFLASH's validator")
    ctx = make_ctx(bad.files, {"verify": {"calls": bad.config}})
    errors = [f for f in calls.run(ctx) if f.severity == Severity.ERROR]
    source = bad.files["python/pkg/runner.py"].splitlines()
    assert [(f.file, source[f.line - 1].strip()) for f in errors] == [("python/pkg/runner.py", "validate(req)")]
    assert "DDTREE does not support" in errors[0].message


def test_the_same_handler_passes_when_each_algorithm_gets_its_validator(make_ctx):
    good = _example("capture, replay and request gate behave")
    ctx = make_ctx(good.files, {"verify": {"calls": good.config}})
    assert [f for f in calls.run(ctx) if f.severity in (Severity.ERROR, Severity.WARNING)] == []
