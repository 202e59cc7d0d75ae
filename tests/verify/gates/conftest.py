"""Fixtures for the static-gate tests: example files become a real git tree plus a set directory.

Example file conventions (shared with the generic example test, ``tests/verify/verify_helpers.py``):
``@base/x`` is committed in the base commit and untouched, ``@set/x`` goes into the patch-set
directory, anything else is committed by a second "patch" commit and counts as touched. HOME and
PATCHKIT_HOME are isolated by the suite-wide fixture in ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from patchkit.verify.api import VerifyContext
from tests.verify.verify_helpers import make_example


@pytest.fixture
def make_ctx(tmp_path: Path) -> Callable[..., VerifyContext]:
    """Build a VerifyContext from example-style files and a manifest dict (touched = the patched files)."""
    counter = iter(range(1000))

    def build(files: dict[str, str], manifest: dict[str, Any] | None = None) -> VerifyContext:
        root, set_dir, patched = make_example(tmp_path / f"example{next(counter)}", files)
        return VerifyContext(root=root, set_dir=set_dir, manifest=manifest or {}, touched=tuple(sorted(patched)),
                             cache_dir=tmp_path / "cache", env_dir=tmp_path / "envs")

    return build
