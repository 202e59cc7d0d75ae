"""Default locations: the patchkit home, the shared caches, base trees and the default patch set.

**The home** (trees, logs, locks) is found once per checkout:

1. ``$PATCHKIT_HOME`` when set;
2. else ``.patchkit/`` at the root of the patchkit checkout the current directory is in (the
   nearest ancestor holding ``ddtree_patches/``), so running from a subdirectory uses the same home;
3. else the checkout patchkit itself runs from (an editable install);
4. else the user's data directory (``$XDG_DATA_HOME/patchkit``, ``~/.local/share/patchkit``).

**The caches** (the base wheel, verify environments, gate results) are shared by every checkout of
the user: ``$PATCHKIT_CACHE_DIR``, else ``$PATCHKIT_HOME/cache`` when a home is set explicitly (a
home is then self-contained, as tests and CI want), else the user's cache directory
(``$XDG_CACHE_HOME/patchkit``, ``~/.cache/patchkit``; ``~/Library/Caches/patchkit`` on macOS).

Trees live in ``<home>/trees/<package>-<version>`` (pypi bases) or ``<home>/trees/<repo>-<commit12>``
(git bases).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import BadInput

if TYPE_CHECKING:
    from patchkit.manifest import Manifest

SETS_DIR_NAME = "ddtree_patches"
HOME_ENV = "PATCHKIT_HOME"
CACHE_ENV = "PATCHKIT_CACHE_DIR"
HOME_DIR_NAME = ".patchkit"
_PACKAGE_CHECKOUT = Path(__file__).resolve().parent.parent


def checkout_root(start: Path | None = None) -> Path | None:
    """The nearest ancestor of ``start`` (default: the current directory) that holds ``ddtree_patches/``."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / SETS_DIR_NAME).is_dir():
            return candidate
    return None


@functools.lru_cache(maxsize=16)
def _home_for(env_home: str | None, cwd: str) -> Path:
    if env_home:
        return Path(env_home).absolute()
    root = checkout_root(Path(cwd))
    if root is None and (_PACKAGE_CHECKOUT / SETS_DIR_NAME).is_dir() and (_PACKAGE_CHECKOUT / ".git").exists():
        root = _PACKAGE_CHECKOUT
    return root / HOME_DIR_NAME if root else user_data_dir()


def home() -> Path:
    """The patchkit home directory, absolute (not created)."""
    return _home_for(os.environ.get(HOME_ENV) or None, os.getcwd())


def _xdg(variable: str, fallback: str) -> Path:
    value = os.environ.get(variable)
    return Path(value) if value and Path(value).is_absolute() else Path.home() / fallback


def user_data_dir() -> Path:
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "patchkit"
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "patchkit"
    return _xdg("XDG_DATA_HOME", ".local/share") / "patchkit"


def user_cache_dir() -> Path:
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "patchkit"
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "patchkit" / "Cache"
    return _xdg("XDG_CACHE_HOME", ".cache") / "patchkit"


