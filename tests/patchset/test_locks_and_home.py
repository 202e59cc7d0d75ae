"""One patchkit at a time per target; one home per checkout; shared caches; clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from patchkit import paths
from tests.patchset import helpers


def apply_args(fx):
    return ("apply", "--set", str(fx.set_dir), "--target", str(fx.target))


# ---------------------------------------------------------------------- the per-target lock
def test_a_second_apply_waits_for_the_first_then_finds_it_applied(fx, tmp_path):
    """Regression: two applies at once ended in a raw `cannot lock ref` or exit 3."""
    first = helpers.start_paused(*apply_args(fx), step="staged-2", seconds=3)
    second = subprocess.Popen([sys.executable, "-m", "patchkit", *apply_args(fx), "--json"],
                              env=helpers.cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, out, err = helpers.finish(second)
    assert helpers.finish(first)[0] == 0
    assert code == 0, out + err
    assert f"another patchkit apply (pid {first.pid}) holds {fx.target}; waiting" in err
    assert json.loads(out)["result"]["state"] == "already-applied"


def test_a_second_apply_gives_up_with_exit_2_after_the_wait(fx):
    first = helpers.start_paused(*apply_args(fx), step="staged-1", seconds=30)
    try:
        done = helpers.run_cli(*apply_args(fx), "--json", env={"PATCHKIT_LOCK_WAIT": "0.5"})
        assert done.returncode == 2, done.stdout + done.stderr
        error = json.loads(done.stdout)["error"]
        assert error["type"] == "LockBusy" and f"holds {fx.target}" in error["message"]
        assert "PATCHKIT_LOCK_WAIT" in error["hint"]
    finally:
        first.terminate()
        helpers.finish(first)
    assert fx.head() == fx.base_commit


def test_refresh_waits_for_an_apply_of_its_target(fx):
    first = helpers.start_paused(*apply_args(fx), step="staged-1", seconds=30)
    try:
        done = helpers.run_cli("refresh", "--set", str(fx.set_dir), "--target", str(fx.target),
                               env={"PATCHKIT_LOCK_WAIT": "0.3"})
        assert done.returncode == 2 and "another patchkit apply" in done.stderr
    finally:
        first.terminate()
        helpers.finish(first)


def test_status_without_a_journal_does_not_wait_for_the_lock(fx):
    first = helpers.start_paused(*apply_args(fx), step="staged-1", seconds=30)
    try:
        done = helpers.run_cli("status", "--set", str(fx.set_dir), "--target", str(fx.target),
                               env={"PATCHKIT_LOCK_WAIT": "0"})
        assert done.returncode == 1 and "base" in done.stdout  # a read: answered at once
    finally:
        first.terminate()
        helpers.finish(first)


def test_a_lock_held_by_a_killed_process_is_free_at_once(fx):
    first = helpers.start_paused(*apply_args(fx), step="staged-1")
    first.kill()
    first.communicate(timeout=60)
    done = helpers.run_cli(*apply_args(fx), env={"PATCHKIT_LOCK_WAIT": "0"})
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------- the home and the caches
def _checkout(tmp_path, template_set):
    root = tmp_path / "checkout"
    helpers.copy_set(template_set, root / "ddtree_patches" / "v1")
    (root / "sub" / "deeper").mkdir(parents=True)
    return root


def test_the_home_is_found_once_per_checkout_from_any_subdirectory(template, tmp_path, monkeypatch):
    """Regression: running from a subdirectory created a second .patchkit home."""
    _, commit, set_dir = template
    root = _checkout(tmp_path, set_dir)
    monkeypatch.delenv("PATCHKIT_HOME")
    env = {k: v for k, v in helpers.cli_env().items() if k != "PATCHKIT_HOME"}
    for cwd in (root, root / "sub" / "deeper"):
        done = subprocess.run([sys.executable, "-m", "patchkit", "base", "fetch", "--json"], cwd=cwd, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        expected = root / ".patchkit" / "trees" / f"upstream-{commit[:12]}"
        assert json.loads(done.stdout)["result"]["path"] == str(expected)
    assert not (root / "sub" / ".patchkit").exists() and not (root / "sub" / "deeper" / ".patchkit").exists()
    monkeypatch.chdir(root / "sub" / "deeper")
    assert paths.home() == root / ".patchkit"
    assert paths.default_set_dir() == root / "ddtree_patches" / "v1"


def test_caches_are_shared_in_the_user_cache_dir_unless_a_home_is_set(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("PATCHKIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("PATCHKIT_HOME")
    monkeypatch.chdir(tmp_path)
    assert paths.cache_dir() == tmp_path / "xdg-cache" / "patchkit"
    assert paths.envs_dir() == tmp_path / "xdg-cache" / "patchkit" / "envs"
    monkeypatch.setenv("PATCHKIT_HOME", str(tmp_path / "home"))
    assert paths.cache_dir() == tmp_path / "home" / "cache", "an explicit home is self-contained"
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "shared"))
    assert paths.cache_dir() == tmp_path / "shared"


# ---------------------------------------------------------------------- clean
def _trees(template, tmp_path):
    _, _, set_dir = template
    home = paths.trees_dir()
    clean_tree, edited_tree, applied_tree = home / "a-clean", home / "b-edited", home / "c-applied"
    for tree in (clean_tree, edited_tree, applied_tree):
        assert helpers.invoke("base", "fetch", "--set", str(set_dir), "--dest", str(tree)).exit_code == 0
    (edited_tree / "pkg/core.py").write_text("my unsaved work\n")
    assert helpers.invoke("apply", "--set", str(set_dir), "--target", str(applied_tree)).exit_code == 0
    env = paths.envs_dir() / "0123456789abcdef"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("#!/bin/sh\n")
    return clean_tree, edited_tree, applied_tree, env


def test_clean_lists_with_dry_run_and_keeps_trees_with_user_work(template, tmp_path):
    clean_tree, edited_tree, applied_tree, env = _trees(template, tmp_path)
    code, doc = helpers.invoke_json("clean", "--dry-run")
    assert code == 1  # something would be kept
    actions = {item["path"]: (item["kind"], item["action"]) for item in doc["result"]["items"]}
    assert actions == {
        str(clean_tree): ("tree", "would remove"),
        str(edited_tree): ("tree", "kept"),
        str(applied_tree): ("tree", "would remove"),
        str(env): ("env", "would remove"),
    }
    assert all(p.exists() for p in (clean_tree, edited_tree, applied_tree, env)), "a dry run removes nothing"
    kept = next(i for i in doc["result"]["items"] if i["action"] == "kept")
    assert "uncommitted changes: pkg/core.py" in kept["reason"]

    code, doc = helpers.invoke_json("clean")
    assert code == 1
    assert not clean_tree.exists() and not applied_tree.exists() and not env.exists()
    assert (edited_tree / "pkg/core.py").read_text() == "my unsaved work\n"
    human = helpers.invoke("clean", "--trees", "--force")
    assert human.exit_code == 0 and "removed" in human.output and not edited_tree.exists()


def test_clean_keeps_a_tree_with_a_commit_of_the_users(template, tmp_path):
    _, _, set_dir = template
    tree = paths.trees_dir() / "mine"
    assert helpers.invoke("base", "fetch", "--set", str(set_dir), "--dest", str(tree)).exit_code == 0
    assert helpers.invoke("apply", "--set", str(set_dir), "--target", str(tree)).exit_code == 0
    (tree / "mine.txt").write_text("committed work\n")
    helpers.commit_all(helpers.Repo(tree), "my work\n", "2026-04-01T00:00:00+0000")
    code, doc = helpers.invoke_json("clean", "--trees")
    assert code == 1 and doc["result"]["items"][0]["action"] == "kept"
    assert "1 commit(s) not made by patchkit apply" in doc["result"]["items"][0]["reason"]
    assert (tree / "mine.txt").exists()


def test_clean_never_removes_a_tree_in_use(fx, template, tmp_path):
    _, _, set_dir = template
    tree = paths.trees_dir() / "busy"
    assert helpers.invoke("base", "fetch", "--set", str(set_dir), "--dest", str(tree)).exit_code == 0
    holder = helpers.start_paused("apply", "--set", str(set_dir), "--target", str(tree), step="staged-1",
                                  env={"PATCHKIT_HOME": os.environ["PATCHKIT_HOME"]})
    try:
        code, doc = helpers.invoke_json("clean", "--trees", "--force")
        assert code == 1 and doc["result"]["items"][0]["action"] == "kept"
        assert "another patchkit apply" in doc["result"]["items"][0]["reason"]
        assert tree.exists()
    finally:
        holder.terminate()
        helpers.finish(holder)
