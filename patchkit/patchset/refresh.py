"""``patchkit refresh``: write the commits since the base back into the set.

Each commit after the base becomes one patch (``git format-patch`` with fixed options, our trailer
block removed); a commit whose ``Patchkit-Patch`` trailer names a patch keeps that file name, new
commits get ``NNNN-subject.patch``. Series and lock are rewritten. Changes are summarised per patch;
a patch whose *context* changed while its own +/- lines did not (the signature of fuzz or an upstream
move) is reported loudly and nothing is written unless ``--accept-context``.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import unidiff

from patchkit.patchset import journal
from patchkit import manifest as manifest_mod
from patchkit.patchset import base as base_mod
from patchkit.errors import BadInput, EXIT_FAILED, EXIT_OK, Internal
from patchkit.git import Repo, identity_env, open_repo, quarantine
from patchkit.patchset.lock import compute_lock
from patchkit.patchset.series import SERIES_NAME, Patch, PatchSet, load_set, parse_patch, read_series, split_trailers
from patchkit.results import CommandResult
from patchkit.patchset.staging import Progress, stage_series
from patchkit.patchset import state

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


@dataclass(frozen=True)
class PatchChange:
    patch: str
    status: str  # "unchanged", "content changed", "context or offset changed", "message changed", "new", "removed"
    context_changed: bool = False  # hunks with the same +/- lines now have different context
    added: int = 0  # +/- lines present in the new patch but not the old
    removed: int = 0  # ... and the other way round
    detail: str = ""


@dataclass(frozen=True)
class RefreshResult(CommandResult):
    set: str
    target: str
    written: bool
    changes: tuple[PatchChange, ...]

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILED


def refresh(
    set_dir: Path, target: Path, *, accept_context: bool = False, progress: Progress | None = None
) -> RefreshResult:
    """Regenerate the set at ``set_dir`` from the commits on top of the base in ``target``."""
    set_dir = Path(set_dir)
    man = manifest_mod.load(set_dir)
    old = {p.name: p for p in (parse_patch(set_dir / e.name) for e in read_series(set_dir))}
    repo = open_repo(target)
    journal.recover(repo)
    if repo.porcelain_status():
        raise BadInput("the target has uncommitted changes", hint="commit (or amend) them first; refresh reads commits")
    base = _base_commit(repo, PatchSet(man, tuple(old.values())), progress)
    if repo.run("rev-list", "--min-parents=2", f"{base}..HEAD"):
        raise BadInput("there are merge commits after the base", hint="rebase them into a linear series")
    commits = repo.first_parent_log(base)
    with quarantine(repo) as held:  # the scratch commits and trees never reach the target's object store
        new = render_patches(held.repo, commits, man.label)
        changes = [_compare(old.get(name), name, text) for name, text in new] + [
            PatchChange(name, "removed") for name in old if name not in dict(new)
        ]
        blocked = any(c.context_changed for c in changes) and not accept_context
        if not blocked:
            _write(held.repo, set_dir, base, old, new, progress)
            _check_round_trip(held.repo, set_dir, base)
    return RefreshResult("refresh", not blocked, man.label, str(target), not blocked, tuple(changes))


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


def _write(
    repo: Repo, set_dir: Path, base: str, old: dict[str, Patch], new: list[tuple[str, bytes]], progress: Progress | None
) -> None:
    for name, data in new:
        path = set_dir / name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
    _write_series(set_dir, list(old), [name for name, _ in new])
    for name in old:
        if name not in dict(new):
            (set_dir / name).unlink()
    pset = load_set(set_dir, check_lock=False)
    manifest_mod.write_lock(set_dir, compute_lock(pset, repo, base, progress))


def _write_series(set_dir: Path, old_names: list[str], names: list[str]) -> None:
    path = set_dir / SERIES_NAME
    old_text = path.read_text(encoding="utf-8") if path.exists() else ""
    if old_text and old_names == names:
        return  # keep comments and layout when the order did not change
    header = []
    for line in old_text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            break
        header.append(line)
    path.write_text("\n".join(header + names) + "\n", encoding="utf-8")


def _check_round_trip(repo: Repo, set_dir: Path, base: str) -> None:
    """The written set must reproduce HEAD's tree exactly; anything else is a patchkit bug."""
    pset = load_set(set_dir)
    staged = stage_series(repo, base, pset)
    final = staged[-1].tree if staged else repo.tree_of(base)
    if final != repo.tree_of("HEAD"):
        raise Internal(f"refreshed set does not reproduce HEAD's tree ({final} != {repo.tree_of('HEAD')})")


# ---------------------------------------------------------------------- comparing old and new
def _changes_and_context(diff_text: str) -> tuple[list, list]:
    """Per hunk: (file, +/- lines) and (file, +/- lines, context lines, source start)."""
    changes, contexts = [], []
    for pfile in unidiff.PatchSet(diff_text):
        for hunk in pfile:
            delta = tuple(str(line) for line in hunk if line.is_added or line.is_removed)
            context = tuple(line.value for line in hunk if line.is_context)
            changes.append((pfile.path, delta))
            contexts.append((pfile.path, delta, context, hunk.source_start))
    return changes, contexts


def _compare(old: Patch | None, name: str, data: bytes) -> PatchChange:
    if old is None:
        return PatchChange(name, "new")
    if old.data == data:
        return PatchChange(name, "unchanged")
    new_diff = data[data.find(b"\ndiff --git ") + 1 :].decode("utf-8", "surrogateescape")
    new_changes, new_ctx = _changes_and_context(new_diff)
    old_changes, old_ctx = _changes_and_context(old.diff_text)
    old_by_delta = {(f, d): (c, s) for f, d, c, s in old_ctx}
    context_moved = [f for f, d, c, s in new_ctx if (f, d) in old_by_delta and old_by_delta[(f, d)][0] != c]
    new_lines = Counter(line for _, delta in new_changes for line in delta)
    old_lines = Counter(line for _, delta in old_changes for line in delta)
    added, removed = sum((new_lines - old_lines).values()), sum((old_lines - new_lines).values())
    if new_changes != old_changes:
        status = "content changed"
    else:
        status = "message changed" if new_diff == old.diff_text else "context or offset changed"
    detail = f"context changed in {', '.join(sorted(set(context_moved)))}" if context_moved else ""
    return PatchChange(name, status, bool(context_moved), added, removed, detail)
