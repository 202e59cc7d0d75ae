"""Installed like any tool: a plain (non-editable) wheel of this checkout, installed into a fresh venv
and run from another directory, resolves the shipped patch sets (package data, byte for byte the
repository's), and installs the gates as ``patchkit.checks``, never as a top-level ``checks``."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from patchkit.git import Repo

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # builds a wheel and a venv (about half a minute): .ci/run's second step


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from this checkout (with this interpreter's setuptools: offline)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(REPO)], check=True, capture_output=True, text=True, timeout=600)
    (built,) = out.glob("patchkit-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the wheel; its dependencies are this interpreter's (no network)."""
    env_dir = tmp_path_factory.mktemp("fresh") / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True,
                   capture_output=True, text=True, timeout=600)
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True,
                             capture_output=True, text=True).stdout.strip()
    # the dependencies, as a plain path entry: this venv's .pth files (the editable checkout) stay inactive
    Path(purelib, "zz-test-dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return env_dir


def run(env_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PATCHKIT_TARGET")}
    env["PATCHKIT_HOME"] = str(cwd / "home")
    return subprocess.run([str(env_dir / "bin" / args[0]), *args[1:]], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def test_the_wheel_holds_the_gates_under_patchkit_and_the_sets_byte_for_byte(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert "patchkit/checks/registry.py" in names and "patchkit/cli.py" in names
        assert not [n for n in names if n.split("/")[0] in ("checks", "ddtree_patches", "tests")]
        tracked = Repo(REPO).run("ls-files", "-z", "ddtree_patches").split("\0")
        for rel in filter(None, tracked):
            member = "patchkit/sets/" + rel.removeprefix("ddtree_patches/")
            assert archive.read(member) == (REPO / rel).read_bytes(), member
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_installed_patchkit_runs_from_any_directory_and_resolves_the_shipped_set(installed, tmp_path):
    assert run(installed, "patchkit", "--help", cwd=tmp_path).returncode == 0
    empty = tmp_path / "not-a-base"
    empty.mkdir()
    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    for how in ((), ("--set", "v1")):
        done = run(installed, "patchkit", "status", *how, "--target", str(empty), "--json", cwd=tmp_path)
        doc = json.loads(done.stdout)
        assert done.returncode == 1 and doc["result"]["state"] == "not-base", done.stdout + done.stderr
        assert doc["result"]["set"].startswith("ddtree@")  # the set shipped as package data, lock checked


def test_an_unknown_set_names_the_places_searched(installed, tmp_path):
    done = run(installed, "patchkit", "status", "--set", "nope", "--target", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "no patch set 'nope'" in line and f"{tmp_path / 'ddtree_patches' / 'nope'}" in line
    assert "patchkit/sets/nope" in line


def test_checks_is_not_a_top_level_package_of_the_install(installed, tmp_path):
    code = ("import importlib.util as u; "
            "print(u.find_spec('checks') is None, u.find_spec('patchkit.checks') is not None)")
    done = run(installed, "python", "-c", code, cwd=tmp_path)
    assert done.stdout.split() == ["True", "True"], done.stderr
