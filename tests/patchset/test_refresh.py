"""patchkit refresh: byte-identical round trip, stable names, content and context changes."""

from __future__ import annotations

from tests.patchset import helpers


def refresh(fx, *extra):
    return helpers.invoke_json("refresh", "--set", str(fx.set_dir), "--target", str(fx.target), *extra)


def applied(fx):
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    return fx


def test_round_trip_apply_then_refresh_is_byte_identical(fx):
    before = helpers.set_snapshot(applied(fx).set_dir)
    code, doc = refresh(fx)
    assert code == 0
    assert {c["status"] for c in doc["result"]["changes"]} == {"unchanged"}
    assert helpers.set_snapshot(fx.set_dir) == before


def test_amended_commit_is_content_changed_and_keeps_its_name(fx):
    applied(fx)
    repo = fx.repo()
    # rewrite the series with patch 2 edited: reset to patch 1, edit, re-pick the rest
    commits = repo.first_parent_log(fx.base_commit)
    repo.run("reset", "-q", "--hard", commits[1])
    (fx.target / "pkg/extra.py").write_text("def extra():\n    return 'EXTRA'\n")
    repo.run("add", "-A")
    message = repo.commit_message("HEAD")
    env = helpers.identity_env("Ada Lovelace", "ada@example.org", "2026-02-02T10:00:00+0000")
    amended = repo.run("commit-tree", repo.run("write-tree"), "-p", "HEAD^", "-F", "-", env=env, input=message)
    repo.run("reset", "-q", "--hard", amended)
    for commit in commits[2:]:
        repo.run("cherry-pick", "--allow-empty", commit, env={"GIT_COMMITTER_NAME": "x", "GIT_COMMITTER_EMAIL": "x@x"})
    old = helpers.set_snapshot(fx.set_dir)
    code, doc = refresh(fx)
    assert code == 0, doc
    by_name = {c["patch"]: c for c in doc["result"]["changes"]}
    assert by_name["0002-Add-pkg-extra.py.patch"]["status"] == "content changed"
    assert (by_name["0002-Add-pkg-extra.py.patch"]["added"], by_name["0002-Add-pkg-extra.py.patch"]["removed"]) == (
        1,
        1,
    )
    assert by_name["0001-Patch-f2-in-core.patch"]["status"] == "unchanged"
    new = helpers.set_snapshot(fx.set_dir)
    assert new.keys() == old.keys()
    assert new["0002-Add-pkg-extra.py.patch"] != old["0002-Add-pkg-extra.py.patch"]
    assert new["manifest.toml"] != old["manifest.toml"]  # lock follows
    # the refreshed set applies to a fresh base and passes its own lock checks
    fresh = fx.target.parent / "fresh"
    assert helpers.invoke("base", "fetch", "--set", str(fx.set_dir), "--dest", str(fresh)).exit_code == 0
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fresh)).exit_code == 0
    assert (fresh / "pkg/extra.py").read_text().endswith("'EXTRA'\n")


