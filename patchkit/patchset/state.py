"""The state of a target tree against a patch set: THE one definition of "the base" and of drift.

Every command that asks "where does the set start in this tree?" or "is this tree exactly the set
applied?" calls this module: apply, status, refresh and lock here, verify (touched files, the
exactness statement) and smoke (is the tree patched by the set) in their packages.

The base
    :func:`base_commit` walks HEAD's first parents, newest first, and returns the first commit that
    is the pinned base: its tree is the locked base tree (``[lock] base_tree``), or it is the
    ``[base.git] commit``, or (pypi bases) it is a root commit carrying the message
    ``patchkit base fetch`` writes for the pinned wheel. So a base fetched from the wheel, a clone of
    upstream at the pin, and a tree built elsewhere with the same files all count, and upstream
    history below the pin is never mistaken for the set's own changes.

Touched files
    :func:`touched`: files that differ between that base and the work tree (committed or not),
    untracked files included, deletions excluded.

Drift and exactness
    :func:`inspect` reads HEAD, the base, our patch commits (by trailer) and uncommitted changes;
    index entries ``git status`` does not compare (assume-unchanged, skip-worktree) are drift too;
    :func:`exactness` says whether the tree is exactly the set applied, and if not, why, with the fix.

Bytecode (``__pycache__/``, ``*.pyc``) is derived from the sources by any import of the tree and never
counts as a change: running the set's tests against a tree does not make it drift.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from patchkit import paths
from patchkit.errors import BadInput
from patchkit.git import Repo, StatusEntry
from patchkit.manifest import ABSENT, Manifest, PypiBase
from patchkit.patchset.series import PatchSet, sha256_bytes, split_trailers, trailer_set

#: How far back from HEAD the base is searched (first parents).
MAX_DEPTH = 5000

#: What :func:`exactness` finds a target to be.
#: ``base``: the pinned base, nothing applied, clean. ``applied``: exactly the set, clean.
#: ``partial``: a clean prefix of the series. ``drift``: anything else on top of the base.
#: ``not-base``: the pinned base is not among HEAD's first parents.
TreeState = Literal["base", "applied", "partial", "drift", "not-base"]


@dataclass(frozen=True, kw_only=True)
class AppliedCommit:
    commit: str
    patch: str  # file name from the Patchkit-Patch trailer
    set: str  # name@version from the Patchkit-Set trailer
    matches: bool | None = None  # the commit's change equals the set's patch (patch-id), when checked


@dataclass(frozen=True, kw_only=True)
class DriftEntry:
    path: str
    reason: str  # "modified", "missing", "should be absent", "uncommitted: XY", "not applied",
    # "your commit on top of the set",
    # "assume-unchanged in the index: ..." (or skip-worktree, unmerged)


@dataclass(frozen=True, kw_only=True)
class TargetState:
    head: str  # "" when the repository has no commit yet
    ref: str  # what HEAD points at (refs/heads/x), or "HEAD" when detached
    base_commit: str | None
    applied: tuple[AppliedCommit, ...]  # our patch commits right after the base, in order
    foreign: tuple[str, ...]  # later commits without our trailers (user edits)
    dirty: tuple[StatusEntry, ...]  # uncommitted changes, untracked files included, bytecode excluded


def is_bytecode(path: str) -> bool:
    """A file any import of the tree derives from its sources (never a change of the tree's own)."""
    return "__pycache__/" in f"/{path}" or path.endswith((".pyc", ".pyo"))


# ---------------------------------------------------------------------- the base
def base_commit(repo: Repo, manifest: Manifest, *, base_tree: str | None = None) -> str | None:
    """The newest first-parent ancestor of HEAD (HEAD included) that is the pinned base, or None.

    ``base_tree`` replaces the locked base tree, for a set that has no lock yet or whose pin changed
    (``refresh`` learns it from the fetched base).
    """
    tree = base_tree or (manifest.lock.base_tree if manifest.lock else None)
    pinned = manifest.git.commit if manifest.git else None
    head = repo.rev("HEAD")
    if head is None:
        return None
    # A commit id pins its history (grafts and shallow clones aside: hence the repository in the key),
    # so the answer for the same HEAD and pins never changes: verify asks three times per run.
    memo_key = (str(repo.path.resolve()), head, tree, pinned, base_message(manifest.pypi) if manifest.pypi else None)
    if memo_key in _BASES:
        return _BASES[memo_key]
    found = None
    log = repo.run("log", "--first-parent", "--format=%H %T %P", "-n", str(MAX_DEPTH), head)
    for line in log.splitlines():
        commit, commit_tree, *parents = line.split()
        if commit_tree == tree or commit == pinned or (not parents and _is_fetched_base(repo, manifest, commit)):
            found = commit
            break
    _BASES[memo_key] = found
    return found


#: :func:`base_commit`'s answers in this process, by (repository, HEAD, base tree, pinned commit, fetch message).
_BASES: dict[tuple[str, str, str | None, str | None, str | None], str | None] = {}


def _is_fetched_base(repo: Repo, manifest: Manifest, root: str) -> bool:
    """A root commit made by ``patchkit base fetch`` from the pinned wheel (its message names the sha256)."""
    return manifest.pypi is not None and repo.commit_message(root) == base_message(manifest.pypi)


def base_message(pypi: PypiBase) -> str:
    """The message of the one commit ``patchkit base fetch`` makes for a pypi base."""
    return f"base: {pypi.package} {pypi.version}, wheel sha256 {pypi.sha256}\n"


def require_base(repo: Repo, manifest: Manifest, *, base_tree: str | None = None) -> str:
    """:func:`base_commit`, or BadInput naming the tree and the base it lacks."""
    found = base_commit(repo, manifest, base_tree=base_tree)
    if found is None:
        raise BadInput(
            f"{repo.path} does not contain the base {manifest.base_label()} among HEAD's first parents",
            hint="pass --target with a tree made by `patchkit base fetch` (and `patchkit apply`)",
        )
    return found


def touched(repo: Repo, manifest: Manifest) -> tuple[str, ...]:
    """Files that differ between the base and the work tree, sorted: commits after the base and
    uncommitted edits alike, untracked files included, deletions and bytecode excluded.

    Raises BadInput when the tree does not contain the base.
    """
    base = require_base(repo, manifest)
    changed = repo.names_z("diff", "--name-only", "--no-renames", "--diff-filter=d", "-z", base, "--")
    return tuple(sorted(p for p in {*changed, *repo.untracked()} if not is_bytecode(p)))


def patched_by(repo: Repo, manifest: Manifest) -> bool:
    """Whether a commit of the set (trailer ``Patchkit-Set: <name>@<version>``) sits on top of the base."""
    return any(commit.set == manifest.label for commit in inspect(repo, manifest).applied)


# ---------------------------------------------------------------------- reading a target
def inspect(repo: Repo, manifest: Manifest) -> TargetState:
    """Read HEAD, the base, our patch commits after it and uncommitted changes."""
    head = repo.rev("HEAD")
    if head is None:
        return TargetState(head="", ref=repo.head_ref(), base_commit=None, applied=(), foreign=(), dirty=())
    base = base_commit(repo, manifest)
    applied: list[AppliedCommit] = []
    foreign: list[str] = []
    commits = repo.first_parent_log(base) if base else []
    messages = repo.commit_messages(commits)  # one git call, not one per commit
    for commit in commits:
        message = messages[commit]
        _, name = split_trailers(message)
        label = trailer_set(message)
        if name and label and not foreign:
            applied.append(AppliedCommit(commit=commit, patch=name, set=label))
        else:
            foreign.append(commit)
    dirty = tuple(e for e in repo.status_entries() if not is_bytecode(e.path))
    return TargetState(
        head=head, ref=repo.head_ref(), base_commit=base, applied=tuple(applied), foreign=tuple(foreign), dirty=dirty
    )


def worktree_drift(repo: Repo, post_image: dict[str, str]) -> list[DriftEntry]:
    """Files whose bytes in the work tree differ from the locked post-image."""
    drift = []
    for rel, expected in sorted(post_image.items()):
        path = repo.path / rel
        if expected == ABSENT:
            if os.path.lexists(path):
                drift.append(DriftEntry(path=rel, reason="should be absent"))
            continue
        if not os.path.lexists(path):
            drift.append(DriftEntry(path=rel, reason="missing"))
            continue
        data = os.readlink(path).encode("utf-8", "surrogateescape") if path.is_symlink() else path.read_bytes()
        if sha256_bytes(data) != expected:
            drift.append(DriftEntry(path=rel, reason="modified"))
    return drift


def drift_entries(repo: Repo, pset: PatchSet, state: TargetState) -> list[DriftEntry]:
    """Everything that keeps ``state`` from being exactly the fully patched tree."""
    entries = [DriftEntry(path=e.path, reason=f"uncommitted: {e.code.strip()}") for e in state.dirty]
    # git status does not look at these files' bytes: an edit of one would pass unseen
    entries += [DriftEntry(path=path, reason=f"{flag} in the index: git does not compare it")
                for flag, path in repo.unwatched()]
    names = [p.name for p in pset.patches]
    entries += [DriftEntry(path=name, reason="not applied") for name in names[len(state.applied) :]]
    entries += [
        DriftEntry(path=f"{commit[:12]} {repo.run('log', '-1', '--format=%s', commit)[:60]}",
                   reason="your commit on top of the set")
        for commit in state.foreign
    ]
    assert pset.manifest.lock is not None
    seen = {e.path for e in entries}
    entries += [e for e in worktree_drift(repo, pset.manifest.lock.post_image) if e.path not in seen]
    return entries


def _patch_ids(repo: Repo, stream: bytes) -> dict[str, str]:
    """``git patch-id --stable`` of a stream of patches, each after a line naming it: name -> id.
    A patch without changes has no id (it matches nothing)."""
    out = repo.run("patch-id", "--stable", input=stream)
    return {name: pid for pid, name in (line.split() for line in out.splitlines() if line)}


def patches_match(repo: Repo, changes: Sequence[tuple[str, str, bytes]]) -> list[bool]:
    """For each ``(commit, parent, patch diff)``: whether the commit's change against ``parent`` equals
    the patch's (``git patch-id --stable`` of both; the commit is diffed without and with rename
    detection, since the patch may use either form).

    A fixed number of git calls, not four per commit: one ``patch-id`` over every patch, and per rename
    mode one ``diff-tree --stdin`` (each line ``commit parent``, as ``diff-tree parent commit``) piped
    into one ``patch-id``; the ``-M`` pass only for those the first did not match. A commit listed
    twice is diffed against the same parent (its id names its patch-id).
    """
    # each patch after a line naming it by its index (a 40-hex name, as patch-id expects)
    named = b"".join(b"commit %040x\n%s%s" % (n, diff, b"" if diff.endswith(b"\n") else b"\n")
                     for n, (_, _, diff) in enumerate(changes))
    theirs = _patch_ids(repo, named) if changes else {}
    wanted = [theirs.get(f"{n:040x}") for n in range(len(changes))]
    matched = [False] * len(changes)
    for renames in ("--no-renames", "-M"):
        left = [n for n in range(len(changes)) if not matched[n] and wanted[n]]
        if not left:
            break
        pairs = "".join(f"{changes[n][0]} {changes[n][1]}\n" for n in left).encode()
        shown = repo.run_bytes("diff-tree", "--stdin", "-p", "--full-index", renames, input=pairs)[1]
        ours = _patch_ids(repo, shown)  # by commit id: a commit listed twice has one id
        for n in left:
            matched[n] = ours.get(changes[n][0]) == wanted[n]
    return matched


# ---------------------------------------------------------------------- exactness
@dataclass(frozen=True, kw_only=True)
class Exactness:
    """Whether a target is exactly the set applied to its base (what ``status`` reports, and what
    ``verify`` states before it runs a gate)."""

    target: str
    set: str  # name@version
    state: TreeState
    base_commit: str | None
    applied: tuple[AppliedCommit, ...]  # with ``matches`` checked against the set's patches
    missing: tuple[str, ...]  # patches of the series not applied (after the applied prefix)
    drift: tuple[DriftEntry, ...]
    set_arg: str = ""  # how --set names the set in a hint (its name, or its folder)

    @property
    def exact(self) -> bool:
        return self.state == "applied"

    def statement(self) -> str:
        """One line for people: what the tree is, relative to the set."""
        if self.exact:
            return f"{self.target} is exactly {self.set} applied to its base"
        if self.state == "not-base":
            return f"{self.target} is not patched by {self.set}: the pinned base is not in its history"
        if self.state == "base":
            return f"{self.target} is not patched by {self.set}: it is the unpatched base"
        shown = ", ".join(f"{e.path} ({e.reason})" for e in self.drift[:5]) + (" ..." if len(self.drift) > 5 else "")
        what = "partly patched" if self.state == "partial" else "not exactly"
        return f"{self.target} is {what} {self.set} applied: {shown}"

    def fix(self) -> str:
        """What to do to make the tree exact (empty when it is): commands with this set and target, each of
        which ends in an exact tree (none leads back to the state it is given for)."""
        where = f"--set {shlex.quote(self.set_arg or self.set)} --target {shlex.quote(self.target)}"
        apply, refresh = f"`patchkit apply {where}`", f"`patchkit refresh {where}`"
        reset = f"`git -C {shlex.quote(self.target)} reset --hard {(self.base_commit or '')[:12]}`"
        if self.state == "applied":
            return ""
        if self.state == "base":
            return f"run {apply}"
        if self.state == "not-base":
            return (f"run `patchkit base fetch --set {shlex.quote(self.set_arg or self.set)}`, then {apply} on the "
                    "tree it makes, or pass --target with a tree holding the base")
        if self.state == "partial":
            return f"reset the tree to its base ({reset}), then run {apply}"
        unwatched = [e.path for e in self.drift if e.reason.endswith("git does not compare it")]
        if unwatched:  # refresh reads commits: a flag that hides an edit must go first
            return (f"make git compare the flagged files (`git -C {shlex.quote(self.target)} update-index "
                    f"--no-assume-unchanged --no-skip-worktree -- {shlex.join(unwatched[:5])}`; resolve an unmerged "
                    f"one), then run `patchkit status {where}` again")
        if any(e.reason.startswith("uncommitted") for e in self.drift):
            keep = (f"commit your changes (a new commit, or `git commit --fixup=<commit>` and `git rebase -i "
                    f"--autosquash` into the patch they belong to), then run {refresh}")
        else:
            keep = f"run {refresh} to write your commits into the set"
        return f"{keep}; or, to drop your changes, {reset} and run {apply}"


def exactness(repo: Repo, pset: PatchSet) -> Exactness:
    """Compare ``repo`` with the set: base found, which patches are applied (and equal their files), drift."""
    state = inspect(repo, pset.manifest)
    diffs = {p.name: p.diff for p in pset.patches}
    # our commits are a first-parent chain starting on the base: each one's parent is the one before
    parents = [state.base_commit or "", *(c.commit for c in state.applied)]
    known = [(c.commit, parents[n], diffs[c.patch]) for n, c in enumerate(state.applied) if c.patch in diffs]
    matching = dict(zip((commit for commit, _, _ in known), patches_match(repo, known), strict=True))
    applied = tuple(
        AppliedCommit(commit=c.commit, patch=c.patch, set=c.set, matches=matching.get(c.commit, False))
        for c in state.applied
    )
    names = [p.name for p in pset.patches]
    base_ok = state.base_commit is not None
    pristine = not (state.applied or state.foreign or state.dirty)  # the base, unpatched: nothing has drifted
    drift: tuple[DriftEntry, ...] = ()
    if base_ok and not (pristine and names):
        drift = tuple(drift_entries(repo, pset, state) + _unequal_commits(names, applied))
    return Exactness(
        target=str(repo.path),
        set=pset.manifest.label,
        state=_state_name(base_ok, state, names, drift, applied),
        base_commit=state.base_commit,
        applied=applied,
        missing=tuple(names[len(applied) :]),
        drift=drift,
        set_arg=paths.set_argument(pset.set_dir),
    )


def _unequal_commits(names: list[str], applied: Sequence[AppliedCommit]) -> list[DriftEntry]:
    """Patch commits that are not the series' patch at their place, or whose change is not their patch's:
    drift as much as a file's bytes (a trailer-carrying commit can add a file the post-image never names)."""
    entries = []
    for place, commit in enumerate(applied):
        where = f"{commit.commit[:12]} {commit.patch}"
        if place >= len(names) or names[place] != commit.patch:
            entries.append(DriftEntry(path=where, reason="not the series' patch here"))
        elif not commit.matches:
            entries.append(DriftEntry(path=where, reason="commit differs from its patch"))
    return entries


def _state_name(
    base_ok: bool,
    state: TargetState,
    names: list[str],
    drift: tuple[DriftEntry, ...],
    applied: tuple[AppliedCommit, ...],
) -> TreeState:
    if not base_ok:
        return "not-base"
    complete = [c.patch for c in applied] == names and all(c.matches for c in applied)
    if complete and not drift:
        return "applied"  # an empty series on a clean base is exactly applied, too
    if not state.applied and not state.foreign and not state.dirty:
        return "base"
    prefix = names[: len(applied)] == [c.patch for c in applied] and 0 < len(applied) < len(names)
    return "partial" if prefix and not state.foreign and not state.dirty else "drift"
