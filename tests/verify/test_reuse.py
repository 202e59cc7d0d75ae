"""A warm ``patchkit verify`` replays a gate's stored pass (patchkit.verify.reuse), and only when every
input is the same: the same tree byte for byte (exact, clean, nothing untracked or ignored but
``__pycache__`` bytecode, no index entry git skips), the same set, code, interpreter and variables.
Real trees from ``base fetch`` + ``apply``; gates are small fakes that count their runs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from patchkit.errors import BadInput
from patchkit.git import Repo
from patchkit.testing.verify import applied_example
from patchkit.verify import reuse
from patchkit.verify.api import Finding, Severity
from patchkit.verify.run import verify
from patchkit.verify.target import tree_identity

RUNS: list[str] = []


def counting_gate(name: str, findings: Any = ()) -> SimpleNamespace:
    def run(ctx):
        RUNS.append(name)
        return list(findings)

    return SimpleNamespace(NAME=name, DESCRIPTION=name, EXAMPLES=(), run=run)


INFO = Finding(gate="a", severity=Severity.INFO, file="python/pkg/ok.py", line=1, message="seen", hint="a hint")
WARNING = Finding(gate="a", severity=Severity.WARNING, file="manifest.toml", message="careful")
REGISTRY = {"a": counting_gate("a", [INFO, WARNING]), "b": counting_gate("b")}


@pytest.fixture
def applied(tmp_path) -> tuple[Path, Path]:
    RUNS.clear()
    return applied_example(tmp_path / "ex", {"python/pkg/__init__.py": "", "python/pkg/base.py": "B = 1\n"},
                           {"python/pkg/ok.py": "X = 1\n"})


def run(applied: tuple[Path, Path], **kwargs: Any):
    target, set_dir = applied
    return verify(set_dir, target, registry=REGISTRY, reusable=frozenset({"a"}), **kwargs)


def test_a_second_run_replays_the_reusable_gates_pass_with_the_same_findings(applied):
    first = run(applied)
    assert RUNS == ["a", "b"] and not any(r.reused for r in first.gates)
    second = run(applied)
    assert RUNS == ["a", "b", "b"], "the reusable gate did not run again; the other one did"
    by_name = {r.gate: r for r in second.gates}
    assert by_name["a"].reused and not by_name["b"].reused
    assert by_name["a"].findings == (INFO, WARNING) and by_name["a"].status == "pass"
    assert second.exit_code == 0


def test_a_failing_gate_is_never_stored(applied):
    target, set_dir = applied
    failing = {"a": counting_gate("a", [Finding(gate="a", severity=Severity.ERROR, file="x", message="bad")])}
    for _ in range(2):
        result = verify(set_dir, target, registry=failing, reusable=frozenset({"a"}))
        assert result.exit_code == 1 and not result.gates[0].reused
    assert RUNS == ["a", "a"]


def _untracked_file(target: Path) -> None:
    (target / "python/pkg/stray.py").write_text("S = 1\n")


def _tracked_edit(target: Path) -> None:
    (target / "python/pkg/base.py").write_text("B = 2\n")


def _staged_edit(target: Path) -> None:
    _tracked_edit(target)
    Repo(target).run("add", "python/pkg/base.py")


def _extra_commit(target: Path) -> None:
    _tracked_edit(target)
    repo = Repo(target)
    repo.run("add", "-A")
    repo.run("-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "mine")


def _assume_unchanged_edit(target: Path) -> None:
    Repo(target).run("update-index", "--assume-unchanged", "python/pkg/base.py")
    _tracked_edit(target)


def _skip_worktree_edit(target: Path) -> None:
    Repo(target).run("update-index", "--skip-worktree", "python/pkg/base.py")
    _tracked_edit(target)


@pytest.mark.parametrize("change", [_untracked_file, _tracked_edit, _staged_edit, _extra_commit,
                                    _assume_unchanged_edit, _skip_worktree_edit])
def test_a_tree_off_the_set_is_refused_and_with_allow_drift_runs_every_gate_and_stores_nothing(applied, change):
    target, _ = applied
    run(applied)
    change(target)
    with pytest.raises(BadInput, match="not exactly"):
        run(applied)
    drifted = run(applied, allow_drift=True)
    assert not any(r.reused for r in drifted.gates) and RUNS == ["a", "b", "a", "b"]


def _ignored_file(target: Path) -> None:
    (target / ".git/info/exclude").write_text("*.local\n")
    (target / "python/pkg/settings.local").write_text("ignored by git, seen by a gate\n")


def _bytecode_outside_pycache(target: Path) -> None:
    (target / "python/pkg/ghost.pyc").write_bytes(b"importable without a source")


@pytest.mark.parametrize("change", [_ignored_file, _bytecode_outside_pycache])
def test_what_the_exactness_check_lets_pass_still_makes_the_gate_run_again(applied, change):
    """The exactness check lets these pass (a file git ignores, bytecode outside ``__pycache__``); the
    tree identity does not, so no stored pass is replayed over files it was not computed on."""
    target, _ = applied
    run(applied)
    change(target)
    assert tree_identity(target) is None
    again = run(applied)
    assert not any(r.reused for r in again.gates) and RUNS == ["a", "b", "a", "b"]


def test_bytecode_in_pycache_keeps_the_identity(applied):
    target, _ = applied
    clean = tree_identity(target)
    assert clean == Repo(target).run("rev-parse", "HEAD^{tree}")
    cache = target / "python/pkg/__pycache__"
    cache.mkdir()
    (cache / "ok.cpython-311.pyc").write_bytes(b"derived")
    assert tree_identity(target) == clean
    run(applied)
    assert run(applied).gates[0].reused


def test_an_edited_set_file_a_variable_or_the_code_makes_it_run_again(applied, monkeypatch):
    _, set_dir = applied
    run(applied)
    (set_dir / "notes.md").write_text("a file of the set that no patch names\n")
    assert not run(applied).gates[0].reused
    assert run(applied).gates[0].reused
    monkeypatch.setenv("PATCHKIT_VERIFY_PYTHON", "/elsewhere/python")
    assert not run(applied).gates[0].reused
    monkeypatch.setattr(reuse, "code_digest", lambda: "an edited gate")
    assert not run(applied).gates[0].reused
    assert RUNS.count("a") == 4


def test_a_damaged_entry_is_a_miss(applied):
    from patchkit import paths

    run(applied)

    entries = list((paths.home().resolve() / "cache" / "verify" / reuse.NAMESPACE).rglob("*.json"))
    assert len(entries) == 1
    entries[0].write_text('{"findings": [{"gate": "a"}]}')
    assert not run(applied).gates[0].reused and RUNS.count("a") == 2


def test_folder_digest_sees_names_and_bytes_not_bytecode(tmp_path):
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/b.txt").write_text("b\n")
    first = reuse.folder_digest(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__/a.cpython-311.pyc").write_bytes(b"x")
    assert reuse.folder_digest(tmp_path) == first
    (tmp_path / "sub/b.txt").write_text("c\n")
    assert reuse.folder_digest(tmp_path) != first
    (tmp_path / "sub/b.txt").write_text("b\n")
    (tmp_path / "sub/b.txt").rename(tmp_path / "sub/c.txt")
    assert reuse.folder_digest(tmp_path) != first


def test_an_edited_shared_folder_the_manifest_names_outside_the_set_makes_it_run_again(applied):
    """A set's shared tests live beside it (``[verify.tests] shared = ["../common/..."]``): the tests gate
    runs them, so a stored pass must not outlive an edit there."""
    _, set_dir = applied
    shared = set_dir.parent / "shared_tests"
    shared.mkdir()
    (shared / "test_shared.py").write_text("def test_it():\n    assert True\n")
    manifest = set_dir / "manifest.toml"
    assert "[verify.tests]" not in manifest.read_text()
    manifest.write_text(manifest.read_text() + '\n[verify.tests]\nshared = ["../shared_tests"]\n')
    run(applied)
    assert run(applied).gates[0].reused
    (shared / "test_shared.py").write_text("def test_it():\n    assert False\n")
    assert not run(applied).gates[0].reused
    assert run(applied).gates[0].reused
    assert RUNS.count("a") == 2
