"""Helpers for tests that need the patched tree (the set's own tests in ``ddtree_patches/*/tests``).

:func:`patched_tree` returns ``$PATCHKIT_TARGET`` when set; otherwise it fetches the base (cached
under the patchkit home) and applies the set to a tree of its own, once: a file lock makes it safe
when several processes (pytest-xdist workers, parallel sessions) ask at the same time.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from patchkit import paths
from patchkit.errors import Failed
from patchkit.manifest import load
from patchkit.patchset import apply as apply_mod
from patchkit.patchset import base

TARGET_ENV = "PATCHKIT_TARGET"


@contextlib.contextmanager
def file_lock(name: str) -> Iterator[None]:
    """An exclusive inter-process lock on ``<home>/locks/<name>.lock``."""
    paths.locks_dir().mkdir(parents=True, exist_ok=True)
    with open(paths.locks_dir() / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def patched_tree(set_dir: Path | None = None) -> Path:
    """A tree with the set applied: ``$PATCHKIT_TARGET``, or a cached one under the patchkit home."""
    if os.environ.get(TARGET_ENV):
        return Path(os.environ[TARGET_ENV])
    set_dir = Path(set_dir) if set_dir else paths.default_set_dir()
    man = load(set_dir)
    dest = paths.trees_dir() / f"{paths.default_target(man).name}+{man.set.name}-{man.set.version}"
    with file_lock(f"patched-{dest.name}"):
        base.fetch(man, dest)
        result = apply_mod.apply(set_dir, dest)  # a no-op when already applied
    if not result.ok:
        raise Failed(f"patched tree {dest} is not usable: {result.state}", hint=f"delete {dest} and retry")
    return dest
