"""Fixtures for the verify tests: real git trees in tmp_path, a private PATCHKIT_HOME, no $HOME."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomli_w

# The helpers module sits beside this file; the package layout does not put this folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verify_helpers import make_example  # noqa: E402

from patchkit.verify.api import VerifyContext
from patchkit.verify.run import build_context


@pytest.fixture(autouse=True)
def private_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Nothing a test does may reach the user's home; caches and envs live in a temp PATCHKIT_HOME."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATCHKIT_HOME", str(home / ".patchkit"))
    monkeypatch.delenv("PATCHKIT_VERIFY_PYTHON", raising=False)
    return home


@pytest.fixture
def make_ctx(tmp_path: Path) -> Callable[..., VerifyContext]:
    """Build a VerifyContext from example-style files and a manifest dict."""
    counter = iter(range(1000))

    def build(files: dict[str, str], manifest: dict[str, Any] | None = None) -> VerifyContext:
        root, set_dir, _ = make_example(tmp_path / f"example{next(counter)}", files)
        (set_dir / "manifest.toml").write_text(tomli_w.dumps(manifest or {}))
        return build_context(set_dir, root)

    return build
