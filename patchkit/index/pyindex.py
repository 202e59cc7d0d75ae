"""The index of a tree: facts per file, parsed once per content and cached as JSON under
``<cache_dir>/pyindex/<settings key>/``, so a warm run reads JSON instead of parsing."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchkit.index.extract import extract_facts
from patchkit.index.files import module_name
from patchkit.index.settings import IndexSettings

# Facts by (settings key, content hash), shared by every index in this process, so gates that run
# one after another parse a file at most once. Content-addressed, so an edited file is never stale.
_MEMORY: dict[tuple[str, str], dict[str, Any]] = {}


@dataclass
class PyIndex:
    """Facts for a set of files, with a per-file content-hash cache. Not thread-safe."""

    root: Path
    settings: IndexSettings
    cache_dir: Path | None
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # rel path -> facts
    _module_files: dict[str, str | None] = field(default_factory=dict, repr=False)
    parsed: list[str] = field(default_factory=list)  # files parsed in this process (cache misses)
    errors: dict[str, str] = field(default_factory=dict)  # rel path -> parse error

    def _cache_path(self, digest: str) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / "pyindex" / self.settings.key() / digest[:2] / f"{digest}.json"

    def load(self, rel: str) -> dict[str, Any] | None:
        """Facts of one file (parsing it on a cache miss); None if it does not parse."""
        if rel in self.facts:
            return self.facts[rel]
        if rel in self.errors:
            return None
        data = (self.root / rel).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        memo_key = (self.settings.key(), digest)
        facts = _MEMORY.get(memo_key)
        if facts is None:
            facts = self._load_or_extract(rel, data, digest)
            if facts is None:
                return None
            _MEMORY[memo_key] = facts
        facts = {**facts, "path": rel}
        self.facts[rel] = facts
        return facts

    def _load_or_extract(self, rel: str, data: bytes, digest: str) -> dict[str, Any] | None:
        cached = self._cache_path(digest)
        if cached is not None and cached.is_file():
            loaded: dict[str, Any] = json.loads(cached.read_text())
            return loaded
        facts = self._extract(rel, data)
        if facts is not None and cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(facts))
            tmp.replace(cached)
        return facts

    def _extract(self, rel: str, data: bytes) -> dict[str, Any] | None:
        self.parsed.append(rel)
        modname, is_package = module_name(rel, self.settings.source_root)
        try:
            return extract_facts(data, modname, is_package, self.settings)
        except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
            self.errors[rel] = f"{getattr(exc, 'msg', exc)} (line {getattr(exc, 'lineno', None)})"
            return None

    def load_many(self, rels: Iterable[str]) -> None:
        for rel in rels:
            self.load(rel)

    def module_file(self, module: str) -> str | None:
        """Tree-relative file of an importable module, if it exists in the tree (memoised: name
        resolution asks about the same modules thousands of times)."""
        if module in self._module_files:
            return self._module_files[module]
        base = "/".join((self.settings.source_root, *module.split(".")))
        found = None
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if os.path.isfile(os.path.join(self.root, candidate)):
                found = candidate
                break
        self._module_files[module] = found
        return found

    def is_namespace_package(self, module: str) -> bool:
        """A directory without ``__init__.py`` that holds Python files (PEP 420)."""
        path = os.path.join(self.root, self.settings.source_root, *module.split("."))
        return os.path.isdir(path) and not os.path.exists(os.path.join(path, "__init__.py"))

    def module_facts(self, module: str) -> dict[str, Any] | None:
        rel = self.module_file(module)
        return self.load(rel) if rel else None