def cache_dir() -> Path:
    """The shared cache: downloaded wheels at its top, ``envs/`` and ``verify/`` below (see the docstring)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).absolute()
    if os.environ.get(HOME_ENV):
        return home() / "cache"
    return user_cache_dir()


def legacy_cache_dir() -> Path:
    """Where a home kept its wheels before caches were shared (still read, never written)."""
    return home() / "cache"


def envs_dir() -> Path:
    """Verify environments (pinned venvs), shared like the wheel cache."""
    return cache_dir() / "envs"


def verify_cache_dir() -> Path:
    """Cached gate results."""
    return cache_dir() / "verify"


def trees_dir() -> Path:
    return home() / "trees"


def locks_dir() -> Path:
    return home() / "locks"


def logs_dir() -> Path:
    return home() / "logs"


# ---------------------------------------------------------------------- defaults of the commands
def _version_key(name: str) -> tuple[int | str, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.findall(r"\d+|[A-Za-z]+", name))


def sets_roots() -> list[Path]:
    """Where patch sets are looked for: ./ddtree_patches, the checkout's (found from the working directory),
    the one next to the package, then the sets installed with the package (``patchkit/sets``: package data
    of a plain ``pip install``)."""
    package = Path(__file__).resolve().parent
    candidates = [Path.cwd() / SETS_DIR_NAME]
    candidates += [root / SETS_DIR_NAME for root in (checkout_root(),) if root]
    candidates += [_PACKAGE_CHECKOUT / SETS_DIR_NAME, package / "sets"]
    found: list[Path] = []
    for root in candidates:
        if root.resolve() not in [f.resolve() for f in found]:  # in a checkout patchkit/sets links to ../ddtree_patches
            found.append(root)
    return found


def _searched() -> str:
    return ", ".join(str(root) for root in sets_roots())


def shipped_sets() -> list[Path]:
    """The set directories under the first root that holds any, oldest name first."""
    for root in sets_roots():
        if root.is_dir():
            sets = [d for d in root.iterdir() if (d / "manifest.toml").is_file()]
            if sets:
                return sorted(sets, key=lambda d: _version_key(d.name))
    return []


def default_set_dir() -> Path:
    """The set commands take without ``--set``: the newest of those whose manifest says ``default = true``
    under ``[set]`` (the newest set proven on a GPU, see ``patchkit sets``), else the newest set."""
    from patchkit.manifest import load  # the human part only: a stale lock must not hide the default

    sets = shipped_sets()
    if not sets:
        raise BadInput(f"no patch set found; looked in {_searched()}", hint="pass --set NAME or --set DIR")
    marked = [d for d in sets if load(d, with_lock=False).set.default]
    return (marked or sets)[-1]


def default_target(manifest: Manifest) -> Path:
    """``<home>/trees/<package>-<version>`` (pypi) or ``<home>/trees/<repo>-<commit12>`` (git)."""
    if manifest.base_kind == "pypi" and manifest.pypi:
        return trees_dir() / f"{manifest.pypi.package}-{manifest.pypi.version}"
    assert manifest.git is not None
    name = re.sub(r"\.git$", "", manifest.git.url.rstrip("/").rsplit("/", 1)[-1]) or "repo"
    return trees_dir() / f"{name}-{manifest.git.commit[:12]}"


def resolve_set(set_dir: Path | None) -> Path:
    """``set_dir`` (a directory, or the name of a set), or the default set (:func:`default_set_dir`)."""
    return find_set(Path(set_dir)) if set_dir else default_set_dir()


def locate(set_dir: Path | None, target: Path | None) -> tuple[Path, Path]:
    """The set directory (default: :func:`default_set_dir`) and target tree (default: the base tree)."""
    from patchkit.manifest import load  # read only to find the default target

    chosen = resolve_set(set_dir)
    return chosen, Path(target) if target else default_target(load(chosen))


def set_argument(set_dir: Path) -> str:
    """How ``--set`` names ``set_dir`` most briefly: its name where the name finds that set, else its path."""
    try:
        if find_set(Path(set_dir.name)).resolve() == set_dir.resolve():
            return set_dir.name
    except BadInput:
        pass
    return str(set_dir)


def find_set(given: Path) -> Path:
    """``--set``: a set directory, or a set's name (``v1``) in the places patch sets are looked for."""
    if (given / "manifest.toml").is_file() or len(given.parts) != 1:
        return given
    for root in sets_roots():
        if (root / given / "manifest.toml").is_file():
            return root / given
    names = ", ".join(d.name for d in shipped_sets()) or "none found"
    places = ", ".join(str(p) for p in [given, *(root / given for root in sets_roots())])
    raise BadInput(f"no patch set {str(given)!r} (the sets: {names}): no manifest.toml in {places}",
                   hint="pass --set with one of those names or a patch-set directory; `patchkit sets` lists them")
