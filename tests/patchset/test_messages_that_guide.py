"""Messages a newcomer meets in the first hour say what is true and what to do next: a pristine base is
"not applied" (not a page of drift), a folder that is no git tree gets a fix that works, a truncated
patch is named by file and line, and a commit of the user's on top of the set is called that."""

from __future__ import annotations

import subprocess

from tests.patchset import helpers


def test_status_of_a_pristine_base_says_not_applied_without_drift_rows(fx):
    result = helpers.invoke("status", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert result.exit_code == 1
    assert "not applied: the pinned base, unpatched; `patchkit apply` applies the 5 patches" in result.output
    assert "drift" not in result.output.split("\n", 1)[1] and "missing" not in result.output
    code, doc = helpers.invoke_json("status", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert doc["result"]["state"] == "base" and doc["result"]["drift"] == [] and len(doc["result"]["missing"]) == 5


def test_a_folder_that_is_no_git_tree_gets_a_fix_that_works(fx, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine\n")
    code, doc = helpers.invoke_json("status", "--set", str(fx.set_dir), "--target", str(full))
    assert code == 2 and "is not a git repository" in doc["error"]["message"]
    assert "pass --target" in doc["error"]["hint"] and "--dest NEW_DIR" in doc["error"]["hint"]
    empty = tmp_path / "empty"
    empty.mkdir()
    code, doc = helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(empty))
    hint = doc["error"]["hint"]
    assert code == 2 and f"patchkit base fetch --dest {empty}" in hint
    # and the fix it gives does work
    assert helpers.invoke("base", "fetch", "--set", str(fx.set_dir), "--dest", str(empty)).exit_code == 0
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(empty)).exit_code == 0


def test_lock_names_the_line_of_a_truncated_patch(fx):
    patch = sorted(fx.set_dir.glob("0001-*.patch"))[0]
    lines = patch.read_text().splitlines(keepends=True)
    patch.write_text("".join(lines[:-3]))
    hunk = next(n for n, line in enumerate(lines, 1) if line.startswith("@@ "))
    code, doc = helpers.invoke_json("lock", "--set", str(fx.set_dir))
    error = doc["error"]
    assert code == 2 and error["file"] == str(patch) and error["line"] == hunk, error
    assert f"the hunk at line {hunk} is shorter than its header says" in error["message"]
    assert "truncated" in error["hint"]


def test_a_commit_of_the_users_on_top_of_the_set_is_called_that(fx):
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    core = fx.target / "pkg" / "core.py"
    core.write_text(core.read_text() + "# my edit\n")
    subprocess.run(["git", "-C", str(fx.target), "-c", "user.name=Me", "-c", "user.email=me@example.com", "commit", "-qam",
                    "My edit of core"], check=True)
    mine = fx.head()[:12]
    result = helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert result.exit_code == 1
    assert f"your commit on top of the set {mine} My edit of core" in " ".join(result.output.split())
    flat = " ".join(result.output.split())
    assert f"run `patchkit refresh --set {fx.set_dir} --target {fx.target}` to write your commits into the set" in flat
    assert "trailers" not in result.output
    rows = [line for line in result.output.splitlines() if line.startswith("  ") and "to fix:" not in line]
    assert len(rows) == 2, rows  # the commit and the one file it changed, not every file of the set