def test_new_commit_gets_a_numbered_name_and_removed_patch_is_reported(fx):
    applied(fx)
    (fx.target / "pkg/sixth.py").write_text("SIX = 6\n")
    helpers.commit_all(
        fx.repo(), "Add a sixth module\n\nUpstream-Status: Inappropriate [test only]\n", "2026-03-01T00:00:00+0000"
    )
    code, doc = refresh(fx)
    assert code == 0
    assert doc["result"]["changes"][-1] == {
        "patch": "0006-Add-a-sixth-module.patch",
        "status": "new",
        "context_changed": False,
        "added": 0,
        "removed": 0,
        "detail": "",
    }
    assert (fx.set_dir / "series").read_text().splitlines()[-1] == "0006-Add-a-sixth-module.patch"
    assert (fx.set_dir / "series").read_text().startswith("# tiny set")
    # drop patch 5 (and the sixth) again: never removed implicitly, then reported as removed
    fx.repo().run("reset", "-q", "--hard", "HEAD~2")
    before = helpers.set_snapshot(fx.set_dir)
    code, doc = refresh(fx)
    assert code == 2 and "would remove 2 patch(es)" in doc["error"]["message"]
    assert "--allow-remove" in doc["error"]["hint"]
    assert helpers.set_snapshot(fx.set_dir) == before
    code, doc = refresh(fx, "--allow-remove")
    assert code == 0, doc.get("error")
    statuses = {c["patch"]: c["status"] for c in doc["result"]["changes"]}
    assert statuses["0005-Patch-run.sh-and-f9.patch"] == "removed"
    assert not (fx.set_dir / "0005-Patch-run.sh-and-f9.patch").exists()
    assert set(doc["result"]["files_removed"]) == {"0005-Patch-run.sh-and-f9.patch", "0006-Add-a-sixth-module.patch"}
    assert set(doc["result"]["files_written"]) == {"series", "manifest.toml"}


def test_context_change_is_reported_loudly_and_not_written_without_accept(fx):
    applied(fx)
    repo = fx.repo()
    commits = repo.first_parent_log(fx.base_commit)
    repo.run("reset", "-q", "--hard", fx.base_commit)
    # an earlier change two lines above patch 3's hunk: patch 3's +/- lines stay, its context moves
    util = fx.target / "pkg/util.py"
    util.write_text(util.read_text().replace("VALUE_12 = 12\n", "VALUE_12 = 12  # tuned\n"))
    helpers.commit_all(repo, "Tune VALUE_12\n", "2026-01-15T00:00:00+0000")
    for commit in commits:
        repo.run("cherry-pick", commit, env={"GIT_COMMITTER_NAME": "x", "GIT_COMMITTER_EMAIL": "x@x"})
    before = helpers.set_snapshot(fx.set_dir)
    code, doc = refresh(fx)
    assert code == 1 and doc["ok"] is False
    flagged = [c["patch"] for c in doc["result"]["changes"] if c["context_changed"]]
    assert flagged == ["0003-Change-VALUE_15-in-util.patch"]
    assert helpers.set_snapshot(fx.set_dir) == before, "nothing is written until the change is accepted"
    human = helpers.invoke("refresh", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert human.exit_code == 1 and "CONTEXT CHANGED" in human.output and "--accept-context" in human.output
    code, doc = refresh(fx, "--accept-context")
    assert code == 0 and doc["result"]["written"] is True
    assert (fx.set_dir / "0001-Tune-VALUE_12.patch").exists()


def test_refresh_refuses_uncommitted_edits(fx):
    applied(fx)
    (fx.target / "pkg/core.py").write_text("dirty\n")
    code, doc = refresh(fx)
    assert code == 2 and "uncommitted" in doc["error"]["message"]


def test_crlf_content_survives_refresh_and_apply(fx):
    applied(fx)
    (fx.target / "pkg/windows.txt").write_bytes(b"one\r\ntwo\r\n")
    helpers.commit_all(fx.repo(), "Add a CRLF file\n", "2026-03-02T00:00:00+0000")
    code, doc = refresh(fx)
    assert code == 0, doc
    fresh = fx.target.parent / "fresh"
    assert helpers.invoke("base", "fetch", "--set", str(fx.set_dir), "--dest", str(fresh)).exit_code == 0
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fresh)).exit_code == 0
    assert (fresh / "pkg/windows.txt").read_bytes() == b"one\r\ntwo\r\n"


def test_patch_file_converted_to_crlf_is_refused(fx):
    patch = fx.set_dir / "0002-Add-pkg-extra.py.patch"
    patch.write_bytes(patch.read_bytes().replace(b"\n", b"\r\n"))
    code, doc = helpers.invoke_json("lock", "--set", str(fx.set_dir), "--base", str(fx.target))
    assert code == 2 and "CRLF" in doc["error"]["message"] and doc["error"]["file"] == str(patch)
