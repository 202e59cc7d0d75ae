"""Applying a series in a scratch index: never touches a work tree, branch or the real index.

``git read-tree <base>`` into a temporary ``GIT_INDEX_FILE``, then per patch: path-safety checks
against the staged tree, ``git apply --cached`` (zero fuzz: git never ignores context unless asked),
``git write-tree``. Used by ``apply`` (which then records commits) and ``lock`` (post-image hashes).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import unidiff

from patchkit.patchset import safety
from patchkit.errors import Failed
from patchkit.git import Repo, temp_index_env
from patchkit.manifest import ABSENT
from patchkit.patchset.series import Patch, PatchSet, sha256_bytes

Progress = Callable[[str], None]


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class StagedPatch:
    patch: Patch
    tree: str
    touched: frozenset[str]


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
    with tempfile.TemporaryDirectory(prefix="patchkit-stage-") as tmp:
        index = ScratchIndex(repo, Path(tmp))
        index.git("read-tree", base)
        yield index


def stage_patch(index: ScratchIndex, patch: Patch, allow_binary: tuple[str, ...]) -> StagedPatch:
    """Check and apply one patch to the scratch index; raise UnsafePatch or ConflictError."""
    changes = safety.check_static(patch, allow_binary)
    safety.check_against_tree(patch, changes, index.symlinks())
    status, _, err = index.git("apply", "--cached", "--whitespace=nowarn", "-", input=patch.diff, check=False)
    if status != 0:
        raise ConflictError(explain_conflict(index, patch, err))
    tree = index.git("write-tree")[1].decode().strip()
    return StagedPatch(patch, tree, frozenset(safety.touched_paths(changes)))


def stage_series(
    repo: Repo,
    base: str,
    pset: PatchSet,
    progress: Progress | None = None,
    after_each: Callable[[StagedPatch], None] | None = None,
) -> list[StagedPatch]:
    """Stage every patch of ``pset`` on ``base``; all or nothing (the scratch index is discarded)."""
    staged: list[StagedPatch] = []
    for patch in pset.patches:  # every name of every patch is checked before git sees any of them
        safety.check_static(patch, pset.manifest.set.allow_binary)
    with scratch_index(repo, base) as index:
        for number, patch in enumerate(pset.patches, start=1):
            if progress:
                progress(f"staging {number}/{len(pset.patches)}: {patch.name}")
            staged.append(stage_patch(index, patch, pset.manifest.set.allow_binary))
            if after_each:
                after_each(staged[-1])
    return staged


def post_image(repo: Repo, tree: str, paths: set[str]) -> dict[str, str]:
    """sha256 of each path's bytes in ``tree`` (``absent`` for paths the series deletes)."""
    entries = repo.ls_tree(tree, sorted(paths)) if paths else {}
    return {p: sha256_bytes(repo.blob_bytes(entries[p][1])) if p in entries else ABSENT for p in sorted(paths)}


# ---------------------------------------------------------------------- conflict report
def explain_conflict(index: ScratchIndex, patch: Patch, git_error: str) -> Conflict:
    """Find the first hunk whose context is not in the staged file and show both sides."""
    try:
        parsed = unidiff.PatchSet(patch.diff_text)
    except unidiff.UnidiffParseError:
        parsed = []
    for pfile in parsed:
        path = pfile.path
        content = index.blob(pfile.source_file[2:]) if not pfile.is_added_file else None
        if pfile.is_added_file:
            if index.blob(pfile.target_file[2:]) is not None:
                return Conflict(
                    patch.name, pfile.target_file[2:], None, None, (), (), f"{path} already exists\n{git_error}"
                )
            continue
        if content is None:
            return Conflict(patch.name, path, None, None, (), (), f"{path} does not exist in the tree\n{git_error}")
        found = _first_missing_hunk(
            patch.name, path, content.decode("utf-8", "surrogateescape").splitlines(), pfile, git_error
        )
        if found:
            return found
    return Conflict(patch.name, "?", None, None, (), (), git_error.strip())


def _first_missing_hunk(name: str, path: str, lines: list[str], pfile, git_error: str) -> Conflict | None:
    position = 0
    for number, hunk in enumerate(pfile, start=1):
        expected = [ln.value.rstrip("\n") for ln in hunk if ln.is_context or ln.is_removed]
        at = _find_block(lines, expected, position)
        if at is None:
            start = max(hunk.source_start - 1, 0)
            actual = tuple(lines[start : start + max(len(expected), 1)])
            return Conflict(name, path, number, hunk.source_start, tuple(expected), actual, git_error.strip())
        position = at + len(expected)
    return None


def _find_block(lines: list[str], block: list[str], start: int) -> int | None:
    if not block:
        return start
    for i in range(start, len(lines) - len(block) + 1):
        if lines[i : i + len(block)] == block:
            return i
    return None
