"""Fixtures for the static-gate tests: example files become a real git tree plus a set directory.

Example file conventions (shared with the generic example test): ``@base/x`` is committed in the
base commit and untouched, ``@set/x`` goes into the patch-set directory, anything else is committed
by a second "patch" commit and counts as touched.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import git
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # the repo root holds both packages, patchkit and checks
    sys.path.insert(0, str(REPO))

from patchkit.gates import VerifyContext  # noqa: E402

ACTOR = git.Actor("patchkit test", "test@patchkit.invalid")


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _commit(repo: git.Repo, message: str) -> None:
    repo.git.add("-A")
    repo.index.commit(message, author=ACTOR, committer=ACTOR)


@pytest.fixture(autouse=True)
def private_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test may reach the user's home."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATCHKIT_HOME", str(home / ".patchkit"))
    return home


@pytest.fixture
def make_ctx(tmp_path: Path) -> Callable[..., VerifyContext]:
    """Build a VerifyContext from example-style files and a manifest dict."""
    counter = iter(range(1000))

    def build(files: dict[str, str], manifest: dict[str, Any] | None = None) -> VerifyContext:
        n = next(counter)
        base = {k[6:]: v for k, v in files.items() if k.startswith("@base/")}
        in_set = {k[5:]: v for k, v in files.items() if k.startswith("@set/")}
        patched = {k: v for k, v in files.items() if not k.startswith(("@base/", "@set/"))}
        root, set_dir = tmp_path / f"tree{n}", tmp_path / f"set{n}"
        root.mkdir()
        repo = git.Repo.init(root)
        write_files(root, {"README": "base\n", **base})
        _commit(repo, "base")
        write_files(root, patched)
        _commit(repo, "patch")
        set_dir.mkdir()
        write_files(set_dir, in_set)
        return VerifyContext(root=root, set_dir=set_dir, manifest=manifest or {}, touched=tuple(sorted(patched)),
                             cache_dir=tmp_path / "cache", env_dir=tmp_path / "envs")

    return build
