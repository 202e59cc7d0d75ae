"""Default locations: the patchkit home, base trees, the wheel cache and the default patch set.

The home is ``$PATCHKIT_HOME`` when set, else ``.patchkit/`` in the current directory (git-ignored).
Trees live in ``<home>/trees/<package>-<version>`` (pypi bases) or ``<home>/trees/<repo>-<commit12>``
(git bases); downloaded wheels in ``<home>/cache/``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from patchkit.errors import BadInput

SETS_DIR_NAME = "ddtree_patches"


def home() -> Path:
    """The patchkit home directory (not created)."""
    env = os.environ.get("PATCHKIT_HOME")
    return Path(env) if env else Path.cwd() / ".patchkit"


def trees_dir() -> Path:
    return home() / "trees"


def cache_dir() -> Path:
    return home() / "cache"


def locks_dir() -> Path:
    return home() / "locks"


def _version_key(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.findall(r"\d+|[A-Za-z]+", name))


def sets_roots() -> list[Path]:
    """Where default patch sets are looked for: ./ddtree_patches, then the one next to the package."""
    return [Path.cwd() / SETS_DIR_NAME, Path(__file__).resolve().parent.parent / SETS_DIR_NAME]


def default_set_dir() -> Path:
    """The newest set (highest version-like directory name) under ``ddtree_patches/``."""
    for root in sets_roots():
        if root.is_dir():
            sets = [d for d in root.iterdir() if (d / "manifest.toml").is_file()]
            if sets:
                return max(sets, key=lambda d: _version_key(d.name))
    raise BadInput("no patch set found under ddtree_patches/", hint="pass --set DIR")
