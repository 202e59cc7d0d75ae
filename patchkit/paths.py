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
    """Where patch sets are looked for: ./ddtree_patches, the checkout's next to the package, then the
    sets installed with the package (``patchkit/sets``: package data of a plain ``pip install``)."""
    package = Path(__file__).resolve().parent
    found: list[Path] = []
    for root in (Path.cwd() / SETS_DIR_NAME, package.parent / SETS_DIR_NAME, package / "sets"):
        if root.resolve() not in [f.resolve() for f in found]:  # in a checkout patchkit/sets links to ../ddtree_patches
            found.append(root)
    return found


def _searched() -> str:
    return ", ".join(str(root) for root in sets_roots())


def default_set_dir() -> Path:
    """The newest set (highest version-like directory name) under the first root holding one."""
    for root in sets_roots():
        if root.is_dir():
            sets = [d for d in root.iterdir() if (d / "manifest.toml").is_file()]
            if sets:
                return max(sets, key=lambda d: _version_key(d.name))
    raise BadInput(f"no patch set found; looked in {_searched()}", hint="pass --set DIR")


def find_set(given: Path) -> Path:
    """``--set``: a set directory, or a set's name (``v1``) in the places patch sets are looked for."""
    if (given / "manifest.toml").is_file() or len(given.parts) != 1:
        return given
    for root in sets_roots():
        if (root / given / "manifest.toml").is_file():
            return root / given
    places = ", ".join(str(p) for p in [given, *(root / given for root in sets_roots())])
    raise BadInput(f"no patch set {str(given)!r}: no manifest.toml in {places}",
                   hint="pass --set with a patch-set directory or the name of an installed set")
