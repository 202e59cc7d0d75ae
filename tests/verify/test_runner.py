"""The runner: order, every gate runs, crash vs fail, exit codes, context building, touched files."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import git
import pytest

from patchkit.errors import BadInput
from patchkit.verify.api import Finding, Severity
from patchkit.verify.run import GateStatus, VerifyResult, build_context, load_manifest, run_gates, touched_files

from verify_helpers import commit_all, make_tree, write_files

CALLS: list[str] = []


def gate(name, findings=(), raises=None):
    def run(ctx):
        CALLS.append(name)
        if raises:
            raise raises
        return list(findings)

    return SimpleNamespace(NAME=name, DESCRIPTION=name, EXAMPLES=(), run=run)


def error(gate_name, message="bad"):
    return Finding(gate_name, Severity.ERROR, "python/x.py", 3, message)


@pytest.fixture
def ctx(make_ctx):
    CALLS.clear()
    return make_ctx({"python/x.py": "X = 1\n"})


def result_of(runs):
    ok = all(r.status == GateStatus.PASS for r in runs)
    return VerifyResult("verify", ok, "t", "s", (), runs, 0.0)


def test_all_gates_run_in_order_even_after_a_failure_and_a_crash(ctx):
    gates = {"a": gate("a", [error("a")]), "b": gate("b", raises=RuntimeError("boom")), "c": gate("c")}
    runs = run_gates(ctx, (), gates)
    assert CALLS == ["a", "b", "c"]
    assert [r.status for r in runs] == [GateStatus.FAIL, GateStatus.CRASH, GateStatus.PASS]
    assert "RuntimeError: boom" in runs[1].traceback
    assert result_of(runs).exit_code == 3


def test_findings_exit_1_and_warnings_do_not_fail(ctx):
    warn = Finding("b", Severity.WARNING, "manifest.toml", None, "python 3.99 missing")
    runs = run_gates(ctx, (), {"a": gate("a", [error("a")]), "b": gate("b", [warn])})
    assert [r.status for r in runs] == [GateStatus.FAIL, GateStatus.PASS]
    assert result_of(runs).exit_code == 1
    assert result_of(run_gates(ctx, (), {"b": gate("b", [warn])})).exit_code == 0


def test_selected_gates_keep_registry_order(ctx):
    gates = {"a": gate("a"), "b": gate("b"), "c": gate("c")}
    run_gates(ctx, ("c", "a"), gates)
    assert CALLS == ["a", "c"]


def test_unknown_gate_is_bad_input(ctx):
    with pytest.raises(BadInput, match="unknown gate 'nope'"):
        run_gates(ctx, ("nope",), {"a": gate("a")})


def test_a_gate_refusing_its_config_fails_with_a_located_finding(ctx):
    refusal = BadInput("[verify.x] static_only must be a table", location=None)
    (run,) = run_gates(ctx, (), {"x": gate("x", raises=refusal)})
    assert run.status == GateStatus.FAIL
    assert run.findings[0].file == "manifest.toml" and "must be a table" in run.findings[0].message


def test_a_gate_returning_junk_is_a_crash(ctx):
    (run,) = run_gates(ctx, (), {"x": gate("x", ["not a finding"])})
    assert run.status == GateStatus.CRASH and "not Finding" in run.traceback


def test_touched_files_cover_commits_edits_and_new_files_but_not_deletions(tmp_path):
    root = make_tree(tmp_path / "t", {"python/keep.py": "A = 1\n", "python/gone.py": "B = 1\n"},
                     {"python/added.py": "C = 1\n"})
    repo = git.Repo(root)
    (root / "python/gone.py").unlink()
    commit_all(repo, "delete")
    write_files(root, {"python/keep.py": "A = 2\n", "python/untracked.py": "D = 1\n",
                       "python/__pycache__/keep.cpython-311.pyc": "bytecode someone else wrote"})
    assert touched_files(root) == ("python/added.py", "python/keep.py", "python/untracked.py")


def test_target_that_is_not_a_git_tree_is_bad_input(tmp_path):
    (tmp_path / "set").mkdir()
    (tmp_path / "set/manifest.toml").write_text("")
    (tmp_path / "plain").mkdir()
    with pytest.raises(BadInput, match="not a git tree"):
        build_context(tmp_path / "set", tmp_path / "plain")


def test_malformed_manifest_names_file_and_line(tmp_path):
    (tmp_path / "manifest.toml").write_text('[set]\nname = "v1"\npython = ["3.10",, ]\nx = 1\n')
    with pytest.raises(BadInput) as caught:
        load_manifest(tmp_path)
    assert caught.value.location.file.endswith("manifest.toml") and caught.value.location.line == 3


def test_missing_manifest_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="no manifest.toml"):
        load_manifest(tmp_path)
