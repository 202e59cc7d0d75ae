"""``patchkit clean``: list and remove what patchkit keeps on disk (trees, environments, caches).

What each option removes (they add up; none given means ``--trees --envs``):

* ``--trees``: the base and patched trees, ``<home>/trees/*``;
* ``--envs``: the verify environments, ``<cache>/envs/*`` (and an older home's ``<home>/envs``);
* ``--cache``: the whole cache: the environments, the downloaded wheels, the gate results
  (``<cache>/verify``) and anything else patchkit cached there (an older home's ``<home>/cache`` too).

Nothing of the user's is ever removed silently: a tree that holds work patchkit did not make
(uncommitted or untracked files, commits not made by ``patchkit apply``), an interrupted apply's
journal, or a tree or environment in use by another patchkit is kept and listed with the reason
(exit 1), unless ``--force`` (in use is never forced). ``--dry-run`` removes nothing: it lists what
would go and the size of every kind, the ones the options leave alone included.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from patchkit import fsutil, paths
from patchkit.errors import EXIT_FAILED, EXIT_OK, BadInput
from patchkit.git import PATCHKIT_EMAIL, Repo
from patchkit.patchset import state, transaction
from patchkit.patchset.series import split_trailers
from patchkit.results import CommandResult

ItemKind = Literal["tree", "env", "wheel", "gate-results", "other"]
Action = Literal["removed", "would remove", "kept"]
#: Every kind, in the order they are listed, with the option that removes it.
KINDS: tuple[tuple[ItemKind, str], ...] = (
    ("tree", "--trees"), ("env", "--envs"), ("wheel", "--cache"), ("gate-results", "--cache"), ("other", "--cache"))


@dataclass(frozen=True, kw_only=True)
class CleanItem:
    kind: ItemKind
    path: str
    size: int  # bytes on disk
    action: Action
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class KindTotal:
    """What one kind holds on disk, and whether the options chose it (else ``option`` would)."""

    kind: ItemKind
    count: int
    size: int  # bytes on disk
    selected: bool
    option: str


@dataclass(frozen=True, kw_only=True)
class CleanResult(CommandResult):
    home: str
    cache: str
    dry_run: bool
    items: tuple[CleanItem, ...]
    freed: int  # bytes removed (or that a dry run would remove)
    kinds: tuple[KindTotal, ...] = ()  # per kind; with --dry-run every kind, else the selected ones

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILED


def selected_kinds(*, trees: bool, envs: bool, cache: bool) -> frozenset[ItemKind]:
    """The kinds the options name (see the module docstring); none named: trees and environments."""
    if not (trees or envs or cache):
        trees = envs = True
    chosen: set[ItemKind] = set()
    if trees:
        chosen.add("tree")
    if envs or cache:
        chosen.add("env")
    if cache:
        chosen |= {"wheel", "gate-results", "other"}
    return frozenset(chosen)


def found(kind: ItemKind) -> list[Path]:
    """What patchkit keeps of ``kind`` on disk now."""
    caches = list(dict.fromkeys([paths.cache_dir(), paths.legacy_cache_dir()]))
    if kind == "tree":
        return _children(paths.trees_dir())
    if kind == "env":
        return [p for root in dict.fromkeys([paths.envs_dir(), paths.home() / "envs"]) for p in _children(root)]
    if kind == "wheel":
        return [p for root in caches for p in sorted(root.glob("*.whl"))]
    if kind == "gate-results":
        return [p for root in caches for p in _children(root / "verify")]
    # the rest of a cache folder: what `patchkit port` caches, a download an interrupted fetch left
    known = {"envs", "verify"}
    return [p for root in caches if root.is_dir() for p in sorted(root.iterdir())
            if p.name not in known and not p.name.endswith((".whl", ".lock"))]


def clean(
    *, trees: bool = False, envs: bool = False, cache: bool = False, dry_run: bool = False, force: bool = False
) -> CleanResult:
    """Remove the kinds the options select (see the module docstring)."""
    chosen = selected_kinds(trees=trees, envs=envs, cache=cache)
    items: list[CleanItem] = []
    totals: list[KindTotal] = []
    for kind, option in KINDS:
        if kind in chosen:
            done = [_clean_one(kind, path, dry_run, force) for path in found(kind)]
            items += done
            totals.append(KindTotal(kind=kind, count=len(done), size=sum(i.size for i in done), selected=True,
                                    option=option))
        elif dry_run:  # what the options leave alone, so one dry run shows all of it
            left = found(kind)
            totals.append(KindTotal(kind=kind, count=len(left), size=sum(_size_of(p) for p in left),
                                    selected=False, option=option))
    freed = sum(i.size for i in items if i.action != "kept")
    return CleanResult(
        command="clean",
        ok=all(i.action != "kept" for i in items),
        home=str(paths.home()),
        cache=str(paths.cache_dir()),
        dry_run=dry_run,
        items=tuple(items),
        freed=freed,
        kinds=tuple(totals),
    )


def _clean_one(kind: ItemKind, path: Path, dry_run: bool, force: bool) -> CleanItem:
    if kind == "tree":
        return _clean_tree(path, dry_run, force)
    if kind == "env":
        return _clean_env(path, dry_run)
    return _clean_plain(kind, path, dry_run)


def _children(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.endswith(".lock")) if root.is_dir() else []


def disk_size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def _remove(path: Path) -> None:
    try:
        shutil.rmtree(path)
    except OSError as exc:
        raise BadInput(f"could not remove {path}: {exc.strerror} ({exc.filename})",
                       hint="fix the permissions (or the immutable flag) and run `patchkit clean` again") from None


# ---------------------------------------------------------------------- trees
def _clean_tree(path: Path, dry_run: bool, force: bool) -> CleanItem:
    size = disk_size(path)
    if path.name.startswith("."):  # a staging directory an interrupted base fetch left
        return _done("tree", path, size, dry_run, "left by an interrupted base fetch")
    if not (path / ".git").exists():
        return _keep("tree", path, size, "not a git tree (not made by patchkit?)") if not force else _done(
            "tree", path, size, dry_run, "")
    repo = Repo(path)
    try:
        with _try_lock(repo):
            reason = _user_work(repo)
            if reason and not force:
                return _keep("tree", path, size, f"{reason}; --force removes it anyway")
            return _done("tree", path, size, dry_run, reason)
    except fsutil.LockBusy as busy:
        return _keep("tree", path, size, busy.message)


@contextlib.contextmanager
def _try_lock(repo: Repo) -> Iterator[None]:
    """The target lock without waiting: a tree in use is listed, not waited for."""
    with fsutil.file_lock(repo.git_dir / transaction.LOCK_NAME, what=f"the tree {repo.path}",
                          holder=f"another patchkit clean (pid {os.getpid()})", wait_s=0):
        yield


def _user_work(repo: Repo) -> str:
    """Why the tree holds something of the user's ("" when it holds only what patchkit made)."""
    if transaction.pending(repo):
        return "an interrupted apply left its journal (run `patchkit status` on it)"
    dirty = [e.path for e in repo.status_entries() if not state.is_bytecode(e.path)]
    if dirty:
        return f"holds uncommitted changes: {', '.join(dirty[:5])}" + (" ..." if len(dirty) > 5 else "")
    foreign = _foreign_commits(repo)
    if foreign:
        return f"holds {len(foreign)} commit(s) not made by patchkit apply (newest {foreign[0][:12]})"
    return ""


