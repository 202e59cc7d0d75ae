"""``patchkit lock``: recompute the part of ``manifest.toml`` below the lock marker.

Patch hashes come from the series' files; the base tree id and the post-image (sha256 of every
file the series touches, as it is after the whole series) from staging the series on the base in a
scratch index. Only the lock part of the manifest is rewritten (atomically, under the set's lock).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchkit import fsutil, paths
from patchkit import manifest as manifest_mod
from patchkit.git import Repo, open_repo, quarantine
from patchkit.manifest import Lock, LockedPatch
from patchkit.patchset import base as base_mod
from patchkit.patchset import state, transaction
from patchkit.patchset.series import PatchSet, load_set
from patchkit.patchset.staging import Progress, post_image, stage_series
from patchkit.results import CommandResult


@dataclass(frozen=True, kw_only=True)
class LockResult(CommandResult):
    set: str
    base_tree: str
    patches: tuple[LockedPatch, ...]
    post_image_files: int
    changed: bool  # False when the manifest already held exactly this lock


def compute_lock(pset: PatchSet, repo: Repo, base_commit: str, progress: Progress | None = None) -> Lock:
    """The lock for ``pset`` staged on ``base_commit`` of ``repo`` (raises on unsafe/conflicting patches)."""
    staged = list(stage_series(repo, base_commit, pset, progress))
    touched: set[str] = set().union(*(s.touched for s in staged)) if staged else set()
    image = post_image(repo, staged[-1].tree, touched) if staged else {}
    patches = tuple(LockedPatch(p.name, p.sha256) for p in pset.patches)
    return Lock(repo.tree_of(base_commit), patches, image)


def manifest_with_lock(set_dir: Path, lock: Lock) -> bytes:
    """The bytes of ``set_dir/manifest.toml`` with its lock part replaced by ``lock``."""
    text = fsutil.read_utf8(Path(set_dir) / manifest_mod.MANIFEST_NAME, manifest_mod.MANIFEST_NAME)
    return (manifest_mod.human_part(text) + "\n" + manifest_mod.LOCK_MARKER + "\n"
            + manifest_mod.render_lock(lock)).encode("utf-8")


def lock(set_dir: Path, base_dir: Path | None = None, progress: Progress | None = None) -> LockResult:
    """Rewrite the lock of the set at ``set_dir`` using the base tree at ``base_dir`` (fetched if absent)."""
    set_dir = Path(set_dir)
    with transaction.set_lock(set_dir, "lock", progress):
        pset = load_set(set_dir, check_lock=False)
        man = pset.manifest
        base_dir = Path(base_dir) if base_dir else paths.default_target(man)
        if not base_dir.exists():
            base_mod.fetch(man, base_dir, progress=progress)
        repo = open_repo(base_dir, "base tree")
        commit = state.require_base(repo, man)
        with quarantine(repo) as held:  # locking leaves the base tree's object store untouched
            new_lock = compute_lock(pset, held.repo, commit, progress)
        path = set_dir / manifest_mod.MANIFEST_NAME
        data = manifest_with_lock(set_dir, new_lock)
        changed = path.read_bytes() != data
        if changed:
            fsutil.atomic_write(path, data)
    return LockResult(
        command="lock",
        ok=True,
        set=man.label,
        base_tree=new_lock.base_tree,
        patches=new_lock.patches,
        post_image_files=len(new_lock.post_image),
        changed=changed,
    )
