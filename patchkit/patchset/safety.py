"""Path safety: every path a patch names is checked before git sees the patch.

Two independent readings of the diff are checked: our own scan of the raw ``diff --git``,
``---``/``+++``, ``rename``/``copy`` and mode lines (C-quoted names decoded), and unidiff's parse.
Refused (exit 2, tree untouched): absolute paths, ``..``/``.``/empty components, backslashes, NUL,
``.git`` components, writes through a symlink anywhere on the path, renames or copies whose source
or target leaves the tree, new symlinks that are absolute or point outside the tree (or into
``.git``), and binary diffs unless the manifest declares them (``[set] allow_binary``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet as UnidiffPatchSet

from patchkit.errors import BadInput, Location
from patchkit.patchset.series import Patch

SYMLINK_MODE = "120000"
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


class UnsafePatch(BadInput):
    """A patch names a path outside the tree (or writes through a symlink); nothing was applied."""


@dataclass
class FileChange:
    """One ``diff --git`` section as our own scan reads it (paths without the a/ b/ prefix)."""

    line: int  # line of the section header in the patch file
    old_path: str | None = None
    new_path: str | None = None
    new_mode: str | None = None
    old_mode: str | None = None
    renamed_from: str | None = None
    copied_from: str | None = None
    binary: bool = False
    added_lines: list[str] = field(default_factory=list)
    names: list[tuple[str, int | None]] = field(default_factory=list)  # every path named, with its line

    @property
    def is_symlink(self) -> bool:
        return SYMLINK_MODE in (self.new_mode, self.old_mode) and self.new_mode != "deleted"

    def written_paths(self) -> list[str]:
        """Paths this change creates, modifies, deletes or moves."""
        return [p for p in {self.old_path, self.new_path, self.renamed_from, self.copied_from} if p]


# ---------------------------------------------------------------------- name decoding
def unquote_c(text: str) -> str:
    """Decode a git C-quoted name (``"a/\\303\\251"``); unquoted names pass through."""
    if not (len(text) >= 2 and text[0] == '"' and text[-1] == '"'):
        return text
    out, i, body = bytearray(), 0, text[1:-1]
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode("utf-8", "surrogateescape")
            i += 1
        elif body[i + 1 : i + 4].isdigit() and len(body[i + 1 : i + 4]) == 3:
            out.append(int(body[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        else:
            out.append(_ESCAPES.get(body[i + 1 : i + 2], ord(body[i + 1 : i + 2] or "\\")))
            i += 2
    return out.decode("utf-8", "surrogateescape")


def _split_diff_git(rest: str) -> list[str]:
    """The two names of a ``diff --git`` line (quoted, or unquoted possibly with spaces)."""
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"|\S+', rest)
    if any(t.startswith('"') for t in tokens):
        return [unquote_c(t) for t in tokens]
    half = (len(rest) - 1) // 2
    if len(rest) % 2 == 1 and rest[half] == " " and rest[2:half] == rest[half + 3 :]:
        return [rest[:half], rest[half + 1 :]]
    index = rest.find(" b/")
    return [rest[:index], rest[index + 1 :]] if index > 0 else tokens


def _strip_prefix(name: str, prefix: str, where: Location) -> str:
    if not name.startswith(prefix):
        raise UnsafePatch(f"path {name!r} lacks the {prefix!r} prefix of a git diff (-p1)", location=where)
    return name[len(prefix) :]


def _file_name(value: str) -> str:
    """Name on a ---/+++ line: drop a trailing tab and timestamp, decode quoting."""
    value = value.split("\t", 1)[0] if not value.startswith('"') else value
    return unquote_c(value.rstrip("\n"))


# ---------------------------------------------------------------------- raw scan
def scan(patch: Patch) -> list[FileChange]:
    """Our own reading of every ``diff --git`` section (line numbers are patch-file lines)."""
    offset = patch.data[: max(patch.data.find(b"\ndiff --git "), -1) + 1].count(b"\n")
    changes: list[FileChange] = []
    in_hunk = False
    for number, line in enumerate(patch.diff_text.split("\n"), start=offset + 1):
        where = Location(str(patch.path), number)
        if line.startswith("diff --git "):
            names = _split_diff_git(line[len("diff --git ") :])
            if len(names) != 2:
                raise UnsafePatch(f"cannot read the file names of {line!r}", location=where)
            old_path, new_path = _strip_prefix(names[0], "a/", where), _strip_prefix(names[1], "b/", where)
            current = FileChange(number, old_path, new_path)
            current.names += [(old_path, number), (new_path, number)]
            changes.append(current)
            in_hunk = False
        elif not changes:
            continue
        elif line.startswith("@@"):
            in_hunk = True
        elif in_hunk:
            if line.startswith("+"):
                changes[-1].added_lines.append(line[1:])
        else:
            _header_line(changes[-1], line, where)
    return changes


def _header_line(change: FileChange, line: str, where: Location) -> None:
    key_values = {
        "rename from ": "renamed_from",
        "copy from ": "copied_from",
        "rename to ": "new_path",
        "copy to ": "new_path",
    }
    for key, attr in key_values.items():
        if line.startswith(key):
            name = unquote_c(line[len(key) :])
            setattr(change, attr, name)
            change.names.append((name, where.line))
            return
    if line.startswith("--- ") or line.startswith("+++ "):
        name = _file_name(line[4:])
        if name != "/dev/null":
            name = _strip_prefix(name, "a/" if line[0] == "-" else "b/", where)
            change.names.append((name, where.line))
    elif line.startswith("new file mode ") or line.startswith("new mode "):
        change.new_mode = line.split()[-1]
    elif line.startswith("old mode "):
        change.old_mode = line.split()[-1]
    elif line.startswith("deleted file mode "):
        change.old_mode, change.new_mode = line.split()[-1], "deleted"
    elif line.startswith("index ") and line.split()[-1] == SYMLINK_MODE:
        change.old_mode = change.new_mode = SYMLINK_MODE
    elif line.startswith("GIT binary patch") or (line.startswith("Binary files ") and line.endswith(" differ")):
        change.binary = True


# ---------------------------------------------------------------------- checks
def path_problem(path: str) -> str | None:
    """Why ``path`` (repo-relative, from a patch) is unsafe, or None."""
    if not path:
        return "empty path"
    if "\0" in path or "\\" in path:
        return "NUL or backslash in path"
    if path.startswith("/"):
        return "absolute path"
    parts = path.split("/")
    if ".." in parts:
        return "'..' component leaves the tree"
    if any(p in ("", ".") for p in parts):
        return "empty or '.' component"
    if any(p.lower().rstrip(". ") == ".git" or p.lower().startswith(".git/") for p in parts):
        return "'.git' component"
    return None


def link_problem(link_path: str, target: str) -> str | None:
    """Why a symlink at ``link_path`` pointing at ``target`` is unsafe, or None."""
    if not target or target.startswith("/") or "\\" in target:
        return f"symlink {link_path} -> {target!r} is absolute or empty"
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link_path), target))
    if resolved == ".." or resolved.startswith("../"):
        return f"symlink {link_path} -> {target!r} points outside the tree"
    if any(p.lower() == ".git" for p in resolved.split("/")):
        return f"symlink {link_path} -> {target!r} points into .git"
    return None


def check_static(patch: Patch, allow_binary: Iterable[str] = ()) -> list[FileChange]:
    """Refuse unsafe names, links and undeclared binaries; return the scanned changes."""
    changes = scan(patch)
    if not changes:
        raise UnsafePatch("patch has no diff --git sections", location=Location(str(patch.path)))
    for change in changes:
        for name, line in change.names:
            problem = path_problem(name)
            if problem:
                raise UnsafePatch(f"{problem}: {name!r}", location=Location(str(patch.path), line))
        if change.binary and patch.name not in set(allow_binary):
            raise UnsafePatch(
                f"binary diff for {change.new_path!r}",
                location=Location(str(patch.path), change.line),
                hint="declare the patch in [set] allow_binary if this is intended",
            )
        if change.new_mode == SYMLINK_MODE or (change.is_symlink and change.added_lines):
            target = "\n".join(change.added_lines)
            problem = link_problem(change.new_path or "", target)
            if problem:
                raise UnsafePatch(problem, location=Location(str(patch.path), change.line))
    if not any(c.binary for c in changes):
        _cross_check_unidiff(patch, changes)
    return changes


_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def short_hunk(path: Path) -> tuple[int, str] | None:
    """The first hunk of the patch file with fewer lines than its header declares: (its header's line,
    what is missing), or None. (A truncated file: unidiff only says "Hunk is shorter than expected".)"""
    lines = path.read_bytes().decode("utf-8", "replace").split("\n")
    for number, line in enumerate(lines, 1):
        header = _HUNK.match(line)
        if not header:
            continue
        want_old, want_new = (int(n) if n is not None else 1 for n in header.groups())
        old = new = 0
        for body in lines[number:]:
            if old >= want_old and new >= want_new:
                break
            if body.startswith(("@@", "diff --git ")) or body == "-- " or body[:1] not in (" ", "-", "+", "\\"):
                break
            old += body[:1] in (" ", "-")
            new += body[:1] in (" ", "+")
        if old < want_old or new < want_new:
            return number, (f"the hunk at line {number} is shorter than its header says: {old} of {want_old} old "
                            f"and {new} of {want_new} new lines")
    return None


def _cross_check_unidiff(patch: Patch, changes: list[FileChange]) -> None:
    """A second parser must see the same files, all of them safe."""
    where = Location(str(patch.path))
    try:
        parsed = UnidiffPatchSet(patch.diff_text)
    except UnidiffParseError as exc:
        short = short_hunk(patch.path)
        if short:
            line, message = short
            raise BadInput(message, location=Location(str(patch.path), line),
                           hint=f"the file looks truncated: restore it (git checkout -- {patch.path}) or write it "
                                "again with `patchkit refresh`") from exc
        raise BadInput(f"malformed diff: {exc}", location=where,
                       hint="restore the patch file, or write it again with `patchkit refresh`") from exc
    if len(parsed) != len(changes):
        raise UnsafePatch(
            f"unidiff sees {len(parsed)} files, the raw scan {len(changes)}; refusing an ambiguous patch",
            location=where,
        )
    for pfile in parsed:
        for name in (pfile.source_file, pfile.target_file):
            name = _file_name(name or "")
            if name == "/dev/null":
                continue
            stripped = name[2:] if name[:2] in ("a/", "b/") else name
            problem = path_problem(stripped)
            if problem:
                raise UnsafePatch(f"{problem}: {name!r}", location=where)


def check_against_tree(patch: Patch, changes: list[FileChange], symlinks: set[str]) -> None:
    """Refuse writes through a symlink of the staged tree (or one this patch creates)."""
    links = set(symlinks) | {c.new_path for c in changes if c.new_mode == SYMLINK_MODE and c.new_path}
    for change in changes:
        for path in change.written_paths():
            parts = path.split("/")
            for depth in range(1, len(parts)):
                prefix = "/".join(parts[:depth])
                if prefix in links:
                    raise UnsafePatch(
                        f"{path!r} is written through the symlink {prefix!r}",
                        location=Location(str(patch.path), change.line),
                    )


def touched_paths(changes: Iterable[FileChange]) -> set[str]:
    """Every repo path the changes create, modify, delete or rename away."""
    return {p for c in changes for p in c.written_paths()}
