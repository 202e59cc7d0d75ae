"""patchkit base fetch for git bases (fast): clone at the pin, cached second fetch, --from-git."""

from __future__ import annotations

from patchkit import paths
from tests.patchset import helpers


def test_git_base_is_cloned_at_the_pinned_commit_and_reused(template, tmp_path):
    upstream, commit, set_dir = template
    dest = tmp_path / "tree"
    code, doc = helpers.invoke_json("base", "fetch", "--set", str(set_dir), "--dest", str(dest))
    assert code == 0 and doc["result"]["commit"] == commit and doc["result"]["cached"] is False
    assert helpers.Repo(dest).run("rev-parse", "HEAD") == commit
    assert helpers.Repo(dest).porcelain_status() == []
    code, doc = helpers.invoke_json("base", "fetch", "--set", str(set_dir), "--dest", str(dest))
    assert code == 0 and doc["result"]["cached"] is True


def test_default_dest_is_under_patchkit_home(template, tmp_path, monkeypatch):
    upstream, commit, set_dir = template
    monkeypatch.setenv("PATCHKIT_HOME", str(tmp_path / "pkhome"))
    code, doc = helpers.invoke_json("base", "fetch", "--set", str(set_dir))
    assert code == 0
    assert doc["result"]["path"] == str(tmp_path / "pkhome" / "trees" / f"upstream-{commit[:12]}")
    # apply and status find the same default target
    assert helpers.invoke("apply", "--set", str(set_dir)).exit_code == 0
    assert helpers.invoke_json("status", "--set", str(set_dir))[1]["result"]["state"] == "applied"


def test_from_git_uses_an_existing_clone(template, tmp_path):
    upstream, commit, set_dir = template
    clone = tmp_path / "my-clone"
    helpers.Repo(tmp_path).run("clone", "-q", str(upstream), str(clone))
    helpers.write(clone / "later.txt", "upstream moved on\n")
    helpers.commit_all(helpers.Repo(clone), "later upstream work\n", "2026-05-01T00:00:00+0000")
    dest = tmp_path / "tree"
    code, doc = helpers.invoke_json(
        "base", "fetch", "--set", str(set_dir), "--from-git", str(clone), "--dest", str(dest)
    )
    assert code == 0 and doc["result"]["commit"] == commit
    assert not (dest / "later.txt").exists()


def test_missing_commit_is_refused(template, tmp_path):
    upstream, commit, set_dir = template
    other = tmp_path / "unrelated"
    helpers.init_repo(other, "main")  # reproducible ids: make_upstream here would recreate the pin
    helpers.write(other / "x", "y")
    helpers.commit_all(helpers.Repo(other), "different\n", "2026-05-01T00:00:00+0000")
    code, doc = helpers.invoke_json(
        "base", "fetch", "--set", str(set_dir), "--from-git", str(other), "--dest", str(tmp_path / "t")
    )
    assert code == 2 and f"commit {commit} is not in" in doc["error"]["message"]
    assert not (tmp_path / "t").exists(), "a failed fetch leaves no half tree"


def test_existing_unrelated_dest_is_refused(template, tmp_path):
    upstream, commit, set_dir = template
    dest = tmp_path / "occupied"
    dest.mkdir()
    (dest / "file").write_text("mine\n")
    code, doc = helpers.invoke_json("base", "fetch", "--set", str(set_dir), "--dest", str(dest))
    assert code == 2 and "not a git repository" in doc["error"]["message"]
    assert (dest / "file").read_text() == "mine\n"


def test_default_set_is_the_newest_under_ddtree_patches(template, tmp_path, monkeypatch):
    _, commit, set_dir = template
    for version in ("v1", "v2", "v10"):
        helpers.copy_set(set_dir, tmp_path / "ddtree_patches" / version)
    (tmp_path / "ddtree_patches" / "notes").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PATCHKIT_HOME")
    assert paths.default_set_dir() == tmp_path / "ddtree_patches" / "v10"
    default_tree = tmp_path / ".patchkit" / "trees" / f"upstream-{commit[:12]}"
    code, doc = helpers.invoke_json("base", "fetch")
    assert code == 0 and doc["result"]["path"] == str(default_tree)
    code, doc = helpers.invoke_json("apply")
    assert code == 0 and doc["result"]["target"] == str(default_tree) and doc["result"]["state"] == "applied"
