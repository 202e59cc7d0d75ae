"""Seed a one-line edit of a patch into an applied tree, exactly as the edited set would produce it.

A seeded defect (or a corpus entry) edits ONE added ("+") line of one patch of a set. Applying the
whole edited set to a fresh base costs a lock, an apply and a clone per row; but only one file
changes, so :func:`realise` rebuilds just that file: its base content, then every patch of the
series that touches it (the edited one in place of the original) through ``git apply --include``;
a later patch that holds the edited line as context (or removes it) is carried over as refreshing the
edited series would write it. The result is byte-for-byte what ``patchkit apply`` of the edited set would write, and
:func:`seeded` swaps it into a shared applied tree for the duration of a check.
"""

from __future__ import annotations

import contextlib
import fnmatch
import signal
import subprocess
import tempfile
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Edit:
    """One added line of one patch, ``old`` -> ``new`` (line numbers stay put)."""

    name: str
    patch: str  # glob of the patch file inside the set, e.g. "0003-*.patch"
    old: str  # text on the added line(s) of that patch
    new: str  # its replacement; "" leaves a blank line
    occurrence: int | None = None  # which added line holding ``old`` (0-based); None: it must be unique
    kind: str = ""  # the entry's class (corpus) or gate (seeded suite)
    why: str = ""


@dataclass(frozen=True)
class Seeded:
    """The edited tree file: its path, the edited line (1-based), that line's new text, its content."""

    edit: Edit
    file: str
    line: int
    text: str
    content: bytes


def load_edits(path: Path, table: str) -> list[Edit]:
    """The ``[[defect]]`` or ``[[benign]]`` entries of a corpus file."""
    entries = tomllib.loads(path.read_text())[table]
    return [Edit(e["name"], e["patch"], e["old"], e["new"], e.get("occurrence"), e.get("class", table), e.get("why", ""))
            for e in entries]


def series(set_dir: Path) -> list[str]:
    lines = (raw.split("#", 1)[0].strip() for raw in (set_dir / "series").read_text().splitlines())
    return [line for line in lines if line]


def _edited_patch(set_dir: Path, edit: Edit) -> tuple[str, str, str]:
    """(patch name, edited patch text, tree file of the edited line)."""
    names = [n for n in series(set_dir) if fnmatch.fnmatch(n, edit.patch)]
    assert len(names) == 1, f"{edit.name}: {edit.patch!r} matches {len(names)} patches of the series"
    lines = (set_dir / names[0]).read_text().splitlines(keepends=True)
    current, hits = None, []
    for index, line in enumerate(lines):
        if line.startswith("+++ "):
            current = line[4:].strip().removeprefix("b/")
        elif line.startswith("+") and not line.startswith("+++") and edit.old in line:
            hits.append((index, current))
    if edit.occurrence is None:
        assert len(hits) == 1, f"{edit.name}: {edit.old!r} is on {len(hits)} added lines of {names[0]}; make it unique"
        index, tree_file = hits[0]
    else:
        assert edit.occurrence < len(hits), f"{edit.name}: {edit.old!r} is on only {len(hits)} added lines of {names[0]}"
        index, tree_file = hits[edit.occurrence]
    assert tree_file is not None
    lines[index] = lines[index].replace(edit.old, edit.new)
    return names[0], "".join(lines), tree_file


def _base_content(tree: Path, rel: str) -> bytes | None:
    root = subprocess.run(["git", "-C", str(tree), "rev-list", "--max-parents=0", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.split()[-1]
    done = subprocess.run(["git", "-C", str(tree), "show", f"{root}:{rel}"], capture_output=True)
    return done.stdout if done.returncode == 0 else None


def _touches(patch_text: str, rel: str) -> bool:
    return f"+++ b/{rel}\n" in patch_text or f"--- a/{rel}\n" in patch_text


def _apply(work: Path, name: str, text: str, rel: str) -> subprocess.CompletedProcess[str]:
    patch = work / f"{name}.patch"
    patch.write_text(text)
    return subprocess.run(["git", "apply", f"--include={rel}", "--whitespace=nowarn", str(patch)],
                          cwd=work, capture_output=True, text=True)


def _carried(patch_text: str, rel: str, edit: Edit) -> str:
    """A later patch as the edited series would carry it: in its hunks of ``rel``, the context and
    removed lines holding ``edit.old`` hold ``edit.new`` (the line the edited patch now adds)."""
    out, inside = [], False
    for line in patch_text.splitlines(keepends=True):
        if line.startswith("diff --git "):
            inside = False
        elif line.startswith("+++ "):
            inside = line[4:].strip().removeprefix("b/") == rel
        elif inside and line[:1] in (" ", "-") and not line.startswith("--- ") and edit.old in line:
            line = line[0] + line[1:].replace(edit.old, edit.new)
        out.append(line)
    return "".join(out)


def realise(set_dir: Path, tree: Path, edit: Edit) -> Seeded:
    """The edited file as the edited set would leave it in ``tree`` (an applied clean tree)."""
    edited_name, edited_text, rel = _edited_patch(set_dir, edit)
    with tempfile.TemporaryDirectory(prefix="patchkit-seed-") as tmp:
        work = Path(tmp)
        base = _base_content(tree, rel)
        if base is not None:
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(base)
        names = series(set_dir)
        after = names[names.index(edited_name) + 1:]
        for name in names:
            text = edited_text if name == edited_name else (set_dir / name).read_text()
            if not _touches(text, rel):
                continue
            done = _apply(work, name, text, rel)
            if done.returncode != 0 and name in after:
                # a later patch that has the edited line as context: as refreshing the edited series writes it
                done = _apply(work, name, _carried(text, rel, edit), rel)
            assert done.returncode == 0, f"{edit.name}: {name} does not apply to {rel}: {done.stderr}"
        content = (work / rel).read_bytes()
    clean = (tree / rel).read_bytes().split(b"\n")
    changed = [n for n, (a, b) in enumerate(zip(clean, content.split(b"\n")), 1) if a != b]
    assert changed, (f"{edit.name}: the edited line of {rel} is not in the applied set any more (a later patch "
                     "removes or rewrites it): re-target the entry to the line the set has now")
    assert len(content.split(b"\n")) == len(clean) and len(changed) == 1, (
        f"{edit.name}: the edit must change exactly one line of {rel} (changed: {changed})")
    return Seeded(edit, rel, changed[0], content.split(b"\n")[changed[0] - 1].decode(), content)


@contextlib.contextmanager
def seeded(tree: Path, seed: Seeded) -> Iterator[Path]:
    """``tree`` with the seeded file swapped in; the clean file is put back afterwards, whatever
    happens (SIGTERM included: it is turned into SystemExit while the edit is in place, so a killed
    run does not leave a defect behind in the shared tree)."""
    path = tree / seed.file
    clean = path.read_bytes()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if main else None
    path.write_bytes(seed.content)
    try:
        yield tree
    finally:
        path.write_bytes(clean)
        if main:
            signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
