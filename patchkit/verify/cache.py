"""A small on-disk cache for gate results, keyed by content hashes.

Gates are pure functions of their inputs (file contents, the manifest, the interpreter), so a result
computed once for the same inputs can be reused: that is what makes a warm ``patchkit verify`` fast.
Each entry is one JSON file named by the sha256 of its key parts; writes are atomic (temp + rename), so
concurrent runs never see a torn entry. A corrupt or unreadable entry is treated as a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Bump when the stored format changes; old entries then simply miss.
CACHE_FORMAT = 1


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


@dataclass(frozen=True)
class ResultCache:
    """JSON values under ``directory/<namespace>/<key[:2]>/<key>.json``."""

    directory: Path
    namespace: str

    def _path(self, key: str) -> Path:
        return self.directory / self.namespace / key[:2] / f"{key}.json"

    def get(self, key: str) -> Any | None:
        try:
            return json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, value: Any) -> None:
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
