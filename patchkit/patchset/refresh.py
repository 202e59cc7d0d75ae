"""``patchkit refresh``: write the commits since the base back into the set.

Each commit after the base becomes one patch (``git format-patch`` with fixed options, our trailer
block removed); a commit whose ``Patchkit-Patch`` trailer names a patch keeps that file name, new
commits get ``NNNN-subject.patch``. Series and lock are rewritten. Changes are summarised per patch;
a patch whose *context* changed while its own +/- lines did not (the signature of fuzz or an upstream
move) is reported loudly and nothing is written unless ``--accept-context``.

Refresh never removes a patch implicitly: a target without commits after the base (a fresh base, a
failed apply) or one that lacks some of the set's patches is refused (exit 2) unless
``--allow-remove`` says so. Everything is computed and checked first (the new lock, and that the new
set reproduces HEAD's tree exactly); then patches, series and manifest are written as one
transaction (:func:`patchkit.patchset.transaction.write_files`), and the result names every file
written, or says that nothing changed.

The target's commits are then recorded as ``apply`` makes them from the refreshed set (the trailers
naming each patch, the patch's author and date, the same trees): without that, a commit you added
would carry no ``Patchkit-Patch`` trailer, ``status`` would call it "your commit on top of the set"
beside a "missing" patch, and the next refresh could not keep its file name. The branch moves to
those commits in one step (:meth:`patchkit.patchset.transaction.Transaction.move`) before the set
is written; the work tree and index do not change, since every tree is the same.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from unidiff.patch import PatchSet as UnidiffPatchSet

from patchkit import manifest as manifest_mod
from patchkit import paths
from patchkit.errors import EXIT_FAILED, EXIT_OK, BadInput, Internal
from patchkit.git import Repo, identity_env, open_repo
from patchkit.patchset import base as base_mod
from patchkit.patchset import state, transaction
from patchkit.patchset.apply import PatchCommit, build_commits
from patchkit.patchset.lock import compute_lock, manifest_with_lock
from patchkit.patchset.series import (
    SERIES_NAME,
    Patch,
    PatchSet,
    parse_patch,
    parse_patch_bytes,
    read_series,
    split_trailers,
)
from patchkit.patchset.staging import Progress
from patchkit.results import CommandResult

#: format-patch options: stable output (no commit ids, no version signature, full blob ids).
FORMAT_OPTIONS = (
    "--stdout",
    "--full-index",
    "--no-signature",
    "--zero-commit",
    "--no-numbered",
    "--subject-prefix=PATCH",
    "--find-renames",
    "--stat=72",
    "--no-attach",
    "--no-thread",
    "--encode-email-headers",
)


ChangeStatus = Literal[
    "unchanged", "content changed", "context or offset changed", "message changed", "new", "removed"
]
RefreshState = Literal["written", "unchanged", "blocked"]


@dataclass(frozen=True, kw_only=True)
class PatchChange:
    patch: str
    status: ChangeStatus
    context_changed: bool = False  # hunks with the same +/- lines now have different context
    added: int = 0  # +/- lines present in the new patch but not the old
    removed: int = 0  # ... and the other way round
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class RefreshResult(CommandResult):
    set: str
    target: str
    written: bool  # True when files of the set were written (or deleted)
    changes: tuple[PatchChange, ...]
    state: RefreshState = "unchanged"
    files_written: tuple[str, ...] = ()  # set files whose bytes changed (patches, series, manifest.toml)
    files_removed: tuple[str, ...] = ()  # patch files deleted (with --allow-remove)
    head_before: str = ""  # the target's HEAD before the refresh
    head_after: str = ""  # ... and after: the commits apply makes from the refreshed set (same trees)
    recovered: str | None = None  # what recovery did with an interrupted earlier write or apply

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILED


def refresh(
    set_dir: Path,
    target: Path,
    *,
    accept_context: bool = False,
    allow_remove: bool = False,
    progress: Progress | None = None,
) -> RefreshResult:
    """Regenerate the set at ``set_dir`` from the commits on top of the base in ``target``."""
    set_dir = Path(set_dir)
    with transaction.set_lock(set_dir, "refresh", progress):
        recovered = transaction.recover_files(set_dir, "refresh")
        transaction.remove_stray_temps(set_dir)
        repo = open_repo(target)
        with transaction.begin(repo, command="refresh", progress=progress) as txn:
            result = _refresh(set_dir, repo, txn, accept_context=accept_context, allow_remove=allow_remove,
                              progress=progress)
    notes = [n for n in (recovered, txn.recovered) if n]
    return dataclasses.replace(result, recovered="; ".join(notes) or None)


def _refresh(
    set_dir: Path,
    repo: Repo,
    txn: transaction.Transaction,
    *,
    accept_context: bool,
    allow_remove: bool,
    progress: Progress | None,
) -> RefreshResult:
    man = manifest_mod.load(set_dir)
    old = {p.name: p for p in (parse_patch(set_dir / e.name) for e in read_series(set_dir))}
    dirty = [e for e in repo.status_entries() if not state.is_bytecode(e.path)]
    if dirty:
        raise BadInput(
            f"the target has uncommitted changes: {', '.join(e.path for e in dirty[:10])}",
            hint="commit (or amend) them first; refresh reads commits",
        )
    base = _base_commit(repo, PatchSet(manifest=man, patches=tuple(old.values())), progress)
    if repo.run("rev-list", "--min-parents=2", f"{base}..HEAD"):
        raise BadInput("there are merge commits after the base", hint="rebase them into a linear series")
    commits = repo.first_parent_log(base)
    new = render_patches(txn.staging, commits, man.label)
    changes = [_compare(old.get(name), name, text) for name, text in new] + [
        PatchChange(patch=name, status="removed") for name in old if name not in dict(new)
    ]
    _refuse_removal(repo, set_dir, man.label, base, commits, changes, allow_remove)
    def result(**outcome: Any) -> RefreshResult:
        return RefreshResult(command="refresh", set=man.label, target=str(repo.path), changes=tuple(changes), **outcome)

    head = repo.run("rev-parse", "HEAD")
    if any(c.context_changed for c in changes) and not accept_context:
        return result(ok=False, written=False, state="blocked", head_before=head, head_after=head)
    contents, recorded = _new_contents(txn.staging, set_dir, base, old, new, progress)
    new_head = recorded[-1].commit if recorded else base
    assert new_head is not None
    if new_head != head:  # same trees, commits as apply records them: status then finds the set exactly
        txn.move(ref=repo.head_ref(), old=head, new=new_head, label=man.label)
    names = transaction.write_files(set_dir, contents, command="refresh")
    return result(
        ok=True,
        written=bool(names),
        state="written" if names else "unchanged",
        files_written=tuple(n for n in names if contents[n] is not None),
        files_removed=tuple(n for n in names if contents[n] is None),
        head_before=head,
        head_after=new_head,
    )


def _refuse_removal(
    repo: Repo, set_dir: Path, label: str, base: str, commits: list[str], changes: list[PatchChange],
    allow_remove: bool,
) -> None:
    """Removing patches is never implicit: exit 2 unless --allow-remove."""
    removed = [c.patch for c in changes if c.status == "removed"]
    if not removed or allow_remove:
        return
    shown = ", ".join(removed[:5]) + (" ..." if len(removed) > 5 else "")
    where = f"--set {shlex.quote(paths.set_argument(set_dir))} --target {shlex.quote(str(repo.path))}"
    if not commits:
        raise BadInput(
            f"{repo.path} has no commits after the base ({base[:12]}): refresh would remove all "
            f"{len(removed)} patches of {label} ({shown}); nothing was written",
            hint=f"refresh reads the commits of a patched tree: run `patchkit apply {where}` first "
            f"(or `patchkit status {where}` if an apply failed); to empty the set on purpose, pass --allow-remove",
        )
    raise BadInput(
        f"refresh would remove {len(removed)} patch(es) of {label} whose commits are not in {repo.path}: {shown}; "
        "nothing was written",
        hint="if you dropped those commits on purpose, re-run with --allow-remove; otherwise check the target "
        f"with `patchkit status {where}`",
    )


def _base_commit(repo: Repo, pset: PatchSet, progress: Progress | None) -> str:
    man = pset.manifest
    commit = state.base_commit(repo, man)
    if commit is None:  # no lock yet, or a new base pin (porting): learn the base tree from the pin itself
        fetched = base_mod.fetch(dataclasses.replace(man, lock=None), progress=progress)
        commit = state.require_base(repo, man, base_tree=fetched.tree)
    return commit


# ---------------------------------------------------------------------- writing patches
def render_patches(repo: Repo, commits: list[str], set_label: str) -> list[tuple[str, bytes]]:
    """(file name, format-patch bytes) per commit, oldest first, names stable across refreshes."""
    used: set[str] = set()
    result = []
    for number, commit in enumerate(commits, start=1):
        message, name = split_trailers(repo.commit_message(commit))
        if not name or name in used or not name.endswith(".patch"):
            name = _unique(f"{number:04d}-{slug(message.splitlines()[0] if message else 'patch')}.patch", used)
        used.add(name)
        result.append((name, format_commit(repo, commit, message)))
    return result


def format_commit(repo: Repo, commit: str, message: str) -> bytes:
    """``git format-patch`` of ``commit`` with ``message`` (trailers stripped) and its author."""
    name, email, date = repo.run("log", "-1", "--format=%an%x00%ae%x00%ad", "--date=raw", commit).split("\0")
    tree = repo.tree_of(commit)
    env = identity_env(name, email, date)
    clean = repo.run("commit-tree", "--no-gpg-sign", tree, "-p", f"{commit}^", "-F", "-", env=env, input=message)
    return repo.run_bytes("format-patch", *FORMAT_OPTIONS, "-1", clean)[1]


def slug(subject: str) -> str:
    """File-name form of a subject, like git format-patch's (at most 52 characters)."""
    text = re.sub(r"[^A-Za-z0-9._]+", "-", subject).strip("-.")
    return text[:52].rstrip("-.") or "patch"


