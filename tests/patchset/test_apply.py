"""patchkit apply: all or nothing, no-op re-run, drift, conflict report with rollback, dry run."""

from __future__ import annotations

from patchkit.manifest import Lock, LockedPatch, load, write_lock
from patchkit.patchset.series import sha256_file
from tests.patchset import helpers


def apply(fx, *extra):
    return helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target), *extra)


def test_apply_records_one_commit_per_patch_with_trailers_and_reproducible_ids(fx, tmp_path):
    result = apply(fx)
    assert result.exit_code == 0, result.output
    repo = fx.repo()
    log = repo.run("log", "--format=%an|%ad|%s", "--date=iso-strict", f"{fx.base_commit}..HEAD").splitlines()
    assert len(log) == 5
    assert log[-1] == "Ada Lovelace|2026-02-01T10:00:00+00:00|Patch f2 in core"
    message = repo.commit_message("HEAD")
    assert "Patchkit-Set: tiny@1.0.0\nPatchkit-Patch: 0005-Patch-run.sh-and-f9.patch\n" in message
    assert (fx.target / "pkg/new_name.py").exists() and not (fx.target / "pkg/old_name.py").exists()
    assert (fx.target / "bin/run.sh").stat().st_mode & 0o111, "the executable bit survives"
    assert repo.porcelain_status() == []
    # a second tree gets the very same commit ids: commits are reproducible
    other = tmp_path / "other"
    assert helpers.invoke("base", "fetch", "--set", str(fx.set_dir), "--dest", str(other)).exit_code == 0
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(other)).exit_code == 0
    assert helpers.Repo(other).run("rev-parse", "HEAD") == fx.head()


def test_rerun_on_applied_tree_is_a_noop_that_says_so(fx):
    assert apply(fx).exit_code == 0
    head = fx.head()
    code, doc = helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert code == 0 and doc["result"]["state"] == "already-applied"
    assert fx.head() == head
    assert "already applied" in apply(fx).output


def test_partly_applied_tree_is_drift_exit_1_listing_files(fx):
    assert apply(fx).exit_code == 0
    fx.repo().run("reset", "-q", "--hard", "HEAD~2")
    head, snap = fx.head(), helpers.tree_snapshot(fx.target)
    code, doc = helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert code == 1 and doc["result"]["state"] == "drift"
    paths = {d["path"] for d in doc["result"]["drift"]}
    assert {"0004-Rename-old_name-to-new_name-drop-gone.py.patch", "pkg/new_name.py", "bin/run.sh"} <= paths
    assert fx.head() == head and helpers.tree_snapshot(fx.target) == snap


def test_tree_edited_after_apply_is_drift_exit_1(fx):
    assert apply(fx).exit_code == 0
    (fx.target / "pkg/util.py").write_text("edited\n")
    result = apply(fx)
    assert result.exit_code == 1
    assert "DRIFT" in result.output and "pkg/util.py" in result.output
    assert (fx.target / "pkg/util.py").read_text() == "edited\n", "drift is reported, never overwritten"
    # committed edits on top are drift too
    fx.repo().run("add", "-A")
    helpers.commit_all(fx.repo(), "my edit\n", "2026-03-01T00:00:00+0000")
    code, doc = helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert code == 1 and any(d["path"] == "pkg/util.py" for d in doc["result"]["drift"])


def test_dirty_base_is_refused_exit_2_naming_the_file(fx):
    (fx.target / "stray.txt").write_text("x")
    result = apply(fx)
    assert result.exit_code == 2
    assert "stray.txt" in result.output
    assert fx.head() == fx.base_commit


