"""``patchkit clean``'s options remove what their help says, and ``--dry-run`` shows the size of every
kind: a real base tree, an environment folder, a wheel, gate results and a port result in a real
home and cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit import paths
from tests.patchset import helpers


@pytest.fixture
def kept(template) -> dict[str, Path]:
    """One thing of every kind patchkit keeps, each with some bytes in it."""
    _, _, set_dir = template
    tree = paths.trees_dir() / "base"
    assert helpers.invoke("base", "fetch", "--set", str(set_dir), "--dest", str(tree)).exit_code == 0
    things = {"tree": tree, "env": paths.envs_dir() / "0123456789abcdef",
              "wheel": paths.cache_dir() / "sglang-0.0.1-py3-none-any.whl",
              "gate-results": paths.verify_cache_dir() / "tests", "other": paths.cache_dir() / "port"}
    (things["env"] / "bin").mkdir(parents=True)
    (things["env"] / "bin" / "python").write_bytes(b"x" * 70_000)
    things["wheel"].write_bytes(b"PK" * 5_000)
    for folder in (things["gate-results"], things["other"]):
        folder.mkdir(parents=True)
        (folder / "entry.json").write_text("{}" * 3_000)
    return things


def _left(things: dict[str, Path]) -> set[str]:
    return {kind for kind, path in things.items() if path.exists()}


@pytest.mark.parametrize(("options", "removed"), [
    ((), {"tree", "env"}),
    (("--trees",), {"tree"}),
    (("--envs",), {"env"}),
    (("--cache",), {"env", "wheel", "gate-results", "other"}),
    (("--trees", "--cache"), {"tree", "env", "wheel", "gate-results", "other"}),
], ids=["default", "trees", "envs", "cache", "trees-and-cache"])
def test_each_option_removes_what_its_help_says(kept, options, removed):
    code, doc = helpers.invoke_json("clean", *options)
    assert code == 0, doc
    assert _left(kept) == set(kept) - removed
    assert {item["kind"] for item in doc["result"]["items"]} == removed
    assert doc["result"]["freed"] == sum(item["size"] for item in doc["result"]["items"]) > 0


def test_the_help_says_what_each_option_removes():
    text = " ".join(helpers.invoke("clean", "--help").output.split())
    assert "none given: --trees --envs" in text
    assert ("--cache Remove the whole cache: verify environments, downloaded wheels, gate results "
            "(not the trees)") in text
    assert "--envs Remove the verify environments" in text and "--trees Remove the base and patched trees" in text


def test_a_dry_run_lists_the_size_of_every_kind_and_removes_nothing(kept):
    code, doc = helpers.invoke_json("clean", "--dry-run")
    assert code == 0 and _left(kept) == set(kept)
    totals = {row["kind"]: row for row in doc["result"]["kinds"]}
    assert list(totals) == ["tree", "env", "wheel", "gate-results", "other"]
    assert all(row["count"] == 1 and row["size"] > 0 for row in totals.values())
    assert [k for k, row in totals.items() if row["selected"]] == ["tree", "env"]
    assert totals["wheel"]["option"] == "--cache"

    human = helpers.invoke("clean", "--dry-run", "--cache")
    assert human.exit_code == 0 and _left(kept) == set(kept)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:5]]
            for line in human.output.splitlines() if line.startswith("|") and "items" not in line}
    assert rows["trees"][2] == "kept (remove with --trees)"
    for name in ("environments", "wheels", "gate results"):
        assert rows[name][0] == "1" and rows[name][1].endswith("MB") and rows[name][2] == "would remove"
