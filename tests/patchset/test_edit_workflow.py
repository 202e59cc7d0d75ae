"""The maintainer's edit loop with real git: commit, amend or fixup in the applied tree, `patchkit refresh`,
then `status`, `apply` and `verify` agree the tree is exactly the set (issue 37, point 5), and every hint
printed on the way, followed literally, ends in that exact tree (no loop back to the same state)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

from patchkit.git import Repo
from tests.patchset import helpers

ME = {"GIT_AUTHOR_NAME": "Grace Hopper", "GIT_AUTHOR_EMAIL": "grace@example.org",
      "GIT_COMMITTER_NAME": "Grace Hopper", "GIT_COMMITTER_EMAIL": "grace@example.org"}


def git(fx, *args: str) -> str:
    """git as a maintainer types it in the tree (identity from the environment, no editor)."""
    env = {**os.environ, **ME, "GIT_EDITOR": "true", "GIT_SEQUENCE_EDITOR": "true"}
    return subprocess.run(["git", "-C", str(fx.target), *args], env=env, check=True, capture_output=True,
                          text=True).stdout


def pk(fx, verb: str, *extra: str):
    return helpers.invoke_json(verb, "--set", str(fx.set_dir), "--target", str(fx.target), *extra)


def applied(fx):
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    return fx


def assert_exact_everywhere(fx, tmp_path) -> None:
    """status exit 0, apply says already applied, verify runs, and the tree is what a fresh apply makes."""
    code, doc = pk(fx, "status")
    assert code == 0 and doc["result"]["state"] == "applied", doc["result"]
    assert doc["result"]["drift"] == [] and doc["result"]["fix"] == ""
    code, doc = pk(fx, "apply")
    assert (code, doc["result"]["state"]) == (0, "already-applied"), doc["result"]
    verify = helpers.invoke("verify", "--set", str(fx.set_dir), "--target", str(fx.target), "--gate", "compile")
    assert verify.exit_code == 0, verify.output
    head, files = helpers.patched_reference(fx, tmp_path / "fresh")
    assert fx.head() == head, "the refreshed tree holds the very commits apply makes from the refreshed set"
    assert helpers.tree_snapshot(fx.target) == files


def test_a_new_commit_on_top_then_refresh_is_exact(fx, tmp_path):
    """The issue's loop: `git commit -am` on the applied set, refresh writes 0006, status was 'missing 0006'."""
    applied(fx)
    (fx.target / "pkg/util.py").write_text((fx.target / "pkg/util.py").read_text() + "EXTRA = 1\n")
    git(fx, "commit", "-qam", "Add EXTRA to util")
    code, doc = pk(fx, "refresh")
    assert code == 0 and doc["result"]["files_written"] == ["0006-Add-EXTRA-to-util.patch", "manifest.toml", "series"]
    assert doc["result"]["head_after"] != doc["result"]["head_before"], "the new commit is recorded with trailers"
    assert_exact_everywhere(fx, tmp_path)
    # amended again, with a new subject: the patch keeps its file name (the trailer names it), nothing is removed
    (fx.target / "pkg/util.py").write_text((fx.target / "pkg/util.py").read_text() + "EXTRA_2 = 2\n")
    git(fx, "commit", "-qa", "--amend", "-m", "Add EXTRA and EXTRA_2 to util\n\n" + Repo(fx.target).run(
        "log", "-1", "--format=%(trailers)"))
    code, doc = pk(fx, "refresh")
    assert code == 0, doc
    assert {c["patch"]: c["status"] for c in doc["result"]["changes"]}["0006-Add-EXTRA-to-util.patch"] == \
        "content changed"
    assert_exact_everywhere(fx, tmp_path / "second")


def test_an_amended_patch_commit_then_refresh_is_exact(fx, tmp_path):
    applied(fx)
    helpers.write(fx.target / "bin/run.sh", helpers.RUN_SH + "echo patched\necho amended\n")
    git(fx, "commit", "-qa", "--amend", "--no-edit")
    code, doc = pk(fx, "refresh")
    assert code == 0
    assert {c["patch"]: c["status"] for c in doc["result"]["changes"]}["0005-Patch-run.sh-and-f9.patch"] == \
        "content changed"
    assert_exact_everywhere(fx, tmp_path)


def test_a_fixup_autosquashed_into_its_patch_then_refresh_is_exact(fx, tmp_path):
    """The HELPERS flow: `git commit --fixup=<sha>` + `rebase -i --autosquash <base>` + refresh."""
    applied(fx)
    second = Repo(fx.target).first_parent_log(fx.base_commit)[1]
    helpers.write(fx.target / "pkg/extra.py", "def extra():\n    return 'fixed'\n")
    git(fx, "commit", "-qa", f"--fixup={second}")
    git(fx, "rebase", "-q", "-i", "--autosquash", fx.base_commit)
    code, doc = pk(fx, "refresh")
    assert code == 0
    statuses = {c["patch"]: c["status"] for c in doc["result"]["changes"]}
    assert statuses["0002-Add-pkg-extra.py.patch"] == "content changed" and len(statuses) == 5
    assert_exact_everywhere(fx, tmp_path)


