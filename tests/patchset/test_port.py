"""`patchkit port` on a fixture upstream: every status, --continue, --skip, --abort, in place and --out.

The fixture (tests/patchset/port_fixture.py) is a real git upstream with releases v1 and v2 and a
six-patch set on v1 written by `patchkit refresh`; each patch meets one status when ported to v2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from patchkit.git import Repo
from tests.patchset import helpers
from tests.patchset import port_fixture as pf


@pytest.fixture(scope="session")
def upstream(tmp_path_factory) -> pf.Upstream:
    root = tmp_path_factory.mktemp("port-upstream")
    mp = pytest.MonkeyPatch()
    mp.setenv("PATCHKIT_HOME", str(root / "home"))
    try:
        return pf.build(root)
    finally:
        mp.undo()


@pytest.fixture
def src(upstream, tmp_path) -> Path:
    """A private copy of the six-patch set."""
    return helpers.copy_set(upstream.set_dir, tmp_path / "sets" / "v1")


def port_json(*args: str) -> tuple[int, dict]:
    code, doc = helpers.invoke_json("port", *args)
    return code, doc


def statuses(doc: dict) -> dict[str, str]:
    return {p["patch"]: p["status"] for p in doc["result"]["report"]["patches"]}


def work_tree(doc: dict) -> Path:
    return Path(doc["result"]["stopped"]["tree"])


git = pf.user_git


def home_port_dirs() -> list[Path]:
    root = Path(os.environ["PATCHKIT_HOME"]) / "port"
    return sorted(root.iterdir()) if root.is_dir() else []


# ---------------------------------------------------------------------- the whole flow
def test_each_status_then_continue_and_skip_write_a_set_that_applies(upstream, src, tmp_path):
    out = tmp_path / "sets" / "v2"
    before = helpers.set_snapshot(src)

    code, doc = port_json("--set", str(src), "--to-git", upstream.v2, "--out", str(out))
    assert code == 1, doc
    result = doc["result"]
    assert result["state"] == "stopped" and result["stopped"]["patch"] == pf.NAMES[4]
    assert result["stopped"]["status"] == "conflict" and result["stopped"]["files"] == ["python/pkg/conflict.py"]
    assert statuses(doc) == {pf.NAMES[0]: "clean", pf.NAMES[1]: "offset", pf.NAMES[2]: "context-changed",
                             pf.NAMES[3]: "already-upstream", pf.NAMES[4]: "conflict"}
    assert result["report"]["pending"] == [pf.NAMES[5]]
    assert not out.exists() and helpers.set_snapshot(src) == before

    tree = work_tree(doc)
    text = (tree / "python/pkg/conflict.py").read_text()
    assert "<<<<<<< HEAD\nCONF_8 = 'upstream'\n||||||| " in text and "=======\nCONF_8 = 'patch'\n>>>>>>> " in text
    (tree / "python/pkg/conflict.py").write_text(pf.CONFLICT_RESOLVED)
    git(tree, "add", "python/pkg/conflict.py")
    git(tree, "commit", "-q", "--no-edit")

    code, doc = port_json("--continue", "--set", str(src))
    assert code == 1, doc
    assert doc["result"]["stopped"]["patch"] == pf.NAMES[5]
    assert doc["result"]["stopped"]["status"] == "target-gone"
    assert doc["result"]["stopped"]["files"] == ["python/pkg/gone.py"]
    assert statuses(doc)[pf.NAMES[4]] == "conflict"

    code, doc = port_json("--skip")  # the only port in progress: no --set needed
    assert code == 0, doc
    result = doc["result"]
    assert result["state"] == "ported" and Path(result["out"]) == out
    patches = {p["patch"]: p for p in result["report"]["patches"]}
    assert patches[pf.NAMES[4]]["resolution"] == "resolved" and patches[pf.NAMES[4]]["new_patches"] == [pf.NAMES[4]]
    assert patches[pf.NAMES[5]]["resolution"] == "dropped" and patches[pf.NAMES[5]]["new_patches"] == []
    assert patches[pf.NAMES[3]]["new_patches"] == [] and "already in the new base" in patches[pf.NAMES[3]]["detail"]
    assert helpers.set_snapshot(src) == before, "--out leaves the source set as it was"
    assert home_port_dirs() == [], "the work dir is gone once the set is published"

    series = [line for line in (out / "series").read_text().splitlines() if not line.startswith("#")]
    assert series == [pf.NAMES[0], pf.NAMES[1], pf.NAMES[2], pf.NAMES[4]]
    assert not (out / pf.NAMES[3]).exists() and not (out / pf.NAMES[5]).exists()
    assert (out / "expectations" / "dispatch.toml").read_text() == pf.DECLARATIONS, "the set's other files are kept"
    manifest = (out / "manifest.toml").read_text()
    assert f'commit = "{upstream.v2}"' in manifest and "# Port fixture: six patches" in manifest
    assert "CONF_8 = 'patch and upstream'" in (out / pf.NAMES[4]).read_text()
    assert "# Conflicts:" not in (out / pf.NAMES[4]).read_text()

    target = tmp_path / "v2-tree"
    assert helpers.invoke("base", "fetch", "--set", str(out), "--dest", str(target)).exit_code == 0
    applied = helpers.invoke("apply", "--set", str(out), "--target", str(target))
    assert applied.exit_code == 0, applied.output
    code, status = helpers.invoke_json("status", "--set", str(out), "--target", str(target))
    assert code == 0 and status["result"]["state"] == "applied"
    assert (target / "python/pkg/conflict.py").read_text() == pf.CONFLICT_RESOLVED

    written = helpers.set_snapshot(out)  # the patches are exactly what refresh writes: a refresh changes nothing
    refreshed = helpers.invoke("refresh", "--set", str(out), "--target", str(target))
    assert refreshed.exit_code == 0, refreshed.output
    assert helpers.set_snapshot(out) == written


def test_the_report_says_where_hunks_moved_what_upstream_changed_and_which_sites_moved(upstream, src, tmp_path):
    pf.truncate_set(src, 4)  # the four patches that need no hand resolution
    out = tmp_path / "sets" / "v2"
    code, doc = port_json("--set", str(src), "--to-git", upstream.v2, "--out", str(out))
    assert code == 0, doc
    report = doc["result"]["report"]
    patches = {p["patch"]: p for p in report["patches"]}
    assert [m["delta"] for m in patches[pf.NAMES[0]]["moves"]] == [0, 0]
    assert patches[pf.NAMES[1]]["moves"] == [
        {"file": "python/pkg/offset.py", "old_line": 20, "new_line": 25, "delta": 5}]
    assert patches[pf.NAMES[1]]["detail"] == "python/pkg/offset.py:20 +5"
    context = patches[pf.NAMES[2]]
    assert context["changes_differ"] is False and context["detail"] == "same +/- lines, new context"
    assert "    - CTX_12 = 12\n    + CTX_12 = 1200\n" in context["range_diff"]
    assert patches[pf.NAMES[0]]["range_diff"].startswith("1:  ") and " = 1:  " in patches[pf.NAMES[0]]["range_diff"]

    upstream_files = {f["path"]: f for f in report["upstream"]}
    assert set(upstream_files) == {"python/pkg/offset.py", "python/pkg/context.py", "python/pkg/upstreamed.py"}
    assert [(h["old_start"], h["near_set"]) for h in upstream_files["python/pkg/offset.py"]["hunks"]] == [(0, False)]
    assert [(h["old_start"], h["near_set"]) for h in upstream_files["python/pkg/context.py"]["hunks"]] == [
        (13, True), (28, False)]
    assert upstream_files["python/pkg/upstreamed.py"]["hunks"][0]["near_set"] is True

    dispatch = report["dispatch"]
    assert (dispatch["old_sites"], dispatch["new_sites"]) == (3, 3)
    changes = sorted((c["kind"], c["scope"], c["expr"], c["old_expr"], c["declared"]) for c in dispatch["changes"])
    assert changes == [
        ("appeared", "extra", "algo.is_dflash()", None, False),
        ("changed", "pick", "algo.is_dflash()or algo.is_standalone()", "algo.is_dflash()", True),
        ("vanished", "size", "algo.is_ngram()", None, True),
    ]

    markdown = (out / "port-report.md").read_text()
    assert "| `0002-Patch-off_7.patch` | offset | 1/1 hunks by +5 |" in markdown
    assert "**1 of them in lines the set does not touch**" not in markdown  # offset.py's and context.py's: two
    assert "**2 of them in lines the set does not touch**" in markdown
    assert "| vanished | `python/pkg/spec.py:10` | `size` | `algo.is_ngram()` | yes |" in markdown
    assert str(tmp_path) not in markdown and str(upstream.path) not in markdown, "the report names no machine path"

    human = helpers.invoke("port", "--abort")  # nothing is in progress any more
    assert human.exit_code == 2 and "no port is in progress" in human.output

    again = helpers.copy_set(src, tmp_path / "sets" / "v1-again")  # the same two bases: the scan is cached
    code, second = port_json("--set", str(again), "--to-git", upstream.v2, "--out", str(tmp_path / "sets" / "v2b"))
    assert code == 0 and second["result"]["timings"]["dispatch scan"] == 0.0
    assert second["result"]["report"]["dispatch"] == dispatch


def test_abort_at_a_conflict_leaves_every_file_as_before(upstream, src, tmp_path):
    out = tmp_path / "sets" / "v2"
    code, _ = port_json("--set", str(src), "--to-git", upstream.v2, "--out", str(out))  # fetches both bases
    assert code == 1
    helpers.invoke("port", "--abort")
    home = Path(os.environ["PATCHKIT_HOME"])
    snapshot = {"sets": helpers.tree_snapshot(tmp_path / "sets"), "upstream": helpers.tree_snapshot(upstream.path),
                "trees": helpers.tree_snapshot(home / "trees")}
    objects = {p.name: helpers.object_files(p) for p in (home / "trees").iterdir()}

    code, doc = port_json("--set", str(src), "--to-git", upstream.v2, "--out", str(out))
    assert code == 1 and doc["result"]["stopped"]["status"] == "conflict"
    work = Path(doc["result"]["work_dir"])
    assert work.is_dir() and work.parent == home / "port"
    changed_outside = {"sets": helpers.tree_snapshot(tmp_path / "sets"),
                       "upstream": helpers.tree_snapshot(upstream.path), "trees": helpers.tree_snapshot(home / "trees")}
    assert changed_outside == snapshot, "a port that meets a conflict changes nothing outside its work dir"
    assert {p.name: helpers.object_files(p) for p in (home / "trees").iterdir()} == objects

    code, doc = port_json("--abort", "--set", str(src))
    assert code == 0 and doc["result"]["state"] == "aborted"
    assert not work.exists() and home_port_dirs() == []
    assert {"sets": helpers.tree_snapshot(tmp_path / "sets"), "upstream": helpers.tree_snapshot(upstream.path),
            "trees": helpers.tree_snapshot(home / "trees")} == snapshot


def test_in_place_port_swaps_the_set_atomically(upstream, src):
    pf.truncate_set(src, 4)
    old_manifest = (src / "manifest.toml").read_text()
    code, doc = port_json("--set", str(src), "--to-git", upstream.v2, "--set-version", "2.0.0")
    assert code == 0, doc
    assert doc["result"]["out"] == str(src.resolve())
    manifest = (src / "manifest.toml").read_text()
    assert f'commit = "{upstream.v2}"' in manifest and 'version = "2.0.0"' in manifest
    assert manifest != old_manifest and (src / "port-report.md").is_file()
    assert doc["result"]["report"]["new_set"] == "portfix@2.0.0"
    assert not list(src.parent.glob(".*port-staging*")), "no staging directory is left next to the set"
    assert helpers.invoke("lock", "--set", str(src)).exit_code == 0  # the written lock is already right
    assert (src / "manifest.toml").read_text() == manifest


# ---------------------------------------------------------------------- resolving by hand
def test_continue_refuses_unresolved_files_markers_and_nothing_committed(upstream, src, tmp_path):
    code, doc = port_json("--set", str(src), "--to-git", upstream.v2, "--out", str(tmp_path / "out"))
    tree = work_tree(doc)

    result = helpers.invoke("port", "--continue")
    assert result.exit_code == 2 and "unresolved conflicts in python/pkg/conflict.py" in result.output

    git(tree, "add", "python/pkg/conflict.py")  # markers and all
    git(tree, "commit", "-q", "--no-edit")
    result = helpers.invoke("port", "--continue")
    assert result.exit_code == 2 and "still has conflict markers in python/pkg/conflict.py" in result.output

    git(tree, "reset", "-q", "--hard", "HEAD^")
    result = helpers.invoke("port", "--continue")
    assert result.exit_code == 2 and "nothing was committed for 0005-Patch-CONF_8.patch" in result.output

    (tree / "python/pkg/conflict.py").write_text(pf.CONFLICT_RESOLVED)
    (tree / "python/pkg/__pycache__").mkdir()
    (tree / "python/pkg/__pycache__/conflict.cpython-311.pyc").write_bytes(b"\0compiled")  # ignored by the work tree
    (tree / "logo.png").write_bytes(b"\x89PNG\0\1")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "resolved, with a picture")
    result = helpers.invoke("port", "--continue")
    assert result.exit_code == 2 and "the resolution commits binary files: logo.png" in result.output
    git(tree, "reset", "-q", "--hard", "HEAD^")

    (tree / "python/pkg/conflict.py").write_text(pf.CONFLICT_RESOLVED)  # staged, not committed: port commits it
    (tree / "stray.txt").write_text("left over\n")
    result = helpers.invoke("port", "--continue")
    assert result.exit_code == 2 and "uncommitted changes in the work tree: python/pkg/conflict.py" in result.output
    (tree / "stray.txt").unlink()
    git(tree, "add", "python/pkg/conflict.py")
    code, doc = port_json("--continue")
    assert code == 1 and doc["result"]["stopped"]["patch"] == pf.NAMES[5]
    log = git(tree, "log", "-1", "--format=%an|%s")  # the target-gone stop sits on the resolution's commit
    assert log.strip() == f"Ada Lovelace|{pf.PATCHES[4][0]}", "the staged resolution keeps the patch's author"


def test_a_resolution_committed_on_a_detached_head_is_kept(upstream, src, tmp_path):
    out = tmp_path / "out"
    _, doc = port_json("--set", str(src), "--to-git", upstream.v2, "--out", str(out))
    tree = work_tree(doc)
    (tree / "python/pkg/conflict.py").write_text(pf.CONFLICT_RESOLVED)
    git(tree, "add", "python/pkg/conflict.py")
    git(tree, "checkout", "-q", "--detach")  # git forgets the cherry-pick: a message of the user's own
    git(tree, "commit", "-q", "-m", "Patch CONF_8, keeping upstream's intent")
    code, doc = port_json("--continue")
    assert code == 1 and doc["result"]["stopped"]["patch"] == pf.NAMES[5]
    code, doc = port_json("--skip")
    assert code == 0, doc
    patch = (out / pf.NAMES[4]).read_text()  # the file name is kept although the message lost our trailers
    assert "CONF_8 = 'patch and upstream'" in patch and "Subject: [PATCH] Patch CONF_8, keeping upstream's" in patch


def test_a_second_port_command_names_the_stopped_one(upstream, src, tmp_path):
    out = tmp_path / "out"
    port_json("--set", str(src), "--to-git", upstream.v2, "--out", str(out))
    result = helpers.invoke("port", "--set", str(src), "--to-git", upstream.v2, "--out", str(out))
    assert result.exit_code == 2 and "is stopped at 0005-Patch-CONF_8.patch" in result.output
    result = helpers.invoke("port", "--skip", "--abort")
    assert result.exit_code == 2 and "exclude each other" in result.output


def test_src_edited_while_stopped_is_refused_on_continue(upstream, src, tmp_path):
    port_json("--set", str(src), "--to-git", upstream.v2, "--out", str(tmp_path / "out"))
    (src / "series").write_text((src / "series").read_text() + "# a comment\n")
    result = helpers.invoke("port", "--skip")
    assert result.exit_code == 2 and "changed since the port began" in result.output


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize("args,message", [
    (["--to", "2.0"], "--to VERSION needs a [base.pypi] table"),
    (["--to-git", "v2"], "is not a full commit id"),
    (["--to-git", "0" * 40], "is not in"),
])
def test_bad_targets_fail_with_one_line_and_leave_nothing(src, args, message):
    before = helpers.set_snapshot(src)
    result = helpers.invoke("port", "--set", str(src), *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert helpers.set_snapshot(src) == before and home_port_dirs() == []


def test_out_that_exists_is_refused(upstream, src, tmp_path):
    (tmp_path / "taken").mkdir()
    result = helpers.invoke("port", "--set", str(src), "--to-git", upstream.v2, "--out", str(tmp_path / "taken"))
    assert result.exit_code == 2 and "already exists" in result.output


def test_porting_to_the_same_base_is_refused(upstream, src):
    result = helpers.invoke("port", "--set", str(src), "--to-git", upstream.v1)
    assert result.exit_code == 2 and "already pinned" in result.output


def test_json_envelope_of_a_stop(upstream, src, tmp_path):
    _, doc = port_json("--set", str(src), "--to-git", upstream.v2, "--out", str(tmp_path / "out"))
    assert set(doc) == {"patchkit", "command", "ok", "exit_code", "result"}
    assert (doc["command"], doc["ok"], doc["exit_code"]) == ("port", False, 1)
    assert set(doc["result"]) >= {"state", "src", "out", "work_dir", "report", "stopped", "recovered", "timings"}
    assert set(doc["result"]["report"]) == {"set", "new_set", "old_base", "new_base", "patches", "pending", "upstream",
                                            "dispatch", "stale_mentions"}
    json.dumps(doc)
    markdown = (Path(doc["result"]["work_dir"]) / "port-report.md").read_text()
    assert "| `0005-Patch-CONF_8.patch` | conflict |" in markdown and "not replayed yet" in markdown


# ---------------------------------------------------------------------- a pypi base (wheels from the cache)
WHEEL = "tinypkg-{version}-py3-none-any.whl"
PYPI_MANIFEST = """\
[set]
name = "tiny-pypi"
version = "1.0.0"
description = "one patch on tinypkg 1.0.0 (tinypkg 1.0.0 here)"
python = ["3.11"]