def _unique(name: str, used: set[str]) -> str:
    stem, counter = name[: -len(".patch")], 2
    while name in used:
        name, counter = f"{stem}-{counter}.patch", counter + 1
    return name


def set_contents(repo: Repo, set_dir: Path, base: str, commits: list[str],
                 progress: Progress | None = None) -> dict[str, bytes | None]:
    """Every file of ``set_dir`` for ``commits`` on ``base`` (None: delete), computed and checked: what
    refresh writes. ``patchkit port`` writes its new set with it too, so both write patches one way."""
    man = manifest_mod.load(set_dir, with_lock=False)
    old = {p.name: p for p in (parse_patch(set_dir / e.name) for e in read_series(set_dir))}
    return _new_contents(repo, set_dir, base, old, render_patches(repo, commits, man.label), progress)[0]


def _new_contents(
    repo: Repo, set_dir: Path, base: str, old: Mapping[str, Patch], new: list[tuple[str, bytes]],
    progress: Progress | None,
) -> tuple[dict[str, bytes | None], list[PatchCommit]]:
    """Every file of the refreshed set (None: delete), computed and checked before anything is written,
    and the commits ``apply`` makes from it on ``base`` (in ``repo``'s object store)."""
    contents: dict[str, bytes | None] = dict(new)
    contents |= {name: None for name in old if name not in contents}
    series = set_dir / SERIES_NAME
    old_series = series.read_text(encoding="utf-8") if series.exists() else ""
    contents[SERIES_NAME] = _series_text(old_series, list(old), [name for name, _ in new]).encode("utf-8")
    patches = tuple(parse_patch_bytes(set_dir / name, data) for name, data in new)
    man = manifest_mod.load(set_dir, with_lock=False)
    lock = compute_lock(PatchSet(manifest=man, patches=patches), repo, base, progress)
    contents[manifest_mod.MANIFEST_NAME] = manifest_with_lock(set_dir, lock)
    locked = PatchSet(manifest=dataclasses.replace(man, lock=lock), patches=patches)
    return contents, _check_round_trip(repo, locked, base)


