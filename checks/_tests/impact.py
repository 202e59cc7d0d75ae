"""Test-impact selection for the tests gate: rerun only the set tests whose code changed.

Every run records, per test, which functions of the tree it ran (``checks/_tests/runner.py``); this
module turns those code objects into line-independent identities (file, qualified name, hash of the
function's syntax tree) and, on a later run of the same set against a changed tree, says which
tests ran a function that changed. The others keep their recorded outcome.

Why this is sound: a test's outcome depends only on the code it runs (the environment, the stubs
and the set's tests are part of the store's key). Conservative where it cannot see: a change to
module-level code (imports, class bodies, constants, a function's signature or decorators) of a
file reruns every test, a file appearing or vanishing changes the key, and a test that started a
subprocess (``opaque``) reruns when any file it touched changes.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODULE = "<module>"
SNAPSHOTS = 4


@dataclass(frozen=True)
class CodeIndex:
    """A file's code objects by (first line, name) -> qualified name, and the hashes to compare."""

    functions: dict[tuple[int, str], str]  # (co_firstlineno, co_name) -> qualname
    spans: list[tuple[int, int, str]]  # (first line, last line, qualname) of every function
    hashes: dict[str, str]  # qualname -> hash of the function's syntax tree (line numbers excluded)
    module: str  # hash of the file with every function body blanked


def _digest(node: ast.AST) -> str:
    return hashlib.sha256(ast.dump(node, include_attributes=False).encode()).hexdigest()[:20]


def code_index(source: str) -> CodeIndex:
    tree = ast.parse(source)
    functions: dict[tuple[int, str], str] = {}
    spans: list[tuple[int, int, str]] = []
    hashes: dict[str, str] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}.{child.name}" if prefix else child.name
                first = child.decorator_list[0].lineno if child.decorator_list else child.lineno
                if isinstance(child, ast.ClassDef):
                    functions[(first, child.name)] = MODULE  # a class body runs with the module
                else:
                    functions[(first, child.name)] = qual
                    spans.append((child.lineno, child.end_lineno or child.lineno, qual))
                    hashes[qual] = _digest(child)
                walk(child, qual)
            else:
                walk(child, prefix)

    walk(tree, "")
    blank = copy.deepcopy(tree)
    for node in ast.walk(blank):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = [ast.Pass()]
    return CodeIndex(functions, spans, hashes, _digest(blank))


def _qualname(index: CodeIndex, line: int, name: str) -> str:
    """The function a code object belongs to: itself, or (a lambda, a comprehension) the innermost
    function around it; module-level code otherwise."""
    if name == MODULE:
        return MODULE  # a module's code starts at line 1, inside a function defined there
    found = index.functions.get((line, name))
    if found is not None:
        return found
    inner = [s for s in index.spans if s[0] <= line <= s[1]]
    return min(inner, key=lambda s: s[1] - s[0])[2] if inner else MODULE


