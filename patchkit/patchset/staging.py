"""Applying a series in a scratch index: never touches a work tree, branch or the real index.

``git read-tree <base>`` into a temporary ``GIT_INDEX_FILE``; every patch's names are checked for
path safety before git sees any of them; then per patch: the checks against the staged tree (symlinks
on the way), ``git apply --cached`` (zero fuzz: git never ignores context unless asked),
``git write-tree``. :func:`stage_series` yields each staged patch as it is done, so ``apply`` records
its commit in its own loop, ``lock`` and ``refresh`` just collect the trees.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchedFile
from unidiff.patch import PatchSet as UnidiffPatchSet

from patchkit import fsutil
from patchkit.errors import Failed
from patchkit.git import Repo, temp_index_env
from patchkit.manifest import ABSENT
from patchkit.patchset import safety
from patchkit.patchset.series import Patch, PatchSet, sha256_bytes

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Conflict:
    """Where a patch stopped applying: patch, hunk (1-based within the file), file:line, and lines."""

    patch: str
    file: str
    hunk: int | None
    line: int | None
    expected: tuple[str, ...]  # the hunk's context and removed lines
    actual: tuple[str, ...]  # the staged tree's lines at that place
    git_error: str


class ConflictError(Failed):
    """A patch does not apply with zero fuzz; carries the :class:`Conflict`."""

    def __init__(self, conflict: Conflict):
        where = f"{conflict.file}:{conflict.line}" if conflict.line else conflict.file
        hunk = f" hunk {conflict.hunk}" if conflict.hunk else ""
        super().__init__(f"{conflict.patch}{hunk} does not apply at {where}")
        self.conflict = conflict


@dataclass(frozen=True, kw_only=True)
class StagedPatch:
    patch: Patch
    tree: str  # the staged tree after this patch
    touched: frozenset[str]  # paths this patch writes or deletes


class ScratchIndex:
    """A temporary index file in ``repo``; git commands run through :meth:`git`."""

    def __init__(self, repo: Repo, directory: Path):
        self.repo = repo
        self.env = temp_index_env(directory / "index")

    def git(self, *args: str, input: bytes | None = None, check: bool = True) -> tuple[int, bytes, str]:
        return self.repo.run_bytes(*args, env=self.env, input=input, check=check)

    def symlinks(self) -> set[str]:
        out = self.git("ls-files", "-s", "-z")[1]
        return {
            r.split(b"\t", 1)[1].decode("utf-8", "surrogateescape")
            for r in out.split(b"\0")
            if r.startswith(b"120000 ")
        }

    def blob(self, path: str) -> bytes | None:
        out = self.git("ls-files", "-s", "-z", "--", path)[1].split(b"\0")[0]
        return self.repo.blob_bytes(out.split()[1].decode()) if out else None


@contextlib.contextmanager
def scratch_index(repo: Repo, base: str) -> Iterator[ScratchIndex]:
    """A scratch index holding ``base``'s tree, deleted on exit (also on Ctrl-C)."""
    with fsutil.scratch_dir("stage") as tmp:
        index = ScratchIndex(repo, tmp)
        index.git("read-tree", base)
        yield index


def stage_patch(index: ScratchIndex, patch: Patch, changes: list[safety.FileChange]) -> StagedPatch:
    """Apply one patch, whose names :func:`safety.check_static` passed as ``changes``, to the scratch
    index; raise UnsafePatch (a symlink on the way in the staged tree) or ConflictError."""
    safety.check_against_tree(patch, changes, index.symlinks())
    status, _, err = index.git("apply", "--cached", "--whitespace=nowarn", "-", input=patch.diff, check=False)
    if status != 0:
        raise ConflictError(explain_conflict(index, patch, err))
    tree = index.git("write-tree")[1].decode().strip()
    return StagedPatch(patch=patch, tree=tree, touched=frozenset(safety.touched_paths(changes)))


def stage_series(repo: Repo, base: str, pset: PatchSet, progress: Progress | None = None) -> Iterator[StagedPatch]:
    """Stage every patch of ``pset`` on ``base``, yielding each one; all or nothing (the scratch index
    is discarded when the generator ends, also when the consumer stops early)."""
    allow_binary = pset.manifest.set.allow_binary
    checked = [(patch, safety.check_static(patch, allow_binary)) for patch in pset.patches]  # before git runs
    with scratch_index(repo, base) as index:
        for number, (patch, changes) in enumerate(checked, start=1):
            if progress:
                progress(f"staging {number}/{len(checked)}: {patch.name}")
            yield stage_patch(index, patch, changes)


def post_image(repo: Repo, tree: str, paths: set[str]) -> dict[str, str]:
    """sha256 of each path's bytes in ``tree`` (``absent`` for paths the series deletes)."""
    entries = repo.ls_tree(tree, sorted(paths)) if paths else {}
    return {p: sha256_bytes(repo.blob_bytes(entries[p][1])) if p in entries else ABSENT for p in sorted(paths)}


# ---------------------------------------------------------------------- conflict report
def explain_conflict(index: ScratchIndex, patch: Patch, git_error: str) -> Conflict:
    """Find the first hunk whose context is not in the staged file and show both sides."""
    try:
        parsed: list[PatchedFile] = list(UnidiffPatchSet(patch.diff_text))
    except UnidiffParseError:
        parsed = []
    for pfile in parsed:
        path = pfile.path
        content = index.blob(pfile.source_file[2:]) if not pfile.is_added_file else None
        if pfile.is_added_file:
            if index.blob(pfile.target_file[2:]) is not None:
                return _conflict(patch.name, pfile.target_file[2:], f"{path} already exists\n{git_error}")
            continue
        if content is None:
            return _conflict(patch.name, path, f"{path} does not exist in the tree\n{git_error}")
        found = _first_missing_hunk(
            patch.name, path, content.decode("utf-8", "surrogateescape").splitlines(), pfile, git_error
        )
        if found:
            return found
    return _conflict(patch.name, "?", git_error.strip())


def _conflict(patch: str, file: str, git_error: str) -> Conflict:
    return Conflict(patch=patch, file=file, hunk=None, line=None, expected=(), actual=(), git_error=git_error)


def _first_missing_hunk(
    name: str, path: str, lines: list[str], pfile: PatchedFile, git_error: str
) -> Conflict | None:
    position = 0
    for number, hunk in enumerate(pfile, start=1):
        expected = [ln.value.rstrip("\n") for ln in hunk if ln.is_context or ln.is_removed]
        at = _find_block(lines, expected, position)
        if at is None:
            start = max(hunk.source_start - 1, 0)
            actual = tuple(lines[start : start + max(len(expected), 1)])
            return Conflict(patch=name, file=path, hunk=number, line=hunk.source_start, expected=tuple(expected),
                            actual=actual, git_error=git_error.strip())
        position = at + len(expected)
    return None


def _find_block(lines: list[str], block: list[str], start: int) -> int | None:
    if not block:
        return start
    for i in range(start, len(lines) - len(block) + 1):
        if lines[i : i + len(block)] == block:
            return i
    return None
