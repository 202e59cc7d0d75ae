"""One finding per cause (issue 37, points 3 and 4), on the small real set of tests/verify/hook_fixture.py.

Point 3: a touched file that does not compile is the compile gate's error, once; every other gate that
meets it says, in a warning, what it did not check because of it; none reports a false error (a
declared dispatch site "no longer exists" because its file has no facts). Point 4: a failing backend
case whose refused value a constant the set adds holds names that constant's line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.checks.registry import GATES, REUSABLE
from patchkit.verify.api import Finding, Severity
from patchkit.verify.run import verify
from tests.verify.hook_fixture import HOOK, SERVER_ARGS, VARIANTS, hook_set


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return hook_set(tmp_path_factory.mktemp("causes") / "hook")


def verify_with(hook: tuple[Path, Path], file: str, variant: str, **kwargs) -> dict[str, list[Finding]]:
    target, set_dir = hook
    (target / file).write_text(VARIANTS[file][variant])
    try:
        result = verify(set_dir, target, registry=GATES, reusable=REUSABLE, allow_drift=True, **kwargs)
    finally:
        (target / file).write_text(VARIANTS[file]["ok"])
    assert result.exit_code == 1 and not any(run.status == "crash" for run in result.gates)
    return {run.gate: list(run.findings) for run in result.gates}


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == Severity.ERROR]


def skipped_notes(findings: list[Finding], where: str) -> list[str]:
    return [f.message for f in findings if f.severity == Severity.WARNING
            and f.message.startswith(f"not checked because {where} does not compile")]


def test_a_file_that_does_not_compile_is_one_error_and_the_other_gates_say_what_they_skipped(hook):
    """The issue's edit: one line of the hook indented wrongly. Before, the same IndentationError was
    an error of imports, calls, backend (each case and its trace) and tests (each test, the locator)."""
    gates = verify_with(hook, HOOK, "break: an indented line")
    (only,) = [f for findings in gates.values() for f in errors(findings)]
    assert (only.gate, only.file, only.line) == ("compile", HOOK, 16)
    where = f"{HOOK}:16"
    assert skipped_notes(gates["imports"], where) == [
        f"not checked because {where} does not compile (IndentationError: unexpected indent; the compile gate "
        "reports it): import pkg.speculative_hook"]
    assert skipped_notes(gates["calls"], where)
    (cases,) = skipped_notes(gates["backend"], where)
    assert cases.endswith("case ampere, case hopper")
    assert any("test_the_tree_holds_the_budget_and_the_root" in n for n in skipped_notes(gates["tests"], where))
    assert any(n.endswith("the added-line coverage") for n in skipped_notes(gates["tests"], where))
    assert skipped_notes(gates["xref"], where) == [
        f"not checked because {where} does not compile (IndentationError: unexpected indent; the compile gate "
        "reports it): its imports, attributes, calls and self attributes"]


def test_no_declared_dispatch_site_no_longer_exists_because_its_file_does_not_compile(hook):
    gates = verify_with(hook, SERVER_ARGS, "break: a missing colon")
    compiled = errors(gates["compile"])
    assert [(f.file, f.line) for f in compiled] == [(SERVER_ARGS, 39)]
    assert not errors(gates["dispatch"]), "the site is in the file that does not compile: not judged"
    assert skipped_notes(gates["dispatch"], f"{SERVER_ARGS}:39") == [
        f"not checked because {SERVER_ARGS}:39 does not compile (SyntaxError: expected ':'; the compile gate "
        "reports it): the declared site ServerArgs.__post_init__: `self.speculative_algorithm == \"DDTREE\"`"]
    # the hook's function is called only in that file: xref leaves "never called" unjudged and says so
    for gate in ("imports", "xref", "calls", "backend", "tests"):
        assert not errors(gates[gate]), (gate, errors(gates[gate]))
    assert skipped_notes(gates["xref"], f"{SERVER_ARGS}:39") == [
        f"not checked because {SERVER_ARGS}:39 does not compile (SyntaxError: expected ':'; the compile gate "
        "reports it): its imports, attributes, calls and self attributes, whether apply_ddtree_defaults is used"]
    for gate in ("imports", "backend", "tests"):  # the calls import only the hook: they ran, and passed
        assert skipped_notes(gates[gate], f"{SERVER_ARGS}:39"), gate


def test_the_same_compile_error_on_several_pythons_is_one_finding(hook, monkeypatch):
    import shutil

    other = shutil.which("python3.12") or shutil.which("python3.10")
    if other is None:
        pytest.skip("a second Python (3.10 or 3.12) is needed")
    version = "3.12" if other.endswith("3.12") else "3.10"
    target, set_dir = hook
    manifest = set_dir / "manifest.toml"
    text = manifest.read_text()
    assert 'python = [\n    "3.11",\n]' in text
    manifest.write_text(text.replace('python = [\n    "3.11",\n]', f'python = ["3.11", "{version}"]'))
    try:
        gates = verify_with(hook, HOOK, "break: an indented line", gates=("compile",))
    finally:
        manifest.write_text(text)
    (only,) = errors(gates["compile"])
    assert only.message == f"does not compile on Python 3.11, {version}: IndentationError: unexpected indent"


def test_a_constant_the_set_adds_is_named_at_its_line(hook):
    """Issue 37 point 4: "fa3" added to the tuple of tree-mask backends is caught by the backend gate,
    and a finding names the constant's line (3), where the edit is, not only the check reading it."""
    gates = verify_with(hook, HOOK, "break: fa3 in the tuple", gates=("backend",))
    at_constant = [f for f in errors(gates["backend"]) if (f.file, f.line) == (HOOK, 3)]
    assert at_constant, errors(gates["backend"])
    assert "DDTREE_TREE_MASK_BACKENDS (a constant the set adds) holds 'fa3'" in at_constant[0].message
