"""Helpers for the verify tests; the shared ones live in :mod:`patchkit.testing.verify`."""

from __future__ import annotations

from pathlib import Path

from patchkit.testing.verify import (  # noqa: F401 - re-exported for the verify and gate tests
    commit_all,
    make_example,
    make_tree,
    manifest_doc,
    split_example_files,
    write_files,
    write_manifest,
)

REPO = Path(__file__).resolve().parents[2]
