"""End to end on the real sglang 0.5.12 wheel (downloaded once per test session) and the real set."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from tests.patchset import helpers

WHEEL = "sglang-0.5.12-cp311-cp311-manylinux_2_34_x86_64.whl"
SHA256 = "4ed786a38655851fd055ef57380c34d29b87753b53f63457309f51e5bf48c2e6"
REAL_SET = helpers.REPO_ROOT / "ddtree_patches" / "v1"
DEAD_INDEX = {
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    "PIP_EXTRA_INDEX_URL": "",
    "PIP_FIND_LINKS": "",
    "PIP_RETRIES": "0",
    "PIP_TIMEOUT": "2",
}

MANIFEST = f"""\
[set]
name = "empty"
version = "0.0.1"
description = "no patches: just the pinned base"
python = ["3.11"]

[base]
kind = "pypi"

[base.pypi]
package = "sglang"
version = "0.5.12"
wheel = "{WHEEL}"
sha256 = "{SHA256}"
layout = {{ "sglang/" = "python/sglang/" }}
"""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def wheel_home(tmp_path_factory) -> Path:
    """One patchkit home (wheel cache and trees) shared by the slow tests of a session."""
    return tmp_path_factory.mktemp("sglang-home")


@pytest.fixture
def pypi_set(tmp_path) -> Path:
    set_dir = tmp_path / "empty-set"
    helpers.write(set_dir / "manifest.toml", MANIFEST)
    helpers.write(set_dir / "series", "")
    return set_dir


def test_real_wheel_base_is_verified_laid_out_reproducible_and_cached(wheel_home, pypi_set, tmp_path):
    env = {"PATCHKIT_HOME": str(wheel_home)}
    first = helpers.run_cli("base", "fetch", "--set", str(pypi_set), "--json", env=env)
    assert first.returncode == 0, first.stderr
    first_doc = json.loads(first.stdout)["result"]
    assert first_doc["wheel_sha256"] == SHA256 and first_doc["cached"] is False and first_doc["downloaded"] is True
    wheel = wheel_home / "cache" / WHEEL
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == SHA256
    tree = wheel_home / "trees" / "sglang-0.5.12"
    repo = helpers.Repo(tree)
    assert repo.run("log", "--format=%an <%ae> %aI|%cn %cI|%s") == (
        f"patchkit <patchkit@localhost> 2026-01-01T00:00:00+00:00|patchkit 2026-01-01T00:00:00+00:00|"
        f"base: sglang 0.5.12, wheel sha256 {SHA256}"
    )
    files = set(repo.run("ls-files").splitlines())
    with zipfile.ZipFile(wheel) as archive:
        members = {n for n in archive.namelist() if n.startswith("sglang/") and not n.endswith("/")}
    assert files == {"python/" + m for m in members}, "exactly the sglang/ members, under python/sglang/"
    assert "python/sglang/srt/speculative/spec_info.py" in files
    assert repo.porcelain_status() == []

    again = helpers.run_cli("base", "fetch", "--set", str(pypi_set), "--json", env={**env, **DEAD_INDEX})
    assert again.returncode == 0, again.stderr
    assert '"cached": true' in again.stdout
    # pip's index is unreachable: success proves nothing was downloaded (speed lives in benchmarks/)

    other = tmp_path / "second-tree"  # a new tree from the cached wheel, offline: same commit id
    third = helpers.run_cli(
        "base", "fetch", "--set", str(pypi_set), "--dest", str(other), "--json", env={**env, **DEAD_INDEX}
    )
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["result"]["downloaded"] is False
    assert helpers.Repo(other).run("rev-parse", "HEAD") == repo.run("rev-parse", "HEAD")

    # A set with no patch is refused by name (issue 37: lock, apply and status alike), the base untouched
    locked = helpers.run_cli("lock", "--set", str(pypi_set), env=env)
    assert locked.returncode == 2 and "the series is empty" in locked.stderr, locked.stderr
    status = helpers.run_cli("status", "--set", str(pypi_set), "--json", env=env)
    assert status.returncode == 2 and "the series is empty" in status.stdout + status.stderr
    assert repo.porcelain_status() == [] and repo.run("rev-parse", "HEAD") == helpers.Repo(other).run("rev-parse", "HEAD")


@pytest.mark.skipif(
    not (REAL_SET / "manifest.toml").exists(), reason="ddtree_patches/v1/manifest.toml does not exist yet"
)
def test_real_ddtree_set_applies_to_the_real_wheel_base(wheel_home, tmp_path):
    env = {"PATCHKIT_HOME": str(wheel_home)}
    target = tmp_path / "sglang-ddtree"
    fetched = helpers.run_cli("base", "fetch", "--set", str(REAL_SET), "--dest", str(target), env=env)
    assert fetched.returncode == 0, fetched.stderr
    applied = helpers.run_cli("apply", "--set", str(REAL_SET), "--target", str(target), env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    status = helpers.run_cli("status", "--set", str(REAL_SET), "--target", str(target), "--json", env=env)
    assert status.returncode == 0 and '"state": "applied"' in status.stdout
    again = helpers.run_cli("apply", "--set", str(REAL_SET), "--target", str(target), env=env)
    assert again.returncode == 0 and "already applied" in again.stdout
