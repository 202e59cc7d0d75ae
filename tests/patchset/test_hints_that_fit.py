"""Messages and listings that fit what the user did: ``apply`` without a fetched base names the
``base fetch`` for the set given (and the folder given); a folder of patchkit's own checkout is never
suggested as a target; ``patchkit sets`` into a pipe fits a narrow width."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import paths
from tests.patchset import helpers

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["v1", "v3"])
def test_apply_without_a_base_names_the_fetch_for_the_set_given(name):
    code, doc = helpers.invoke_json("apply", "--set", name)
    assert code == 2
    assert doc["error"]["message"].endswith("does not exist")
    assert f"run `patchkit base fetch --set {name}` first" in doc["error"]["hint"]


def test_apply_to_a_missing_folder_names_the_set_and_the_folder(tmp_path):
    target = tmp_path / "mine"
    code, doc = helpers.invoke_json("apply", "--set", "v1", "--target", str(target))
    assert code == 2
    assert f"run `patchkit base fetch --set v1 --dest {target}` first" in doc["error"]["hint"]
    assert not target.exists()


def test_a_set_given_by_its_folder_is_named_by_its_folder_when_its_name_finds_another(template, tmp_path,
                                                                                       monkeypatch):
    _, _, set_dir = template
    copy = helpers.copy_set(set_dir, tmp_path / "elsewhere" / "v1")
    assert paths.set_argument(copy) == str(copy), "the name v1 finds the shipped set, not this one"
    monkeypatch.chdir(copy.parent)
    assert paths.set_argument(copy) == "v1", "from its parent folder, the name finds it"


@pytest.mark.parametrize("folder", ["benchmarks", "docs"])
def test_a_folder_of_patchkits_own_checkout_is_not_answered_with_the_checkout(folder):
    assert (CHECKOUT / "patchkit" / "git.py").is_file(), "run from a checkout"
    code, doc = helpers.invoke_json("apply", "--target", str(CHECKOUT / folder))
    assert code == 2
    assert doc["error"]["message"] == (f"target {CHECKOUT / folder} is a folder of patchkit's own checkout "
                                       f"{CHECKOUT}, not a tree to patch")
    assert f"--target {CHECKOUT}" not in doc["error"]["hint"] and "patchkit base fetch" in doc["error"]["hint"]


def test_sets_into_a_pipe_is_a_narrow_listing():
    done = subprocess.run([sys.executable, "-m", "patchkit", "sets"], capture_output=True, text=True, check=True,
                          env=helpers.cli_env(None), cwd=CHECKOUT)
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert any(line.startswith("v2  ddtree@") and line.endswith("(default)") for line in lines), done.stdout
    assert any(line.startswith("    ") and "smoke" in line for line in lines)
    assert "every command takes v2" in " ".join(done.stdout.split())
