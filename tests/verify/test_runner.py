"""The runner: order, every gate runs, crash vs fail, exit codes, progress, the checks made before any
gate runs (junit path, target state), context building and the touched files."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from patchkit.errors import BadInput
from patchkit.git import Repo
from patchkit.testing.verify import applied_example, commit_all, make_tree, write_files, write_manifest
from patchkit.verify.api import Finding, Severity
from patchkit.verify.outcome import GateRun, VerifyResult
from patchkit.verify.run import build_context, run_gates, verify
from patchkit.verify.target import TargetCheck

CALLS: list[str] = []


def gate(name: str, findings: Any = (), raises: Exception | None = None) -> SimpleNamespace:
    def run(ctx):
        CALLS.append(name)
        if raises:
            raise raises
        return list(findings)

    return SimpleNamespace(NAME=name, DESCRIPTION=name, EXAMPLES=(), run=run)


def error(gate_name, message="bad"):
    return Finding(gate=gate_name, severity=Severity.ERROR, file="python/x.py", line=3, message=message)


@pytest.fixture
def ctx(make_ctx):
    CALLS.clear()
    return make_ctx({"python/x.py": "X = 1\n"})


def result_of(runs):
    exact = TargetCheck(state="applied", statement="exact", fix="")
    return VerifyResult(command="verify", ok=all(r.status == "pass" for r in runs), target="t", set_dir="s",
                        target_check=exact, touched=(), gates=runs, seconds=0.0)


def test_all_gates_run_in_order_even_after_a_failure_and_a_crash(ctx):
    gates = {"a": gate("a", [error("a")]), "b": gate("b", raises=RuntimeError("boom")), "c": gate("c")}
    runs = run_gates(ctx, gates)
    assert CALLS == ["a", "b", "c"]
    assert [r.status for r in runs] == ["fail", "crash", "pass"]
    assert "RuntimeError: boom" in runs[1].traceback
    assert result_of(runs).exit_code == 3


def test_findings_exit_1_and_warnings_do_not_fail(ctx):
    warn = Finding(gate="b", severity=Severity.WARNING, file="manifest.toml", line=None, message="python 3.99 missing")
    runs = run_gates(ctx, {"a": gate("a", [error("a")]), "b": gate("b", [warn])})
    assert [r.status for r in runs] == ["fail", "pass"]
    assert result_of(runs).exit_code == 1
    assert result_of(run_gates(ctx, {"b": gate("b", [warn])})).exit_code == 0


def test_selected_gates_keep_registry_order(ctx):
    run_gates(ctx, {"a": gate("a"), "b": gate("b"), "c": gate("c")}, ("c", "a"))
    assert CALLS == ["a", "c"]


def test_unknown_gate_is_bad_input(ctx):
    with pytest.raises(BadInput, match="unknown gate 'nope'"):
        run_gates(ctx, {"a": gate("a")}, ("nope",))


def test_a_gate_refusing_its_config_fails_with_a_located_finding(ctx):
    refusal = BadInput("[verify.x] static_only must be a table", location=None)
    (run,) = run_gates(ctx, {"x": gate("x", raises=refusal)})
    assert run.status == "fail"
    assert run.findings[0].file == "manifest.toml" and "must be a table" in run.findings[0].message


def test_a_gate_returning_junk_is_a_crash(ctx):
    (run,) = run_gates(ctx, {"x": gate("x", ["not a finding"])})
    assert run.status == "crash" and "not Finding" in run.traceback


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def note(self, text: str) -> None:
        self.events.append(("note", text))

    def started(self, gate: str, index: int, total: int) -> None:
        self.events.append(("started", gate, index, total))

    def finished(self, run: GateRun, index: int, total: int) -> None:
        self.events.append(("finished", run.gate, run.status, index, total))


def test_progress_hears_each_gate_start_and_finish_in_order(ctx):
    recorder = Recorder()
    run_gates(ctx, {"a": gate("a", [error("a")]), "b": gate("b")}, (), recorder)
    assert recorder.events == [("started", "a", 1, 2), ("finished", "a", "fail", 1, 2),
                               ("started", "b", 2, 2), ("finished", "b", "pass", 2, 2)]


# ---------------------------------------------------------------- touched files and the base


def test_touched_files_cover_commits_edits_and_new_files_but_not_deletions_or_bytecode(tmp_path):
    root, base = make_tree(tmp_path / "t", {"python/keep.py": "A = 1\n", "python/gone.py": "B = 1\n"},
                           {"python/added.py": "C = 1\n"})
    (root / "python/gone.py").unlink()
    commit_all(Repo(root), "delete")
    write_files(root, {"python/keep.py": "A = 2\n", "python/untracked.py": "D = 1\n",
                       "python/__pycache__/keep.cpython-311.pyc": "bytecode someone else wrote"})
    set_dir = tmp_path / "set"
    write_manifest(set_dir, base)
    assert build_context(set_dir, root).touched == ("python/added.py", "python/keep.py", "python/untracked.py")


def test_upstream_history_below_a_git_base_is_not_touched(tmp_path):
    """A git base below which upstream has history (a clone): only the files the series touches count
    as touched (1 of the 30), not every file of that history."""
    modules = {f"python/m{i}.py": f"X = {i}\n" for i in range(30)}
    root, base = make_tree(tmp_path / "t", modules, {"python/m1.py": "X = 'patched'\n"})
    set_dir = tmp_path / "set"
    write_manifest(set_dir, base)
    ctx = build_context(set_dir, root)
    assert ctx.base_commit == base and ctx.touched == ("python/m1.py",)


def test_a_target_without_the_base_is_bad_input_naming_it(tmp_path):
    root, _ = make_tree(tmp_path / "t", {"python/a.py": ""}, {})
    write_manifest(tmp_path / "set", "0" * 40)
    with pytest.raises(BadInput, match="does not contain the base"):
        build_context(tmp_path / "set", root)


def test_target_that_is_not_a_git_tree_is_bad_input(tmp_path):
    write_manifest(tmp_path / "set", "0" * 40)
    (tmp_path / "plain").mkdir()
    with pytest.raises(BadInput, match="not a git repository"):
        build_context(tmp_path / "set", tmp_path / "plain")


def test_malformed_manifest_names_file_and_line(tmp_path):
    (tmp_path / "manifest.toml").write_text('[set]\nname = "v1"\npython = ["3.10",, ]\nx = 1\n')
    with pytest.raises(BadInput) as caught:
        build_context(tmp_path, tmp_path)
    assert caught.value.location.file.endswith("manifest.toml") and caught.value.location.line == 3


def test_missing_manifest_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match=r"manifest\.toml not found"):
        build_context(tmp_path, tmp_path)


# ---------------------------------------------------------------- before the gates: junit path, target state


@pytest.fixture
def applied(tmp_path) -> tuple[Path, Path]:
    CALLS.clear()
    return applied_example(tmp_path / "ex", {"python/pkg/__init__.py": ""}, {"python/pkg/ok.py": "X = 1\n"})


def test_an_exactly_applied_target_is_stated_and_verified(applied):
    target, set_dir = applied
    result = verify(set_dir, target, registry={"a": gate("a")})
    assert result.target_check.exact and "is exactly example@1.0.0 applied" in result.target_check.statement
    assert CALLS == ["a"] and result.touched == ("python/pkg/ok.py",) and result.exit_code == 0


def test_an_unpatched_base_is_refused_with_the_fix_before_any_gate(applied, tmp_path):
    _, set_dir = applied
    base = tmp_path / "bare"
    from patchkit.testing.verify import _patchkit

    _patchkit("base", "fetch", "--set", str(set_dir), "--dest", str(base))
    with pytest.raises(BadInput) as caught:
        verify(set_dir, base, registry={"a": gate("a")})
    assert f"{base.resolve()} is not patched by example@1.0.0" in caught.value.message
    assert "patchkit apply" in caught.value.hint and "--allow-drift" in caught.value.hint
    assert CALLS == []


def test_an_edited_target_is_refused_and_allow_drift_verifies_it_saying_so(applied):
    target, set_dir = applied
    (target / "python/pkg/ok.py").write_text("X = 2\n")
    with pytest.raises(BadInput, match=r"not exactly example@1\.0\.0 applied: python/pkg/ok\.py"):
        verify(set_dir, target, registry={"a": gate("a")})
    assert CALLS == []
    result = verify(set_dir, target, registry={"a": gate("a")}, allow_drift=True)
    assert result.target_check.allowed and not result.target_check.exact and CALLS == ["a"]


@pytest.mark.parametrize("where", ["a-file/report.xml", "a-dir"])
def test_an_unwritable_junit_path_is_refused_before_any_gate(applied, tmp_path, where):
    target, set_dir = applied
    (tmp_path / "a-file").write_text("not a directory")
    (tmp_path / "a-dir").mkdir()
    with pytest.raises(BadInput, match="--junit"):
        verify(set_dir, target, junit=tmp_path / where, registry={"a": gate("a")})
    assert CALLS == []