def test_a_commit_inserted_below_the_set_then_refresh_is_exact(fx, tmp_path):
    """A new first commit (every later one rebased onto it) takes number 0001; the rest keep their names."""
    applied(fx)
    commits = Repo(fx.target).first_parent_log(fx.base_commit)
    git(fx, "reset", "-q", "--hard", fx.base_commit)
    helpers.write(fx.target / "README.txt", "tiny upstream, documented\n")
    git(fx, "commit", "-qam", "Document the tiny upstream")
    git(fx, "cherry-pick", *commits)
    code, doc = pk(fx, "refresh")
    assert code == 0 and doc["result"]["changes"][0] == {
        "patch": "0001-Document-the-tiny-upstream.patch", "status": "new", "context_changed": False,
        "added": 0, "removed": 0, "detail": ""}
    assert_exact_everywhere(fx, tmp_path)


def _hinted_commands(text: str) -> list[list[str]]:
    """The `patchkit ...` and `git ...` commands a hint names, in order, as argument lists."""
    return [shlex.split(found) for found in re.findall(r"`((?:patchkit|git) [^`]+)`", text)]


def _follow(fx, hint: str) -> None:
    """Run the first alternative of a hint literally (what a maintainer pastes)."""
    first = hint.split("; or")[0]
    commands = _hinted_commands(first)
    assert commands, hint
    for command in commands:
        if command[0] == "git":
            subprocess.run(command, env={**os.environ, **ME}, check=True, capture_output=True)
        else:
            result = helpers.invoke(*command[1:])
            assert result.exit_code == 0, (command, result.output)


def test_every_hint_in_the_flow_leads_to_an_exact_tree(fx):
    """Whatever the state (a new commit, an uncommitted edit then committed, a partly applied tree, the bare
    base), the fix status, apply and verify print names this set and target, and doing it ends in exit 0."""
    applied(fx)
    helpers.write(fx.target / "pkg/new.py", "NEW = True\n")
    git(fx, "add", "pkg/new.py")
    git(fx, "commit", "-qm", "Add pkg/new.py")
    code, doc = pk(fx, "status")
    assert code == 1 and doc["result"]["state"] == "drift"
    hint = doc["result"]["fix"]
    assert f"`patchkit refresh --set {fx.set_dir} --target {fx.target}`" in hint, hint
    code, apply_doc = pk(fx, "apply")
    assert code == 1 and apply_doc["result"]["fix"] == hint, "apply and status give the same way out"
    verify = helpers.invoke("verify", "--set", str(fx.set_dir), "--target", str(fx.target), "--gate", "compile")
    assert verify.exit_code == 2 and "patchkit refresh --set" in verify.output
    _follow(fx, hint)
    assert pk(fx, "status")[0] == 0, "refresh, as hinted, ends the drift"
    # a partly applied tree: the hint resets it and applies (both named with this set and target)
    git(fx, "reset", "-q", "--hard", "HEAD~3")
    code, doc = pk(fx, "status")
    assert (code, doc["result"]["state"]) == (1, "partial")
    _follow(fx, doc["result"]["fix"])
    assert pk(fx, "status")[0] == 0
    # the unpatched base
    git(fx, "reset", "-q", "--hard", fx.base_commit)
    code, doc = pk(fx, "status")
    assert (code, doc["result"]["state"]) == (1, "base")
    _follow(fx, doc["result"]["fix"])
    assert pk(fx, "status")[0] == 0


def test_apply_does_not_call_a_tree_applied_that_status_calls_drift(fx):
    """An applied commit amended to add a file (the post-image never names it): status said drift, apply
    said 'already applied'. Both now read the one definition of exact."""
    applied(fx)
    helpers.write(fx.target / "pkg/stray.py", "STRAY = 1\n")
    git(fx, "add", "pkg/stray.py")
    git(fx, "commit", "-q", "--amend", "--no-edit")
    status_code, status_doc = pk(fx, "status")
    apply_code, apply_doc = pk(fx, "apply")
    assert (status_code, apply_code) == (1, 1)
    assert apply_doc["result"]["state"] == "drift"
    assert [e["reason"] for e in apply_doc["result"]["drift"]] == ["commit differs from its patch"]
    assert apply_doc["result"]["drift"] == status_doc["result"]["drift"]
