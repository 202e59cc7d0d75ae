"""``patchkit lock``: recompute the part of ``manifest.toml`` below the lock marker.

Patch hashes come from the series' files; the base tree id and the post-image (sha256 of every
file the series touches, as it is after the whole series) from staging the series on the base in a
scratch index. Only the lock part of the manifest is rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchkit.patchset import base as base_mod
from patchkit import manifest as manifest_mod
from patchkit.errors import BadInput
from patchkit.git import Repo, open_repo, quarantine
from patchkit.manifest import Lock, LockedPatch
from patchkit.patchset.series import PatchSet, load_set
from patchkit.patchset import state
from patchkit.results import CommandResult
from patchkit.patchset.staging import Progress, post_image, stage_series


@dataclass(frozen=True)
class LockResult(CommandResult):
    set: str
    base_tree: str
    patches: tuple[LockedPatch, ...]
    post_image_files: int
    changed: bool  # False when the manifest already held exactly this lock


def compute_lock(pset: PatchSet, repo: Repo, base_commit: str, progress: Progress | None = None) -> Lock:
    """The lock for ``pset`` staged on ``base_commit`` of ``repo`` (raises on unsafe/conflicting patches)."""
    staged = stage_series(repo, base_commit, pset, progress)
    touched = set().union(*(s.touched for s in staged)) if staged else set()
    image = post_image(repo, staged[-1].tree, touched) if staged else {}
    patches = tuple(LockedPatch(p.name, p.sha256) for p in pset.patches)
    return Lock(repo.tree_of(base_commit), patches, image)


def lock(set_dir: Path, base_dir: Path | None = None, progress: Progress | None = None) -> LockResult:
    """Rewrite the lock of the set at ``set_dir`` using the base tree at ``base_dir`` (fetched if absent)."""
    pset = load_set(set_dir, check_lock=False)
    man = pset.manifest
    base_dir = Path(base_dir) if base_dir else base_mod.default_dest(man)
    if not base_dir.exists():
        base_mod.fetch(man, base_dir, progress=progress)
    repo = open_repo(base_dir, "base tree")
    commit = state.base_commit(repo, man)
    if commit is None:
        raise BadInput(
            f"{base_dir} does not hold the base {man.base_label()}", hint="pass --base DIR or run `patchkit base fetch`"
        )
    with quarantine(repo) as held:  # locking leaves the base tree's object store untouched
        new_lock = compute_lock(pset, held.repo, commit, progress)
    changed = manifest_mod.write_lock(Path(set_dir), new_lock)
    return LockResult("lock", True, man.label, new_lock.base_tree, new_lock.patches, len(new_lock.post_image), changed)
