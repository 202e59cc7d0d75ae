"""Helpers for tests that need the patched tree (the set's own tests in ``ddtree_patches/*/tests``).

:func:`patched_tree` returns ``$PATCHKIT_TARGET`` when set; otherwise it fetches the base (cached
under the patchkit home) and applies the set to a tree of its own, once: a file lock makes it safe
when several processes (pytest-xdist workers, parallel sessions) ask at the same time.
"""

from __future__ import annotations

import os
from pathlib import Path

from patchkit import fsutil, paths
from patchkit.errors import Failed
from patchkit.manifest import load
from patchkit.patchset import apply as apply_mod
from patchkit.patchset import base

TARGET_ENV = "PATCHKIT_TARGET"


def patched_tree(set_dir: Path | None = None) -> Path:
    """A tree with the set applied: ``$PATCHKIT_TARGET``, or a cached one under the patchkit home."""
    if os.environ.get(TARGET_ENV):
        return Path(os.environ[TARGET_ENV])
    set_dir = Path(set_dir) if set_dir else paths.default_set_dir()
    man = load(set_dir)
    dest = paths.trees_dir() / f"{paths.default_target(man).name}+{man.set.name}-{man.set.version}"
    with fsutil.file_lock(paths.locks_dir() / f"patched-{dest.name}.lock", what=f"the patched tree {dest}",
                          holder=f"patched_tree (pid {os.getpid()})"):
        base.fetch(man, dest)
        result = apply_mod.apply(set_dir, dest)  # a no-op when already applied
    if not result.ok:
        raise Failed(f"patched tree {dest} is not usable: {result.state}", hint=f"delete {dest} and retry")
    return dest