[base]
kind = "pypi"

[base.pypi]
package = "tinypkg"
version = "1.0.0"
wheel = "{wheel}"
sha256 = "{sha256}"
layout = {{ "tinypkg/" = "python/tinypkg/" }}
"""


def fake_wheel(version: str, files: dict[str, str]) -> Path:
    """A wheel in the patchkit cache, as pip would have left it."""
    import zipfile

    cache = Path(os.environ["PATCHKIT_HOME"]) / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / WHEEL.format(version=version)
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in {**files, f"tinypkg-{version}.dist-info/METADATA": "Name: tinypkg\n"}.items():
            archive.writestr(name, text)
    return path


def test_pypi_base_ports_to_a_release_whose_wheel_is_cached(tmp_path, monkeypatch):
    from patchkit.patchset.series import sha256_file

    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # no index: only the cache can serve
    monkeypatch.setenv("PIP_RETRIES", "0")
    old = fake_wheel("1.0.0", {"tinypkg/core.py": pf.CLEAN})
    new = fake_wheel("2.0.0", {"tinypkg/core.py": "# 2.0\n" + pf.CLEAN, "tinypkg/extra.py": "X = 1\n"})
    src = tmp_path / "sets" / "v1"
    helpers.write(src / "manifest.toml", PYPI_MANIFEST.format(wheel=old.name, sha256=sha256_file(old)))
    helpers.write(src / "series", "")
    work = tmp_path / "work"
    assert helpers.invoke("base", "fetch", "--set", str(src), "--dest", str(work)).exit_code == 0
    helpers.write(work / "python/tinypkg/core.py", pf.CLEAN.replace("CLEAN_3 = 3\n", "CLEAN_3 = 'patched'\n"))
    helpers.commit_all(Repo(work), "Patch CLEAN_3\n", "2026-03-01T10:00:00+0000")
    assert helpers.invoke("refresh", "--set", str(src), "--target", str(work)).exit_code == 0

    out = tmp_path / "sets" / "v2"
    code, doc = port_json("--set", str(src), "--to", "2.0.0", "--out", str(out))
    assert code == 0, doc
    assert statuses(doc) == {"0001-Patch-CLEAN_3.patch": "offset"}
    assert doc["result"]["report"]["new_base"]["label"] == "tinypkg 2.0.0"
    manifest = (out / "manifest.toml").read_text()
    assert f'wheel = "{new.name}"' in manifest and f'sha256 = "{sha256_file(new)}"' in manifest
    assert 'version = "2.0.0"' in manifest and 'version = "1.0.0"' in manifest, "[set] version is kept"
    assert doc["result"]["report"]["stale_mentions"] == [
        [4, 'description = "one patch on tinypkg 1.0.0 (tinypkg 1.0.0 here)"']]
    target = tmp_path / "v2-tree"
    assert helpers.invoke("base", "fetch", "--set", str(out), "--dest", str(target)).exit_code == 0
    assert helpers.invoke("apply", "--set", str(out), "--target", str(target)).exit_code == 0

    missing = helpers.invoke("port", "--set", str(out), "--to", "3.0.0")
    assert missing.exit_code == 2 and "pip could not download tinypkg==3.0.0" in missing.output, missing.output
    assert home_port_dirs() == []
