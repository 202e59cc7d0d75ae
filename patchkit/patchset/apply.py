"""``patchkit apply``: the whole series or nothing.

1. the set must match its lock; the target must be the pinned base (or base + our patch commits),
   with a clean work tree;
2. every patch is staged in a scratch index (:mod:`patchkit.staging`) and recorded as one commit
   (author, date, message from the patch header; trailers naming set and patch; committer and
   commit date fixed, so the commit ids are reproducible); the final tree is checked against the
   locked post-image;
3. only then the journal is written, the branch is moved with a compare-and-swap ``update-ref``,
   the work tree is updated and the journal deleted (:mod:`patchkit.journal`).

An exception, Ctrl-C or SIGTERM before step 3 leaves the target untouched (only the scratch index
existed). Signals during step 3 are held until it completes; a kill -9 during step 3 is finished or
rolled back by the next ``apply`` or ``status``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from patchkit.patchset import journal, staging
from patchkit.errors import EXIT_FAILED, EXIT_OK, BadInput, Interrupted
from patchkit.git import Repo, identity_env, open_repo, quarantine
from patchkit.patchset.series import PatchSet, load_set, message_with_trailers
from patchkit.results import CommandResult
from patchkit.patchset.state import DriftEntry, TargetState, drift_entries, inspect
from patchkit.patchset.staging import Conflict, ConflictError, Progress

#: Test hook: comma-separated step names at which apply prints a marker and sleeps.
PAUSE_ENV = "PATCHKIT_TEST_PAUSE"
PAUSE_SECONDS_ENV = "PATCHKIT_TEST_PAUSE_S"


@dataclass(frozen=True)
class PatchCommit:
    patch: str
    subject: str
    commit: str | None  # None in a dry run


@dataclass(frozen=True)
class ApplyResult(CommandResult):
    target: str
    set: str
    state: str  # "applied", "already-applied", "dry-run", "conflict", "drift"
    head_before: str
    head_after: str
    patches: tuple[PatchCommit, ...]
    conflict: Conflict | None = None
    drift: tuple[DriftEntry, ...] = ()
    recovered: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILED


def apply(set_dir: Path, target: Path, *, dry_run: bool = False, progress: Progress | None = None) -> ApplyResult:
    """Apply the set at ``set_dir`` to the git tree ``target`` (see the module docstring)."""
    pset = load_set(set_dir)
    repo = open_repo(target)
    if dry_run and journal.path_of(repo).exists():
        raise BadInput(
            "an interrupted apply left a journal in the target", hint="run `patchkit apply` to finish it first"
        )
    recovered = journal.recover(repo) if not dry_run else None
    state = inspect(repo, pset.manifest)
    result = _Outcome(pset, target, state, recovered)
    if state.base_commit is None:
        raise _not_base(repo, pset, state)
    if state.applied or state.foreign:
        return _already_or_drift(repo, pset, state, result)
    if state.dirty:
        raise BadInput(
            f"the target has uncommitted changes: {', '.join(e.path for e in state.dirty[:10])}",
            hint="commit, stash or remove them; apply needs a clean pinned base",
        )
    with quarantine(repo) as held:
        try:
            commits = build_commits(held.repo, pset, state.head, dry_run, progress)
        except ConflictError as error:
            return result.make(False, "conflict", state.head, conflict=error.conflict)
        if dry_run:
            return result.make(True, "dry-run", state.head, commits)
        held.publish()
    new_head = commits[-1].commit if commits else state.head
    assert new_head is not None
    if new_head != state.head:  # an empty series has nothing to move
        move_branch(repo, state, new_head, pset.manifest.label)
    return result.make(True, "applied", new_head, commits)


@dataclass(frozen=True)
class _Outcome:
    pset: PatchSet
    target: Path
    state: TargetState
    recovered: str | None

    def make(self, ok: bool, kind: str, head_after: str, patches=(), **extra) -> ApplyResult:
        return ApplyResult(
            "apply",
            ok,
            str(self.target),
            self.pset.manifest.label,
            kind,
            self.state.head,
            head_after,
            tuple(patches),
            recovered=self.recovered,
            **extra,
        )


def _not_base(repo: Repo, pset: PatchSet, state: TargetState) -> BadInput:
    lock = pset.manifest.lock
    assert lock is not None
    head_tree = repo.tree_of("HEAD") if state.head else "(no commits)"
    differs = ""
    if state.head and repo.ok("cat-file", "-e", lock.base_tree):
        names = repo.run("diff", "--name-only", lock.base_tree, "HEAD").splitlines()
        differs = f"; differing files: {', '.join(names[:10])}" + (" ..." if len(names) > 10 else "")
    return BadInput(
        f"target HEAD (tree {head_tree[:12]}) is not the pinned base {pset.manifest.base_label()} "
        f"(tree {lock.base_tree[:12]}){differs}",
        hint="run `patchkit base fetch` for a fresh base tree, or pass --target",
    )


def _already_or_drift(repo: Repo, pset: PatchSet, state: TargetState, result: _Outcome) -> ApplyResult:
    others = {c.set for c in state.applied} - {pset.manifest.label}
    if others:
        raise BadInput(
            f"the target carries patches of {', '.join(sorted(others))}, not {pset.manifest.label}",
            hint=f"reset it to the base ({state.base_commit}) before applying another set",
        )
    drift = drift_entries(repo, pset, state)
    if not drift:
        done = [PatchCommit(c.patch, repo.run("log", "-1", "--format=%s", c.commit), c.commit) for c in state.applied]
        return result.make(True, "already-applied", state.head, done)
    return result.make(False, "drift", state.head, drift=tuple(drift))


def build_commits(
    repo: Repo, pset: PatchSet, parent: str, dry_run: bool, progress: Progress | None
) -> list[PatchCommit]:
    """Stage the series on ``parent`` and (unless ``dry_run``) record one commit per patch."""
    commits: list[PatchCommit] = []
    head = [parent]

    def record(staged: staging.StagedPatch) -> None:
        header = staged.patch.header
        commit = None
        if not dry_run:
            message = message_with_trailers(header, pset.manifest.label, staged.patch.name)
            env = identity_env(header.author_name, header.author_email, header.date)
            commit = repo.run(
                "commit-tree", "--no-gpg-sign", staged.tree, "-p", head[0], "-F", "-", env=env, input=message
            )
            head[0] = commit
        commits.append(PatchCommit(staged.patch.name, header.subject, commit))
        pause(f"staged-{len(commits)}")

    staged = staging.stage_series(repo, parent, pset, progress, after_each=record)
    check_post_image(repo, pset, staged)
    return commits


def check_post_image(repo: Repo, pset: PatchSet, staged: list[staging.StagedPatch]) -> None:
    """The staged result must hash exactly as the lock says; else the lock is stale."""
    lock = pset.manifest.lock
    assert lock is not None
    touched = set().union(*(s.touched for s in staged)) if staged else set()
    final = staged[-1].tree if staged else None
    actual = staging.post_image(repo, final, touched) if final else {}
    if actual != lock.post_image:
        wrong = sorted(p for p in set(actual) | set(lock.post_image) if actual.get(p) != lock.post_image.get(p))
        raise BadInput(
            f"the series' result differs from the locked post-image in: {', '.join(wrong[:10])}",
            hint=f"if the patches are right, run `patchkit lock --set {pset.set_dir}` and commit",
        )


def move_branch(repo: Repo, state: TargetState, new_head: str, set_label: str) -> None:
    """Journal, compare-and-swap the ref, update the work tree, drop the journal; signals held."""
    with signals_held():
        journal.write(repo, state.ref, state.head, new_head, set_label)
        pause("journal")
        no_deref = ["--no-deref"] if state.ref == "HEAD" else []
        repo.run("update-ref", *no_deref, "-m", f"patchkit apply {set_label}", state.ref, new_head, state.head)
        pause("ref-moved")
        repo.run("read-tree", "-m", "-u", state.head, new_head)
        journal.remove(repo)


_held_signals: list[int] = []


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while the ref and work tree move; raise Interrupted afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = _held_signals
    received.clear()
    previous = {
        s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        raise Interrupted(
            "interrupted while the branch moved; the apply was completed first (the tree is fully patched)"
        )


def pause(step: str) -> None:
    """Test hook: print a marker and sleep at ``step`` when PATCHKIT_TEST_PAUSE names it."""
    if step in os.environ.get(PAUSE_ENV, "").split(","):
        sys.stderr.write(f"patchkit-test-pause: {step}\n")
        sys.stderr.flush()
        deadline = time.monotonic() + float(os.environ.get(PAUSE_SECONDS_ENV, "30"))
        while time.monotonic() < deadline and not _held_signals:  # a held signal ends the pause
            time.sleep(0.05)