def file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class Snapshot:
    """One recorded run: per test its outcome and the functions it ran, plus the files' state."""

    def __init__(self, data: dict[str, Any]):
        self.data = data

    @classmethod
    def record(cls, root: Path, outcome: dict[str, Any]) -> Snapshot | None:
        deps = outcome.get("deps")
        if not deps or not outcome.get("tests"):
            return None
        prefix = str(root.resolve()) + os.sep
        indexes: dict[str, CodeIndex | None] = {}
        files: dict[str, str | None] = {}

        def identity(path: str, line: int, name: str) -> tuple[str, str] | None:
            if not path.startswith(prefix):
                return None
            rel = path[len(prefix):]
            if rel not in indexes:
                try:
                    indexes[rel] = code_index((root / rel).read_text(encoding="utf-8", errors="replace"))
                except (OSError, SyntaxError, ValueError):
                    indexes[rel] = None
                files[rel] = file_digest(root / rel)
            index = indexes[rel]
            return (rel, _qualname(index, line, name)) if index is not None else (rel, MODULE)

        buckets: dict[str, list[list[str]]] = {}
        for bucket, codes in deps["buckets"].items():
            found = {identity(path, int(line), name) for path, line, name in codes}
            buckets[bucket] = sorted([rel, qual] for rel, qual in (f for f in found if f is not None))
        fixtures = deps.get("fixtures", {})
        tests = {}
        for nodeid, result in outcome["tests"].items():
            own = {tuple(x) for x in buckets.get(nodeid, [])}
            for fixture in fixtures.get(nodeid, []):
                own |= {tuple(x) for x in buckets.get(f"fixture:{fixture}", [])}
            tests[nodeid] = {**result, "deps": sorted(list(x) for x in own),
                             "opaque": nodeid in deps.get("opaque", [])}
        hashes = {rel: index.hashes for rel, index in indexes.items() if index is not None}
        modules = {rel: index.module for rel, index in indexes.items() if index is not None}
        return cls({"files": files, "hashes": hashes, "modules": modules, "tests": tests,
                    "global": buckets.get("<global>", []), "returncode": outcome.get("returncode")})

    def affected(self, root: Path) -> list[str] | None:
        """Tests that ran code which changed since; None when every test must run again."""
        changed = [rel for rel, digest in self.data["files"].items() if file_digest(root / rel) != digest]
        if not changed:
            return []
        current: dict[str, CodeIndex] = {}
        for rel in changed:
            try:
                current[rel] = code_index((root / rel).read_text(encoding="utf-8", errors="replace"))
            except (OSError, SyntaxError, ValueError):
                return None
            if current[rel].module != self.data["modules"].get(rel):
                return None  # module-level code changed: anything may depend on it

        def stale(rel: str, qual: str) -> bool:
            if rel not in current or qual == MODULE:
                return False  # module-level code of a changed file was compared above: unchanged
            recorded: str | None = self.data["hashes"].get(rel, {}).get(qual)
            return current[rel].hashes.get(qual) != recorded

        if any(stale(rel, qual) for rel, qual in self.data["global"]):
            return None
        out = []
        for nodeid, test in self.data["tests"].items():
            touched_opaque = test.get("opaque") and any(rel in current for rel, _ in test["deps"])
            if touched_opaque or any(stale(rel, qual) for rel, qual in test["deps"]):
                out.append(nodeid)
        return out

    def merged(self, fresh: dict[str, Any], root: Path) -> dict[str, Any]:
        """The full outcome: the fresh run's tests, the recorded outcome for every other test."""
        tests = {**self.data["tests"], **fresh.get("tests", {})}
        failures = [f for t in tests.values() for f in t.get("failures", [])]
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        for test in tests.values():
            counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
        code = 1 if counts["failed"] else 0
        # the lines the rerun tests ran (the locator ranks with them; coverage needs every test's)
        return {"returncode": code, "failures": failures, "counts": counts, "tests": tests,
                "reused": len(tests) - len(fresh.get("tests", {})), "rerun": len(fresh.get("tests", {})),
                "lines": fresh.get("lines", {})}


class SnapshotStore:
    """The last few snapshots for one key (interpreter, set tests, stubs, tree file names)."""

    def __init__(self, cache_dir: Path, key: str):
        self.path = cache_dir / "tests" / f"impact-{key}.json"

    def load(self) -> list[Snapshot]:
        try:
            return [Snapshot(d) for d in json.loads(self.path.read_text())]
        except (OSError, ValueError):
            return []

    def best(self, root: Path) -> tuple[Snapshot, list[str]] | None:
        """The snapshot that needs the fewest tests rerun on this tree, with those tests."""
        choices = []
        for snap in self.load():
            affected = snap.affected(root)
            if affected is not None:
                choices.append((len(affected), snap, affected))
        if not choices:
            return None
        _, snap, affected = min(choices, key=lambda c: c[0])
        return snap, affected

    def add(self, snapshot: Snapshot) -> None:
        snapshots = [snapshot.data, *(s.data for s in self.load())][:SNAPSHOTS]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(snapshots))
        tmp.replace(self.path)


def rebased(root: Path, previous: Snapshot, fresh: Snapshot) -> Snapshot:
    """``previous`` with the rerun tests taken from ``fresh``, every hash as the tree is now."""
    tests = {**previous.data["tests"], **fresh.data["tests"]}
    global_deps = sorted({tuple(x) for x in previous.data["global"]} | {tuple(x) for x in fresh.data["global"]})
    rels = {rel for test in tests.values() for rel, _ in test["deps"]} | {rel for rel, _ in global_deps}
    files, hashes, modules = {}, {}, {}
    for rel in sorted(rels):
        files[rel] = file_digest(root / rel)
        try:
            index = code_index((root / rel).read_text(encoding="utf-8", errors="replace"))
        except (OSError, SyntaxError, ValueError):
            continue
        hashes[rel], modules[rel] = index.hashes, index.module
    return Snapshot({"files": files, "hashes": hashes, "modules": modules, "tests": tests,
                     "global": [list(x) for x in global_deps], "returncode": fresh.data.get("returncode")})