def _series_text(old_text: str, old_names: list[str], names: list[str]) -> str:
    if old_text and old_names == names:
        return old_text  # keep comments and layout when the order did not change
    header = []
    for line in old_text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            break
        header.append(line)
    return "\n".join(header + names) + "\n"


def _check_round_trip(repo: Repo, pset: PatchSet, base: str) -> list[PatchCommit]:
    """The commits ``apply`` makes from the new set on ``base``; they must reproduce HEAD's tree exactly
    (anything else is a patchkit bug)."""
    commits = build_commits(repo, pset, base, dry_run=False, progress=None)
    final = repo.tree_of(commits[-1].commit or "") if commits else repo.tree_of(base)
    if final != repo.tree_of("HEAD"):
        raise Internal(f"the refreshed set does not reproduce HEAD's tree ({final} != {repo.tree_of('HEAD')}); "
                       "nothing was written")
    return commits


# ---------------------------------------------------------------------- comparing old and new
_HunkDelta = tuple[str, tuple[str, ...]]
_HunkContext = tuple[str, tuple[str, ...], tuple[str, ...], int]


def _changes_and_context(diff_text: str) -> tuple[list[_HunkDelta], list[_HunkContext]]:
    """Per hunk: (file, +/- lines) and (file, +/- lines, context lines, source start)."""
    changes: list[_HunkDelta] = []
    contexts: list[_HunkContext] = []
    for pfile in UnidiffPatchSet(diff_text):
        for hunk in pfile:
            delta = tuple(str(line) for line in hunk if line.is_added or line.is_removed)
            context = tuple(line.value for line in hunk if line.is_context)
            changes.append((pfile.path, delta))
            contexts.append((pfile.path, delta, context, hunk.source_start))
    return changes, contexts


def _compare(old: Patch | None, name: str, data: bytes) -> PatchChange:
    if old is None:
        return PatchChange(patch=name, status="new")
    if old.data == data:
        return PatchChange(patch=name, status="unchanged")
    new_diff = data[data.find(b"\ndiff --git ") + 1 :].decode("utf-8", "surrogateescape")
    new_changes, new_ctx = _changes_and_context(new_diff)
    old_changes, old_ctx = _changes_and_context(old.diff_text)
    old_by_delta = {(f, d): (c, s) for f, d, c, s in old_ctx}
    context_moved = [f for f, d, c, s in new_ctx if (f, d) in old_by_delta and old_by_delta[(f, d)][0] != c]
    new_lines = Counter(line for _, delta in new_changes for line in delta)
    old_lines = Counter(line for _, delta in old_changes for line in delta)
    added, removed = sum((new_lines - old_lines).values()), sum((old_lines - new_lines).values())
    status: ChangeStatus
    if new_changes != old_changes:
        status = "content changed"
    else:
        status = "message changed" if new_diff == old.diff_text else "context or offset changed"
    detail = f"context changed in {', '.join(sorted(set(context_moved)))}" if context_moved else ""
    return PatchChange(
        patch=name, status=status, context_changed=bool(context_moved), added=added, removed=removed, detail=detail
    )
