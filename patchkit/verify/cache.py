"""A small on-disk cache for gate results, keyed by content hashes.

Gates are pure functions of their inputs (file contents, the manifest, the interpreter), so a result
computed once for the same inputs can be reused: that is what makes a warm ``patchkit verify`` fast.
Each entry is one JSON file named by the sha256 of its key parts; writes are atomic (temp + rename), so
concurrent runs never see a torn entry. A corrupt or unreadable entry is treated as a miss.

A result keyed by a tree's content (not its path) may be read back for another tree of the same content:
stored with ``tree=`` the tree's root, every path inside it is kept relative to a placeholder
(:data:`TREE`) and read back under the reading tree's root, so a finding, a traceback or a coverage
table computed on one tree names the other tree's files exactly as a run there would.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Bump when the stored format changes; old entries then simply miss.
CACHE_FORMAT = 2


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Content hash of a file, or a marker for a missing one (a deleted file is an input too)."""
    try:
        return sha256_bytes(path.read_bytes())
    except FileNotFoundError:
        return "missing"


def hash_files(paths: Iterable[Path], relative_to: Path | None = None) -> str:
    """One hash over several files' names and contents, independent of the iteration order."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        name = str(path.relative_to(relative_to)) if relative_to else str(path)
        digest.update(f"{name}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


def key_of(*parts: Any) -> str:
    """A stable key for JSON-serialisable parts (dict order does not matter)."""
    blob = json.dumps([CACHE_FORMAT, *parts], sort_keys=True, default=str).encode()
    return sha256_bytes(blob)


#: Stands for the tree's root inside a stored value (see the module docstring).
TREE = "<patchkit-tree>"


def _root_forms(root: Path) -> list[str]:
    """The spellings of ``root`` a run may have written (as given, absolute, resolved), longest first."""
    forms = {str(root), os.path.abspath(root), str(root.resolve())}
    return sorted((f.rstrip(os.sep) for f in forms if f.rstrip(os.sep)), key=len, reverse=True)


def _map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` with ``change`` applied to every string in it, dict keys included."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {change(k) if isinstance(k, str) else k: _map_strings(v, change) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_map_strings(v, change) for v in value]
    return value


def tree_relative(value: Any, root: Path) -> Any:
    """``value`` with every mention of the tree ``root`` (a path or a path prefix) replaced by :data:`TREE`."""
    # a path name character after the root means another folder (/t/a is not a prefix of /t/ab)
    pattern = re.compile("(?:" + "|".join(re.escape(form) for form in _root_forms(root)) + r")(?![\w.@+~-])")
    return _map_strings(value, lambda text: pattern.sub(TREE, text))


def on_tree(value: Any, root: Path) -> Any:
    """A value stored by :func:`tree_relative`, with :data:`TREE` read as ``root``."""
    where = str(root)
    return _map_strings(value, lambda text: text.replace(TREE, where))


@dataclass(frozen=True)
class ResultCache:
    """JSON values under ``directory/<namespace>/<key[:2]>/<key>.json``."""

    directory: Path
    namespace: str

    def _path(self, key: str) -> Path:
        return self.directory / self.namespace / key[:2] / f"{key}.json"

    def get(self, key: str, tree: Path | None = None) -> Any | None:
        """The stored value; with ``tree``, a tree-relative one (see :meth:`put`) placed on that tree."""
        try:
            value = json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None
        return on_tree(value, tree) if tree is not None and value is not None else value

    def put(self, key: str, value: Any, tree: Path | None = None) -> None:
        """Store ``value``; with ``tree``, every path under that tree is stored relative to it, so the
        entry serves any tree of the same content (the key must then not depend on the tree's path)."""
        if tree is not None:
            value = tree_relative(value, tree)
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(value, handle)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def through(self, key: str, compute: Callable[[], Any]) -> Any:
        """The cached value for ``key``, computing and storing it on a miss."""
        value = self.get(key)
        if value is None:
            value = compute()
            self.put(key, value)
        return value