def test_wrong_base_is_refused_exit_2_naming_differing_files(fx):
    (fx.target / "README.txt").write_text("not the base\n")
    helpers.commit_all(fx.repo(), "other base\n", "2026-03-01T00:00:00+0000")
    # make it look unrelated: rewrite history so the base is not an ancestor
    fx.repo().run("reset", "-q", "--soft", fx.base_commit)
    tree = fx.repo().run("write-tree")
    orphan = fx.repo().run(
        "commit-tree", tree, "-m", "orphan", env=helpers.identity_env("x", "x@x", "2026-03-01T00:00:00+0000")
    )
    fx.repo().run("reset", "-q", "--hard", orphan)
    result = apply(fx)
    assert result.exit_code == 2
    assert "not the pinned base" in result.output and "README.txt" in result.output


def test_dry_run_checks_everything_and_changes_nothing(fx):
    snap, head = helpers.tree_snapshot(fx.target), fx.head()
    objects = helpers.object_files(fx.target)
    code, doc = helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(fx.target), "--dry-run")
    assert code == 0 and doc["result"]["state"] == "dry-run"
    assert helpers.object_files(fx.target) == objects
    assert [p["patch"] for p in doc["result"]["patches"]][2] == "0003-Change-VALUE_15-in-util.patch"
    assert fx.head() == head and helpers.tree_snapshot(fx.target) == snap


def _break_patch_3(fx) -> None:
    """Edit patch 3's context (as a bad hand edit would) and re-pin only its hash."""
    patch = fx.set_dir / "0003-Change-VALUE_15-in-util.patch"
    patch.write_text(patch.read_text().replace(" VALUE_13 = 13\n", " VALUE_13 = 31\n"))
    lock = load(fx.set_dir).lock
    patches = tuple(LockedPatch(p.file, sha256_file(fx.set_dir / p.file)) for p in lock.patches)
    write_lock(fx.set_dir, Lock(lock.base_tree, patches, lock.post_image))


def test_conflict_in_patch_3_of_5_leaves_target_byte_identical_and_names_hunk(fx):
    _break_patch_3(fx)
    snap, head = helpers.tree_snapshot(fx.target), fx.head()
    objects = helpers.object_files(fx.target)
    code, doc = helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert code == 1
    conflict = doc["result"]["conflict"]
    assert conflict["patch"] == "0003-Change-VALUE_15-in-util.patch"
    assert conflict["file"] == "pkg/util.py" and conflict["hunk"] == 1 and conflict["line"] == 13
    assert "VALUE_13 = 31" in conflict["expected"] and "VALUE_13 = 13" in conflict["actual"]
    assert fx.head() == head == fx.base_commit
    assert helpers.tree_snapshot(fx.target) == snap
    assert helpers.object_files(fx.target) == objects, "staged objects stayed in quarantine"
    human = helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert human.exit_code == 1
    assert "CONFLICT: 0003-Change-VALUE_15-in-util.patch, hunk 1 does not apply at pkg/util.py:13" in human.output
    assert "expected by the patch" in human.output


def test_lock_refuses_a_conflicting_series(fx):
    _break_patch_3(fx)
    result = helpers.invoke("lock", "--set", str(fx.set_dir), "--base", str(fx.target))
    assert result.exit_code == 1
    assert "0003-Change-VALUE_15-in-util.patch hunk 1 does not apply at pkg/util.py:13" in result.output


def test_detached_head_is_moved_too(fx):
    fx.repo().run("checkout", "-q", "--detach")
    assert apply(fx).exit_code == 0
    assert fx.repo().head_ref() == "HEAD"
    assert len(fx.repo().first_parent_log(fx.base_commit)) == 5


def test_conflict_report_shows_code_with_brackets_verbatim(fx):
    patch = fx.set_dir / "0003-Change-VALUE_15-in-util.patch"
    patch.write_text(patch.read_text().replace(" VALUE_13 = 13\n", " VALUE_13 = [bold]x[/bold]\n"))
    lock = load(fx.set_dir).lock
    patches = tuple(LockedPatch(p.file, sha256_file(fx.set_dir / p.file)) for p in lock.patches)
    write_lock(fx.set_dir, Lock(lock.base_tree, patches, lock.post_image))
    result = apply(fx)
    assert result.exit_code == 1
    assert "VALUE_13 = [bold]x[/bold]" in result.output
