"""``patchkit sets copy``: a self-contained copy of a set, one that verifies as the original does.

A shipped set may name folders outside itself (``[verify.tests] shared = ["../common/ddtree_utils_tests"]``,
``[verify.xref] use_paths``): the tests of the code several sets carry, kept once beside them. A plain
copy of the set's folder elsewhere loses them. This copies the set, copies each such folder into the
copy's ``shared/`` and rewrites the manifest's paths to them; patches, series and lock are copied as
they are. The copy is built aside and renamed into place: it appears whole or not at all.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from patchkit import manifest as manifest_mod
from patchkit.errors import BadInput
from patchkit.references import outside_references
from patchkit.results import CommandResult

SHARED_DIR = "shared"  # where the copy keeps the folders the original named outside itself
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


@dataclass(frozen=True, kw_only=True)
class CopySetResult(CommandResult):
    source: str
    dest: str
    copied: tuple[tuple[str, str], ...]  # (the original's path, the copy's path), relative to each set


def copy_set(source: Path, dest: Path) -> CopySetResult:
    """Copy the set at ``source`` to ``dest`` (which must not exist), with its outside folders inside it."""
    manifest = manifest_mod.load(source, with_lock=False)
    if dest.exists():
        raise BadInput(f"{dest} already exists", hint="name a new folder for the copy")
    refs = outside_references(source, manifest)
    missing = [ref for ref in refs if not (source / ref.path).is_dir()]
    if missing:
        raise BadInput(f"{ref_where(manifest.path, missing[0].line)}: [{missing[0].table}] {missing[0].key} names "
                       f"{missing[0].path!r}, which is not a folder", hint="copy a set whose folders are all there")
    moved = _new_paths(sorted({ref.path for ref in refs}))
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".patchkit-copy-", dir=dest.parent) as scratch:
        staged = Path(scratch) / "set"
        shutil.copytree(source, staged, ignore=_IGNORE)
        for old, new in moved.items():
            shutil.copytree(source / old, staged / new, ignore=_IGNORE)
        text = (staged / manifest_mod.MANIFEST_NAME).read_text(encoding="utf-8")
        for old, new in moved.items():
            text = text.replace(f'"{old}"', f'"{new}"')
        (staged / manifest_mod.MANIFEST_NAME).write_text(text, encoding="utf-8")
        staged.rename(dest)
    return CopySetResult(command="sets copy", ok=True, source=str(source), dest=str(dest),
                         copied=tuple(moved.items()))


def ref_where(path: Path, line: int | None) -> str:
    return f"{path}:{line}" if line else str(path)


def _new_paths(paths: list[str]) -> dict[str, str]:
    """Each outside folder's place in the copy: ``shared/<its name>`` (numbered when two share a name)."""
    out: dict[str, str] = {}
    for path in paths:
        name = Path(path).name or "shared"
        new, n = f"{SHARED_DIR}/{name}", 2
        while new in out.values():
            new, n = f"{SHARED_DIR}/{name}-{n}", n + 1
        out[path] = new
    return out
