"""Refresh never removes patches implicitly, writes the set as one transaction, and
says exactly what it wrote."""

from __future__ import annotations

import json

from patchkit.manifest import Lock, LockedPatch, load, write_lock
from patchkit.patchset.series import sha256_file
from tests.patchset import helpers

ALL_PATCHES = 5


def refresh(fx, *extra):
    return helpers.invoke_json("refresh", "--set", str(fx.set_dir), "--target", str(fx.target), *extra)


def applied(fx):
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    return fx


def test_refresh_of_a_fresh_base_is_refused_and_the_set_is_untouched(fx):
    """`base fetch && refresh` is refused: it would delete every patch and empty series and lock."""
    before = helpers.set_snapshot(fx.set_dir)
    code, doc = refresh(fx)
    assert code == 2, doc
    assert f"refresh would remove all {ALL_PATCHES} patches" in doc["error"]["message"]
    assert "no commits after the base" in doc["error"]["message"]
    assert "patchkit apply" in doc["error"]["hint"] and "--allow-remove" in doc["error"]["hint"]
    assert helpers.set_snapshot(fx.set_dir) == before


def test_refresh_after_a_failed_apply_is_refused(fx, tmp_path):
    """A conflict leaves the target at its base: refresh must not read that as 'every patch removed'."""
    broken = helpers.copy_set(fx.set_dir, tmp_path / "broken-set")
    patch = broken / "0003-Change-VALUE_15-in-util.patch"
    patch.write_text(patch.read_text().replace(" VALUE_13 = 13\n", " VALUE_13 = 31\n"))
    lock = load(broken).lock
    write_lock(broken, Lock(lock.base_tree, tuple(LockedPatch(p.file, sha256_file(broken / p.file))
                                                  for p in lock.patches), lock.post_image))
    failed = helpers.invoke("apply", "--set", str(broken), "--target", str(fx.target))
    assert failed.exit_code == 1 and "CONFLICT" in failed.output
    before = helpers.set_snapshot(fx.set_dir)
    code, doc = refresh(fx)
    assert code == 2 and "no commits after the base" in doc["error"]["message"]
    assert helpers.set_snapshot(fx.set_dir) == before


def test_allow_remove_empties_the_set_on_purpose_and_lists_what_it_removed(fx):
    code, doc = refresh(fx, "--allow-remove")
    assert code == 0, doc
    result = doc["result"]
    assert result["state"] == "written"
    assert len(result["files_removed"]) == ALL_PATCHES
    assert set(result["files_written"]) == {"series", "manifest.toml"}
    assert (fx.set_dir / "series").read_text() == "# tiny set: one patch per line\n"
    assert not list(fx.set_dir.glob("*.patch"))


def test_a_round_trip_says_nothing_changed_and_writes_nothing(fx):
    applied(fx)
    before = {p.name: p.stat().st_mtime_ns for p in fx.set_dir.iterdir()}
    code, doc = refresh(fx)
    assert code == 0 and doc["result"]["state"] == "unchanged"
    assert doc["result"]["files_written"] == [] and doc["result"]["written"] is False
    assert {p.name: p.stat().st_mtime_ns for p in fx.set_dir.iterdir()} == before, "no file rewritten"
    human = helpers.invoke("refresh", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert "nothing changed" in human.output


def test_an_amended_commit_names_exactly_the_files_written(fx):
    applied(fx)
    repo = fx.repo()
    (fx.target / "bin/run.sh").write_text("#!/bin/sh\necho run\necho patched twice\n")
    repo.run("add", "-A")
    message = repo.commit_message("HEAD")
    env = helpers.identity_env("Ada Lovelace", "ada@example.org", "2026-02-05T10:00:00+0000")
    amended = repo.run("commit-tree", repo.run("write-tree"), "-p", "HEAD^", "-F", "-", env=env, input=message)
    repo.run("reset", "-q", "--hard", amended)
    code, doc = refresh(fx)
    assert code == 0
    assert doc["result"]["files_written"] == ["0005-Patch-run.sh-and-f9.patch", "manifest.toml"]
    human = helpers.invoke("refresh", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert "nothing changed" in human.output
    # the human message names the files
    (fx.target / "pkg/seventh.py").write_text("SEVEN = 7\n")
    helpers.commit_all(repo, "Add a seventh module\n", "2026-03-03T00:00:00+0000")
    human = helpers.invoke("refresh", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert "wrote 0006-Add-a-seventh-module.patch, manifest.toml, series" in human.output


def _new_commit(fx):
    applied(fx)
    (fx.target / "pkg/sixth.py").write_text("SIX = 6\n")
    helpers.commit_all(fx.repo(), "Add a sixth module\n", "2026-03-01T00:00:00+0000")


def _expected_set(fx, tmp_path):
    """The set a complete refresh writes (refreshed on a copy)."""
    copy = helpers.copy_set(fx.set_dir, tmp_path / "expected")
    code, _ = helpers.invoke_json("refresh", "--set", str(copy), "--target", str(fx.target))
    assert code == 0
    return helpers.set_snapshot(copy)


def test_kill_9_after_the_set_journal_is_rolled_forward_by_the_next_reader(fx, tmp_path):
    """kill -9 during refresh, after the set journal: the next reader rolls the write forward (patches and lock)."""
    _new_commit(fx)
    expected = _expected_set(fx, tmp_path)
    proc = helpers.start_paused("refresh", "--set", str(fx.set_dir), "--target", str(fx.target), step="set-renamed-1")
    proc.kill()
    proc.communicate(timeout=60)
    assert (fx.set_dir / ".patchkit-write.json").exists()
    fresh = tmp_path / "fresh"  # the next reader finishes the write: the set matches its lock again
    assert helpers.invoke("base", "fetch", "--set", str(fx.set_dir), "--dest", str(fresh)).exit_code == 0
    code, doc = helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(fresh))
    assert code == 0, doc
    assert helpers.set_snapshot(fx.set_dir) == expected
    assert (fresh / "pkg/sixth.py").read_text() == "SIX = 6\n"


def test_kill_9_before_the_set_journal_leaves_the_old_set(fx):
    _new_commit(fx)
    before = helpers.set_snapshot(fx.set_dir)
    proc = helpers.start_paused("refresh", "--set", str(fx.set_dir), "--target", str(fx.target),
                                step="set-written-aside")
    proc.kill()
    proc.communicate(timeout=60)
    visible = {k: v for k, v in helpers.set_snapshot(fx.set_dir).items() if not k.startswith(".patchkit-tmp-")}
    assert visible == before, "only hidden temporary files were written"
    code, doc = helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(fx.target), "--dry-run")
    assert code == 1 and doc["result"]["state"] == "drift"  # the old set, intact; the tree has a new commit
    assert refresh(fx)[0] == 0
    assert not [p for p in fx.set_dir.iterdir() if p.name.startswith(".patchkit")], "temporaries cleaned"


def test_sigterm_during_the_set_write_completes_it_and_exits_130(fx, tmp_path):
    _new_commit(fx)
    expected = _expected_set(fx, tmp_path)
    proc = helpers.start_paused("refresh", "--set", str(fx.set_dir), "--target", str(fx.target), "--json",
                                step="set-journal", seconds=2)
    proc.terminate()
    code, out, err = helpers.finish(proc)
    assert code == 130, out + err
    assert "completed first" in json.loads(out)["error"]["message"]
    assert helpers.set_snapshot(fx.set_dir) == expected
