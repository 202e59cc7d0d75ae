"""Which files of a tree the index reads: the Python files under the source root, the bytes prefilter
that picks those worth parsing (one read per file, memoised on size and mtime), and module names."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.index.settings import IndexSettings


def python_files(root: Path, source_root: str) -> list[str]:
    """Tree-relative paths of every ``.py`` file under ``root/source_root``, sorted."""
    base = root / source_root
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for name in filenames:
            if name.endswith(".py"):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(found)


def prefilter(root: Path, files: Iterable[str], pattern: bytes) -> list[str]:
    """The files whose bytes match ``pattern`` (one read and one regex search per file)."""
    regex = re.compile(pattern)
    hits = []
    for rel in files:
        try:
            data = (root / rel).read_bytes()
        except OSError:
            continue
        if regex.search(data):
            hits.append(rel)
    return hits


@dataclass(frozen=True)
class Scan:
    """One pass over the tree's Python files: the family hits (xref) and the dispatch hits."""

    files: tuple[str, ...]
    family: tuple[str, ...]
    dispatch: tuple[str, ...]


_SCANS: dict[tuple[str, str], tuple[dict[str, tuple[int, int]], Scan]] = {}


def scan(root: Path, settings: IndexSettings, cache_dir: Path | None = None) -> Scan:
    """Prefilter the tree for both the family and the dispatch patterns with one read per file.

    Memoised per process, and with ``cache_dir`` across runs, on each file's (size, mtime): xref and
    dispatch run one after the other in one ``patchkit verify``, and a warm run only stats the tree
    and reads the files that changed."""
    files = python_files(root, settings.source_root)
    stats = {rel: ((st := (root / rel).stat()).st_size, st.st_mtime_ns) for rel in files}
    memo_key = (str(root.resolve()), settings.key())
    cached = _SCANS.get(memo_key)
    if cached is not None and cached[0] == stats:
        return cached[1]
    store = (cache_dir / "pyindex" / settings.key() /
             f"scan-{hashlib.sha256(memo_key[0].encode()).hexdigest()[:16]}.json") if cache_dir else None
    known: dict[str, list[Any]] = {}
    if store is not None and store.is_file():
        try:
            known = json.loads(store.read_text())
        except ValueError:
            known = {}
    family, dispatch = re.compile(settings.family.encode()), re.compile(dispatch_pattern(settings))
    # Literal substrings every dispatch hit contains: `in` on bytes is ~2x cheaper than the regex,
    # which then only runs on the few files that pass.
    literals = ([f"{h}(".encode() for h in settings.helpers] + [f"{settings.enum_name}.".encode()]
                + [f"{e}.".encode() for e in settings.member_enums] + [n.encode() for n in settings.algorithm_names])
    fresh: dict[str, list[Any]] = {}
    for rel in files:
        size, mtime = stats[rel]
        entry = known.get(rel)
        if entry is None or entry[0] != size or entry[1] != mtime:
            data = (root / rel).read_bytes()
            entry = [size, mtime, bool(family.search(data)), any(lit in data for lit in literals)
                     and bool(dispatch.search(data))]
        fresh[rel] = entry
    if store is not None and fresh != known:
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = store.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(fresh))
        tmp.replace(store)
    result = Scan(tuple(files), tuple(r for r in files if fresh[r][2]), tuple(r for r in files if fresh[r][3]))
    _SCANS[memo_key] = (stats, result)
    return result


def dispatch_pattern(settings: IndexSettings) -> bytes:
    """Bytes regex that every file holding a dispatch site matches."""
    helpers = "|".join(map(re.escape, settings.helpers))
    names = "|".join(map(re.escape, settings.algorithm_names))
    enums = "|".join(map(re.escape, (settings.enum_name, *settings.member_enums)))
    return (rf"\.(?:{helpers})\(|(?:{enums})\.|[\"'](?:{names})[\"']").encode()


# ---------------------------------------------------------------------------------------------
# Module naming


def module_name(rel: str, source_root: str) -> tuple[str, bool]:
    """``python/sglang/srt/x.py`` -> ``("sglang.srt.x", False)``; ``__init__.py`` -> package True."""
    prefix = source_root.rstrip("/") + "/"
    path = rel[len(prefix):] if rel.startswith(prefix) else rel
    parts = (path[:-3] if path.endswith(".py") else path).split("/")
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module named by ``from <dots><target> import ...`` inside ``module``."""
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    if target:
        parts.append(target)
    return ".".join(parts)
