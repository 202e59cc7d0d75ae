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

from patchkit.gates import VerifyContext
from tests.verify.verify_helpers import make_tree, split_example_files, write_files


@pytest.fixture
def make_ctx(tmp_path: Path) -> Callable[..., VerifyContext]:
    """Build a VerifyContext from example-style files and a manifest dict (touched = the patched files)."""
    counter = iter(range(1000))

    def build(files: dict[str, str], manifest: dict[str, Any] | None = None) -> VerifyContext:
        n = next(counter)
        base, patched, in_set = split_example_files(files)
        root = make_tree(tmp_path / f"tree{n}", base, patched)
        set_dir = tmp_path / f"set{n}"
        set_dir.mkdir()
        write_files(set_dir, in_set)
        return VerifyContext(root=root, set_dir=set_dir, manifest=manifest or {}, touched=tuple(sorted(patched)),
                             cache_dir=tmp_path / "cache", env_dir=tmp_path / "envs")

    return build
