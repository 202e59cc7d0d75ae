"""``patchkit sets`` and the default set: declared in the manifests (``[set] default``,
``[[set.proven]]``), listed with base and proofs, taken without ``--set``; ``--set`` takes a name or a
directory, and an unknown name lists the sets that exist."""

from __future__ import annotations

import re

from click.testing import CliRunner

from patchkit import paths
from patchkit.cli import cli
from patchkit.manifest import load
from patchkit.patchset.port import drop_proofs
from tests.patchset import helpers

PROVEN = """
[[set.proven]]
check = "{check}"
on = "1x H200"
date = "2026-12-03"
"""


def _with_set_keys(set_dir, keys: str) -> None:
    """Add ``keys`` (lines of [set], or whole [[set.proven]] tables) right after the [set] table's keys."""
    manifest = set_dir / "manifest.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace("\n[base]", f"\n{keys}\n[base]", 1))


def test_the_shipped_default_is_v2_the_newest_set_proven_on_a_gpu(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not inside a checkout: the sets next to the package (or installed with it)
    code, doc = helpers.invoke_json("sets")
    assert code == 0, doc
    result = doc["result"]
    rows = {row["name"]: row for row in result["sets"]}
    assert {"v1", "v2", "v3"} <= set(rows) and result["default"] == "v2"
    assert [name for name, row in rows.items() if row["default"]] == ["v2"]
    assert rows["v2"]["base"] == "sglang 0.5.17" and rows["v3"]["base"] == "sglang 0.5.23"
    v2_checks = {p["check"] for p in rows["v2"]["proven"]}
    assert {"verify", "smoke", "bench"} <= v2_checks
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", p["date"]) for row in rows.values() for p in row["proven"])
    assert {p["check"] for p in rows["v3"]["proven"]} == {"verify"} and "torch" in rows["v3"]["caveat"]
    # the newest set proven on a GPU is the one marked default
    gpu = [name for name, row in rows.items() if {p["check"] for p in row["proven"]} & {"smoke", "bench"}]
    assert max(gpu, key=paths._version_key) == "v2"
    assert paths.default_set_dir().name == "v2"
    human = helpers.invoke("sets").output
    smoke_date = next(p["date"] for p in rows["v2"]["proven"] if p["check"] == "smoke")
    assert "v2" in human and f"{smoke_date} smoke" in human and "every command takes v2" in human


def test_the_marked_set_is_the_default_else_the_newest(template, tmp_path, monkeypatch):
    _, _, set_dir = template
    root = tmp_path / "ddtree_patches"
    for version in ("v1", "v2", "v10"):
        helpers.copy_set(set_dir, root / version)
    monkeypatch.chdir(tmp_path)
    assert paths.default_set_dir() == root / "v10"  # none marked: the newest
    _with_set_keys(root / "v2", "default = true\n" + PROVEN.format(check="smoke"))
    assert paths.default_set_dir() == root / "v2"
    code, doc = helpers.invoke_json("sets")
    assert code == 0 and doc["result"]["default"] == "v2" and doc["result"]["root"] == str(root)


def test_an_unknown_set_name_lists_the_sets_that_exist(template, tmp_path, monkeypatch):
    _, _, set_dir = template
    for version in ("v1", "v2"):
        helpers.copy_set(set_dir, tmp_path / "ddtree_patches" / version)
    monkeypatch.chdir(tmp_path)
    code, doc = helpers.invoke_json("status", "--set", "v9")
    assert code == 2
    message = doc["error"]["message"]
    assert "'v9'" in message and "(the sets: v1, v2)" in message and "patchkit sets" in doc["error"]["hint"]


def test_set_help_says_name_or_directory():
    for command in ("apply", "status", "verify", "smoke"):
        text = " ".join(CliRunner().invoke(cli, [command, "--help"]).output.split())
        assert "--set NAME|DIR" in text and "set's name" in text and "set directory" in text, text


def test_a_bad_proof_is_bad_input_naming_the_line(template, tmp_path):
    _, _, set_dir = template
    mine = helpers.copy_set(set_dir, tmp_path / "set")
    _with_set_keys(mine, PROVEN.format(check="gpu-ish"))
    code, doc = helpers.invoke_json("status", "--set", str(mine))
    assert code == 2
    assert "check = 'gpu-ish'" in doc["error"]["message"] and "verify, smoke, bench" in doc["error"]["message"]
    line = [n for n, text in enumerate((mine / "manifest.toml").read_text().splitlines(), 1) if "gpu-ish" in text]
    assert doc["error"]["line"] == line[0]


def test_a_ported_set_carries_no_proofs_and_is_not_the_default(template, tmp_path):
    _, _, set_dir = template
    mine = helpers.copy_set(set_dir, tmp_path / "set")
    _with_set_keys(mine, "# the default\ndefault = true\n" + PROVEN.format(check="bench"))
    assert load(mine).set.default and load(mine).set.gpu_proven
    (mine / "manifest.toml").write_text(drop_proofs((mine / "manifest.toml").read_text()))
    again = load(mine)
    assert not again.set.default and again.set.proven == () and again.lock is not None
    assert "# the default" not in (mine / "manifest.toml").read_text()
    assert "proven" not in again.raw["set"]