def _foreign_commits(repo: Repo) -> list[str]:
    """Commits on HEAD's first parents above the newest one patchkit committed (a base commit or a
    patch commit). In a tree named ``<repo>-<commit12>`` (a git base) the pinned commit counts as ours."""
    pin = repo.path.name.split("+", 1)[0].rsplit("-", 1)[-1]
    log = repo.run("log", "--first-parent", "--format=%H %P%x00%ce", "-n", str(state.MAX_DEPTH), "HEAD", check=False)
    foreign: list[str] = []
    for line in log.splitlines():
        ids, email = line.split("\0", 1)
        commit, *parents = ids.split()
        ours = email == PATCHKIT_EMAIL and (not parents or split_trailers(repo.commit_message(commit))[1])
        if ours or (len(pin) == 12 and commit.startswith(pin)):
            return foreign
        foreign.append(commit)
    return foreign


# ---------------------------------------------------------------------- environments and caches
def _clean_env(path: Path, dry_run: bool) -> CleanItem:
    size = disk_size(path)
    lock = path.parent / f"{path.name}.lock"
    if _busy(lock):
        return _keep("env", path, size, "in use by another patchkit verify")
    return _done("env", path, size, dry_run, "")


def _busy(lock: Path) -> bool:
    if not lock.exists():
        return False
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def _size_of(path: Path) -> int:
    return disk_size(path) if path.is_dir() else path.lstat().st_blocks * 512


def _clean_plain(kind: ItemKind, path: Path, dry_run: bool) -> CleanItem:
    size = _size_of(path)
    if not dry_run and not path.is_dir():
        path.unlink()
        return CleanItem(kind=kind, path=str(path), size=size, action="removed")
    return _done(kind, path, size, dry_run, "")


def _keep(kind: ItemKind, path: Path, size: int, reason: str) -> CleanItem:
    return CleanItem(kind=kind, path=str(path), size=size, action="kept", reason=reason)


def _done(kind: ItemKind, path: Path, size: int, dry_run: bool, reason: str) -> CleanItem:
    if not dry_run:
        _remove(path)
    return CleanItem(kind=kind, path=str(path), size=size, action="would remove" if dry_run else "removed",
                     reason=reason)
