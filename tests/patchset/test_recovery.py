"""Recovery never discards user changes; the work-tree update cannot fail
half way; lock files patchkit did not create are never deleted.

Each test kills or blocks a real `patchkit apply` process at a named step, changes the tree the way a
user (or another git) would, and checks the bytes afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.patchset import helpers

SERIES_FILE = "pkg/util.py"  # patch 3 changes it
OTHER_FILE = "README.txt"  # no patch touches it


def apply_args(fx):
    return ("apply", "--set", str(fx.set_dir), "--target", str(fx.target))


def status(fx, *extra):
    return helpers.run_cli("status", "--set", str(fx.set_dir), "--target", str(fx.target), *extra)


def killed_at(fx, step: str) -> None:
    proc = helpers.start_paused(*apply_args(fx), step=step)
    proc.kill()
    proc.communicate(timeout=60)
    assert helpers.journal(fx).exists()


# ---------------------------------------------------------------------- item 2
def test_recovery_when_the_ref_had_not_moved_touches_nothing_and_keeps_edits(fx):
    """kill -9 at the journal step, then a user edit: status keeps the edit (no reset --hard)."""
    killed_at(fx, "journal")
    assert fx.head() == fx.base_commit
    (fx.target / SERIES_FILE).write_text("my edit of a file the series changes\n")
    (fx.target / OTHER_FILE).write_text("my other edit\n")
    (fx.target / "notes.txt").write_text("my new file\n")
    done = status(fx, "--json")
    assert done.returncode == 1, done.stderr  # not applied; but nothing is an error
    assert "had not moved" in done.stdout and "nothing was touched" in done.stdout
    assert (fx.target / SERIES_FILE).read_text() == "my edit of a file the series changes\n"
    assert (fx.target / OTHER_FILE).read_text() == "my other edit\n"
    assert (fx.target / "notes.txt").read_text() == "my new file\n"
    assert not helpers.journal(fx).exists()
    assert fx.head() == fx.base_commit


def test_recovery_after_the_ref_moved_finishes_and_keeps_unrelated_edits(fx, tmp_path):
    patched, patched_snapshot = helpers.patched_reference(fx, tmp_path / "reference")
    killed_at(fx, "ref-moved")
    assert fx.head() == patched
    (fx.target / OTHER_FILE).write_text("my edit\n")
    done = status(fx, "--json")
    assert "finished an interrupted apply" in done.stdout, done.stdout + done.stderr
    assert (fx.target / OTHER_FILE).read_text() == "my edit\n"
    snapshot = helpers.tree_snapshot(fx.target)
    assert {k: v for k, v in snapshot.items() if k != OTHER_FILE} == {
        k: v for k, v in patched_snapshot.items() if k != OTHER_FILE
    }
    assert not helpers.journal(fx).exists()
    assert fx.repo().porcelain_status() == [f" M {OTHER_FILE}"]  # the index is the patched commit's


def test_recovery_refuses_when_the_user_edited_a_file_of_the_move(fx):
    killed_at(fx, "ref-moved")
    head = fx.head()
    (fx.target / SERIES_FILE).write_text("my edit\n")
    before = helpers.tree_snapshot(fx.target)
    done = status(fx, "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    assert SERIES_FILE in done.stdout and "nothing was touched" in done.stdout
    assert "update-ref" in done.stdout and "stash" in done.stdout  # what to do
    assert helpers.tree_snapshot(fx.target) == before and fx.head() == head
    assert helpers.journal(fx).exists(), "kept: the move is still unfinished"
    again = helpers.run_cli(*apply_args(fx))
    assert again.returncode == 2 and (fx.target / SERIES_FILE).read_text() == "my edit\n"
    # the user saves the edit aside and puts the file back: the next status finishes the move
    (fx.target / SERIES_FILE).write_bytes(fx.repo().run_bytes("show", f"{fx.base_commit}:{SERIES_FILE}")[1])
    assert "finished an interrupted apply" in status(fx).stdout
    assert status(fx).returncode == 0


def test_recovery_part_way_through_the_file_writes_finishes_them(fx, tmp_path):
    patched, patched_snapshot = helpers.patched_reference(fx, tmp_path / "reference")
    killed_at(fx, "wrote-2")
    done = helpers.run_cli(*apply_args(fx))
    assert done.returncode == 0 and "finished an interrupted apply" in done.stdout, done.stdout + done.stderr
    assert fx.head() == patched and helpers.tree_snapshot(fx.target) == patched_snapshot
    assert fx.repo().porcelain_status() == []


def test_recovery_never_deletes_an_index_lock_it_did_not_create(fx):
    """status neither deletes a foreign .git/index.lock nor resets."""
    killed_at(fx, "ref-moved")
    lock = fx.target / ".git" / "index.lock"
    lock.write_bytes(b"another git's lock")
    before = helpers.tree_snapshot(fx.target)
    done = status(fx)
    assert done.returncode == 2
    assert "index.lock" in done.stderr and "patchkit did not create it" in done.stderr
    assert lock.read_bytes() == b"another git's lock"
    assert helpers.tree_snapshot(fx.target) == before
    lock.unlink()  # the user's call, as the hint says
    assert status(fx).returncode == 0


# ---------------------------------------------------------------------- item 3
def test_a_foreign_index_lock_is_refused_before_anything_moves(fx):
    """A foreign index lock is refused before the branch moves: no half update (branch moved, read-tree failed)."""
    lock = fx.target / ".git" / "index.lock"
    lock.write_bytes(b"")
    before, objects = helpers.tree_snapshot(fx.target), helpers.object_files(fx.target)
    code, doc = helpers.invoke_json(*apply_args(fx))
    assert code == 2 and doc["error"]["type"] == "NotWritable"
    assert "index.lock exists" in doc["error"]["message"] and doc["error"]["file"] == str(lock)
    assert fx.head() == fx.base_commit and helpers.tree_snapshot(fx.target) == before
    assert helpers.object_files(fx.target) == objects and not helpers.journal(fx).exists()
    assert status(fx).returncode == 1 and lock.exists(), "status leaves another git's lock alone"
    lock.unlink()
    assert helpers.invoke(*apply_args(fx)).exit_code == 0


def _chattr(flag: str, *paths) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    done = subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot set file attributes here: {done.stderr.strip()}")


def test_an_immutable_file_is_refused_before_anything_moves(fx):
    target_file = fx.target / SERIES_FILE
    _chattr("+i", target_file)
    try:
        before = helpers.tree_snapshot(fx.target)
        code, doc = helpers.invoke_json(*apply_args(fx))
        assert code == 2, doc
        assert SERIES_FILE in doc["error"]["message"] and "immutable" in doc["error"]["message"]
        assert "chattr -i" in doc["error"]["hint"]
        assert fx.head() == fx.base_commit and helpers.tree_snapshot(fx.target) == before
        assert not helpers.journal(fx).exists()
    finally:
        _chattr("-i", target_file)
    assert helpers.invoke(*apply_args(fx)).exit_code == 0


def test_a_read_only_target_is_exit_2_naming_the_path(fx):
    """Read-only as in a read-only mount: permission bits for a user, the immutable flag for root."""
    everything = [p for p in fx.target.rglob("*") if not p.is_symlink()] + [fx.target]
    before = helpers.tree_snapshot(fx.target)
    if os.geteuid() == 0:
        _chattr("+i", *everything)
    else:
        subprocess.run(["chmod", "-R", "a-w", str(fx.target)], check=True)
    try:
        done = helpers.run_cli(*apply_args(fx), "--json")
        assert done.returncode == 2, done.stdout + done.stderr
        assert str(fx.target) in done.stdout and "not writable" in done.stdout
        assert "Traceback" not in done.stderr
    finally:
        if os.geteuid() == 0:
            _chattr("-i", *everything)
        else:
            subprocess.run(["chmod", "-R", "u+w", str(fx.target)], check=True)
    assert helpers.tree_snapshot(fx.target) == before and fx.head() == fx.base_commit


def test_a_write_that_fails_after_the_ref_moved_is_rolled_back_exit_2(fx):
    """What preflight cannot see (the file became immutable a moment later): undo files and ref."""
    proc = helpers.start_paused(*apply_args(fx), "--json", step="ref-moved", seconds=3)
    before_bytes = (fx.target / SERIES_FILE).read_bytes()
    _chattr("+i", fx.target / SERIES_FILE)
    try:
        code, out, err = helpers.finish(proc)
    finally:
        _chattr("-i", fx.target / SERIES_FILE)
    assert code == 2, out + err
    assert "the branch was moved back and the tree is as it was" in out
    assert fx.head() == fx.base_commit
    assert (fx.target / SERIES_FILE).read_bytes() == before_bytes
    assert fx.repo().porcelain_status() == [] and not helpers.journal(fx).exists()


def test_an_ignored_file_in_the_way_is_refused_not_overwritten(fx):
    (fx.target / ".git" / "info").mkdir(exist_ok=True)
    (fx.target / ".git" / "info" / "exclude").write_text("pkg/extra.py\n")
    (fx.target / "pkg/extra.py").write_text("mine, ignored by git\n")  # patch 2 creates this file
    code, doc = helpers.invoke_json(*apply_args(fx))
    assert code == 2 and "pkg/extra.py: in the way" in doc["error"]["message"]
    assert (fx.target / "pkg/extra.py").read_text() == "mine, ignored by git\n"
    assert fx.head() == fx.base_commit


def test_a_linked_worktree_target_applies_and_recovers(fx, tmp_path):
    """Regression: a target made with `git worktree add` failed with a raw git error."""
    linked = tmp_path / "linked"
    fx.repo().run("worktree", "add", "-q", "--detach", str(linked), fx.base_commit)
    args = ("--set", str(fx.set_dir), "--target", str(linked))
    proc = helpers.start_paused("apply", *args, step="ref-moved")
    proc.kill()
    proc.communicate(timeout=60)
    done = helpers.run_cli("apply", *args)
    assert done.returncode == 0 and "finished an interrupted apply" in done.stdout, done.stdout + done.stderr
    code, doc = helpers.invoke_json("status", *args)
    assert code == 0 and doc["result"]["state"] == "applied"


def test_autocrlf_and_eol_attributes_of_the_target_do_not_change_the_bytes(fx):
    """core.autocrlf=true in the target does not make a fresh apply drift on every file."""
    repo = fx.repo()
    repo.run("config", "core.autocrlf", "true")  # the target's own config, which git reads
    (fx.target / ".git" / "info").mkdir(exist_ok=True)
    (fx.target / ".git" / "info" / "attributes").write_text("* text eol=crlf\n")
    assert helpers.invoke(*apply_args(fx)).exit_code == 0
    assert b"\r\n" not in (fx.target / SERIES_FILE).read_bytes()
    code, doc = helpers.invoke_json("status", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert (code, doc["result"]["state"], doc["result"]["drift"]) == (0, "applied", [])


def test_the_targets_hooks_never_run(fx):
    hooks = fx.target / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    marker = fx.target.parent / "hook-ran"
    for name in ("reference-transaction", "post-checkout", "post-index-change"):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> {marker}\nexit 1\n")
        (hooks / name).chmod(0o755)
    assert helpers.invoke(*apply_args(fx)).exit_code == 0
    assert not marker.exists()


def test_a_dry_run_works_on_a_target_nobody_may_write(fx):
    everything = [p for p in fx.target.rglob("*") if not p.is_symlink()] + [fx.target]
    if os.geteuid() == 0:
        _chattr("+i", *everything)
    else:
        subprocess.run(["chmod", "-R", "a-w", str(fx.target)], check=True)
    try:
        code, doc = helpers.invoke_json(*apply_args(fx), "--dry-run")
    finally:
        if os.geteuid() == 0:
            _chattr("-i", *everything)
        else:
            subprocess.run(["chmod", "-R", "u+w", str(fx.target)], check=True)
    assert code == 0 and doc["result"]["state"] == "dry-run", doc
