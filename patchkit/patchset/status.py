"""What state a target tree is in: base ok, which patches are applied (by commit trailer), drift.

:func:`inspect` is shared by ``apply`` (to decide between apply, no-op and drift) and ``status``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from patchkit.patchset import journal
from patchkit.errors import EXIT_OK, EXIT_FAILED
from patchkit.git import Repo, open_repo
from patchkit.manifest import ABSENT
from patchkit.patchset.series import PatchSet, load_set, sha256_bytes, split_trailers, trailer_set
from patchkit.results import CommandResult

#: How far back from HEAD the base commit is searched (first parents).
MAX_DEPTH = 5000


@dataclass(frozen=True)
class AppliedCommit:
    commit: str
    patch: str  # name from the Patchkit-Patch trailer
    set: str  # name@version from the Patchkit-Set trailer
    matches: bool | None = None  # the commit's diff equals the set's patch (patch-id), when checked


@dataclass(frozen=True)
class DriftEntry:
    path: str
    reason: str  # "modified", "missing", "should be absent", "uncommitted: XY", "not applied: <patch>"


@dataclass(frozen=True)
class TargetState:
    head: str
    ref: str
    base_commit: str | None
    applied: tuple[AppliedCommit, ...]  # our patch commits right after the base, in order
    foreign: tuple[str, ...]  # later commits without our trailers (user edits)
    dirty: tuple[str, ...]  # git status --porcelain entries, untracked included

    def applied_names(self) -> list[str]:
        return [c.patch for c in self.applied]


def find_base(repo: Repo, pset: PatchSet) -> str | None:
    """The newest first-parent ancestor of HEAD whose tree is the locked base tree (or the git pin)."""
    base_tree = pset.manifest.lock.base_tree if pset.manifest.lock else None
    pinned = pset.manifest.git.commit if pset.manifest.git else None
    log = repo.run("log", "--first-parent", "--format=%H %T", "-n", str(MAX_DEPTH), "HEAD")
    for line in log.splitlines():
        commit, tree = line.split()
        if tree == base_tree or commit == pinned:
            return commit
    return None


def inspect(repo: Repo, pset: PatchSet) -> TargetState:
    """Read HEAD, the base, our patch commits after it and uncommitted changes."""
    head = repo.rev("HEAD")
    if head is None:
        return TargetState("", repo.head_ref(), None, (), (), ())
    base = find_base(repo, pset)
    applied: list[AppliedCommit] = []
    foreign: list[str] = []
    for commit in repo.first_parent_log(base) if base else []:
        message = repo.commit_message(commit)
        _, name = split_trailers(message)
        label = trailer_set(message)
        if name and label and not foreign:
            applied.append(AppliedCommit(commit, name, label))
        else:
            foreign.append(commit)
    return TargetState(head, repo.head_ref(), base, tuple(applied), tuple(foreign), tuple(repo.porcelain_status()))


def worktree_drift(root: Path, post_image: dict[str, str]) -> list[DriftEntry]:
    """Files whose bytes in the work tree differ from the locked post-image."""
    drift = []
    for rel, expected in sorted(post_image.items()):
        path = root / rel
        if expected == ABSENT:
            if os.path.lexists(path):
                drift.append(DriftEntry(rel, "should be absent"))
            continue
        if not os.path.lexists(path):
            drift.append(DriftEntry(rel, "missing"))
            continue
        data = os.readlink(path).encode("utf-8", "surrogateescape") if path.is_symlink() else path.read_bytes()
        if sha256_bytes(data) != expected:
            drift.append(DriftEntry(rel, "modified"))
    return drift


def drift_entries(repo: Repo, pset: PatchSet, state: TargetState) -> list[DriftEntry]:
    """Everything that keeps ``state`` from being exactly the fully patched tree."""
    entries = [DriftEntry(line[3:], f"uncommitted: {line[:2].strip()}") for line in state.dirty]
    names = [p.name for p in pset.patches]
    for name in names[len(state.applied) :]:
        entries.append(DriftEntry(name, "not applied"))
    for commit in state.foreign:
        entries.append(DriftEntry(commit[:12], "commit without patchkit trailers on top of the set"))
    assert pset.manifest.lock is not None
    seen = {e.path for e in entries}
    entries += [e for e in worktree_drift(repo.path, pset.manifest.lock.post_image) if e.path not in seen]
    return entries


def patch_matches(repo: Repo, commit: str, diff: bytes) -> bool:
    """True when the commit's change equals the patch's (``git patch-id --stable`` on both).

    The commit is diffed with and without rename detection, since the patch may use either form.
    """
    theirs = repo.run("patch-id", "--stable", input=diff).split()[:1]
    for renames in ("--no-renames", "-M"):
        shown = repo.run_bytes("diff-tree", "-p", "--full-index", renames, f"{commit}^", commit)[1]
        if theirs and repo.run("patch-id", "--stable", input=shown).split()[:1] == theirs:
            return True
    return False


# ---------------------------------------------------------------------- the status command
@dataclass(frozen=True)
class StatusResult(CommandResult):
    target: str
    set: str
    base_ok: bool
    base_commit: str | None
    state: str  # "base", "applied", "partial", "drift", "not-base"
    applied: tuple[AppliedCommit, ...]
    missing: tuple[str, ...]
    drift: tuple[DriftEntry, ...]
    journal: str | None  # what recovery did with an interrupted apply's journal, if any

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILED


def status(set_dir: Path, target: Path) -> StatusResult:
    """Report base, applied patches and drift of ``target`` against the set."""
    pset = load_set(set_dir)
    repo = open_repo(target)
    recovered = journal.recover(repo)
    state = inspect(repo, pset)
    names = [p.name for p in pset.patches]
    applied = tuple(
        AppliedCommit(
            c.commit, c.patch, c.set, c.patch in names and patch_matches(repo, c.commit, _diff_of(pset, c.patch))
        )
        for c in state.applied
    )
    base_ok = state.base_commit is not None
    drift = tuple(drift_entries(repo, pset, state)) if base_ok else ()
    kind = _state_name(base_ok, state, names, drift, applied)
    return StatusResult(
        "status",
        kind == "applied",
        str(target),
        pset.manifest.label,
        base_ok,
        state.base_commit,
        kind,
        applied,
        tuple(names[len(applied) :]),
        drift,
        recovered,
    )


def _diff_of(pset: PatchSet, name: str) -> bytes:
    return next(p.diff for p in pset.patches if p.name == name)


def _state_name(base_ok: bool, state: TargetState, names: list[str], drift: tuple, applied: tuple) -> str:
    if not base_ok:
        return "not-base"
    if not state.applied and not state.foreign and not state.dirty:
        return "base"
    complete = [c.patch for c in applied] == names and all(c.matches for c in applied)
    if complete and not drift:
        return "applied"
    prefix = names[: len(applied)] == [c.patch for c in applied] and 0 < len(applied) < len(names)
    return "partial" if prefix and not state.foreign and not state.dirty else "drift"
