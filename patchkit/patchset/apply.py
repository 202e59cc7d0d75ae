"""``patchkit apply``: the whole series or nothing.

1. the set must match its lock; the target must be the pinned base (or base + our patch commits),
   with a clean work tree;
2. every patch is staged in a scratch index (:mod:`patchkit.patchset.staging`) and recorded as one
   commit (author, date, message from the patch header; trailers naming set and patch; committer and
   commit date fixed, so the commit ids are reproducible); the final tree is checked against the
   locked post-image. New objects stay in quarantine;
3. only then the target moves, in one step (:meth:`patchkit.patchset.transaction.Transaction.move`):
   preflight checks, journal, compare-and-swap ``update-ref``, the changed files, the index.

An exception, Ctrl-C or SIGTERM before step 3 leaves the target untouched (not even an object is
added). Signals during step 3 are held until it completes; a failure inside it is rolled back; a
kill -9 inside it is finished or rolled back by the next ``apply``, ``status`` or ``refresh``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from patchkit import paths
from patchkit.errors import EXIT_FAILED, EXIT_OK, BadInput
from patchkit.git import Repo, identity_env, open_repo
from patchkit.hooks import pause
from patchkit.patchset import staging, transaction
from patchkit.patchset.series import PatchSet, load_set, message_with_trailers
from patchkit.patchset.staging import Conflict, ConflictError, Progress, StagedPatch
from patchkit.patchset.state import DriftEntry, TargetState, exactness, inspect
from patchkit.results import CommandResult

ApplyState = Literal["applied", "already-applied", "dry-run", "conflict", "drift"]


@dataclass(frozen=True, kw_only=True)
class PatchCommit:
    patch: str
    subject: str
    commit: str | None  # None in a dry run


@dataclass(frozen=True, kw_only=True)
class ApplyResult(CommandResult):
    target: str
    set: str
    state: ApplyState
    head_before: str
    head_after: str
    patches: tuple[PatchCommit, ...]
    conflict: Conflict | None = None
    drift: tuple[DriftEntry, ...] = ()
    recovered: str | None = None  # what recovery did with an interrupted earlier move, if anything
    fix: str = ""  # with drift: what makes the tree exact (the commands)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILED


def apply(set_dir: Path, target: Path, *, dry_run: bool = False, progress: Progress | None = None) -> ApplyResult:
    """Apply the set at ``set_dir`` to the git tree ``target`` (see the module docstring)."""
    pset = load_set(set_dir)
    if not Path(target).is_dir():
        raise _no_target(pset, Path(target))
    repo = open_repo(target)
    if dry_run and transaction.pending(repo):
        raise BadInput(
            "an interrupted apply left a journal in the target", hint="run `patchkit apply` to finish it first"
        )
    with transaction.begin(repo, command="apply", read_only=dry_run, progress=progress) as txn:
        state = inspect(repo, pset.manifest)
        outcome = _Outcome(pset=pset, target=target, state=state, recovered=txn.recovered)
        refusal = _refusal(repo, pset, state)
        if refusal:
            raise refusal
        if state.applied or state.foreign:
            return _already_or_drift(repo, pset, state, outcome)
        try:
            commits = build_commits(txn.staging, pset, state.head, dry_run, progress)
        except ConflictError as error:
            return outcome.make(ok=False, kind="conflict", head_after=state.head, conflict=error.conflict)
        if dry_run:
            return outcome.make(ok=True, kind="dry-run", head_after=state.head, patches=commits)
        new_head = commits[-1].commit if commits else state.head
        assert new_head is not None
        if new_head != state.head:  # an empty series has nothing to move
            if progress:
                progress(f"updating {target}")
            txn.move(ref=state.ref, old=state.head, new=new_head, label=pset.manifest.label)
    return outcome.make(ok=True, kind="applied", head_after=new_head, patches=commits)


@dataclass(frozen=True, kw_only=True)
class _Outcome:
    pset: PatchSet
    target: Path
    state: TargetState
    recovered: str | None

    def make(
        self,
        *,
        ok: bool,
        kind: ApplyState,
        head_after: str,
        patches: Iterable[PatchCommit] = (),
        conflict: Conflict | None = None,
        drift: tuple[DriftEntry, ...] = (),
        fix: str = "",
    ) -> ApplyResult:
        return ApplyResult(
            command="apply",
            ok=ok,
            target=str(self.target),
            set=self.pset.manifest.label,
            state=kind,
            head_before=self.state.head,
            head_after=head_after,
            patches=tuple(patches),
            conflict=conflict,
            drift=drift,
            recovered=self.recovered,
            fix=fix,
        )


def _no_target(pset: PatchSet, target: Path) -> BadInput:
    """A target that is not there: the ``base fetch`` that makes it, for this set (and this folder)."""
    fetch = ["patchkit", "base", "fetch", "--set", paths.set_argument(pset.set_dir)]
    if target.absolute() != paths.default_target(pset.manifest).absolute():
        fetch += ["--dest", str(target)]
    return BadInput(f"target {target} does not exist",
                    hint=f"run `{shlex.join(fetch)}` first, or pass --target with a tree it made")


def _refusal(repo: Repo, pset: PatchSet, state: TargetState) -> BadInput | None:
    """Why the target cannot take the set at all (wrong base, dirty base), or None."""
    if state.base_commit is None:
        return _not_base(repo, pset, state)
    if not (state.applied or state.foreign) and state.dirty:
        shown = ", ".join(e.path for e in state.dirty[:10]) + (" ..." if len(state.dirty) > 10 else "")
        return BadInput(
            f"the target has uncommitted changes: {shown}",
            hint="commit, stash or remove them; apply needs a clean pinned base",
        )
    return None


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


def _already_or_drift(repo: Repo, pset: PatchSet, state: TargetState, outcome: _Outcome) -> ApplyResult:
    others = {c.set for c in state.applied} - {pset.manifest.label}
    if others:
        raise BadInput(
            f"the target carries patches of {', '.join(sorted(others))}, not {pset.manifest.label}",
            hint=f"reset it to the base ({state.base_commit}) before applying another set",
        )
    found = exactness(repo, pset)  # the one definition of "exactly the set", as status and verify read it
    if found.exact:
        done = [
            PatchCommit(patch=c.patch, subject=repo.run("log", "-1", "--format=%s", c.commit), commit=c.commit)
            for c in state.applied
        ]
        return outcome.make(ok=True, kind="already-applied", head_after=state.head, patches=done)
    return outcome.make(ok=False, kind="drift", head_after=state.head, drift=found.drift, fix=found.fix())


def build_commits(
    repo: Repo, pset: PatchSet, parent: str, dry_run: bool, progress: Progress | None
) -> list[PatchCommit]:
    """Stage the series on ``parent`` and (unless ``dry_run``) record one commit per patch."""
    commits: list[PatchCommit] = []
    staged: list[StagedPatch] = []
    head = parent
    for done in staging.stage_series(repo, parent, pset, progress):
        staged.append(done)
        header = done.patch.header
        commit = None
        if not dry_run:
            message = message_with_trailers(header, pset.manifest.label, done.patch.name)
            env = identity_env(header.author_name, header.author_email, header.date)
            commit = repo.run("commit-tree", "--no-gpg-sign", done.tree, "-p", head, "-F", "-", env=env, input=message)
            head = commit
        commits.append(PatchCommit(patch=done.patch.name, subject=header.subject, commit=commit))
        pause(f"staged-{len(commits)}")
    check_post_image(repo, pset, staged)
    return commits


def check_post_image(repo: Repo, pset: PatchSet, staged: list[StagedPatch]) -> None:
    """The staged result must hash exactly as the lock says; else the lock is stale."""
    lock = pset.manifest.lock
    assert lock is not None
    touched: set[str] = set().union(*(s.touched for s in staged)) if staged else set()
    actual = staging.post_image(repo, staged[-1].tree, touched) if staged else {}
    if actual != lock.post_image:
        wrong = sorted(p for p in set(actual) | set(lock.post_image) if actual.get(p) != lock.post_image.get(p))
        raise BadInput(
            f"the series' result differs from the locked post-image in: {', '.join(wrong[:10])}",
            hint=f"if the patches are right, run `patchkit lock --set {pset.set_dir}` and commit",
        )
