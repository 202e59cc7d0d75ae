"""Host side of a probe: run it in the isolated interpreter, read its rows, cache them by the tree
files it actually imported, and trace a failure back to an added line."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from patchkit import proc
from patchkit.errors import BadInput, Location
from patchkit.verify.api import VerifyContext
from patchkit.verify.envs import verify_interpreter

MARKER = "=== patchkit probe rows ==="
_WORD = re.compile(r"[A-Za-z_]\w{2,}")
_NOT_TOKENS = frozenset({"self", "result", "error", "None", "True", "False", "not", "and", "the", "type", "str",
                         "len", "isinstance", "name", "__name__", "call_args", "call_count"})


def interpreter(ctx: VerifyContext, gate: str) -> str:
    override = os.environ.get("PATCHKIT_VERIFY_PYTHON")
    if override:
        return override
    if ctx.gate_config(gate).get("interpreter") == "current":
        return sys.executable  # only for self-contained example trees that need nothing installed
    return verify_interpreter(ctx).python


def source_root(ctx: VerifyContext) -> str:
    return str(ctx.manifest.verify.get("source_root", "python"))


def file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def folder_digest(folder: Path | None) -> str | None:
    """Content hash of a stub folder, so editing a stub invalidates cached rows."""
    if folder is None or not folder.is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(folder)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


#: The probe-side helpers every probe runs with (by path, in the isolated interpreter).
TRACING = Path(__file__).parent / "tracing.py"


def probe_code(probe: Path) -> str:
    """Hash of the code a probe runs: the probe and the helpers it imports by path. Part of a probe
    cache's key, so a changed probe or helper never serves rows the old code computed."""
    return hashlib.sha256(probe.read_bytes() + b"\0" + TRACING.read_bytes()).hexdigest()


def python_names(root: Path, base: str) -> str:
    """Hash of the tree's Python file NAMES: a module appearing or vanishing can change any import."""
    names = []
    for dirpath, dirnames, filenames in os.walk(root / base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel = os.path.relpath(dirpath, root)
        names += [os.path.join(rel, f) for f in sorted(filenames) if f.endswith(".py")]
    return hashlib.sha256("\n".join(names).encode()).hexdigest()


class DependencyCache:
    """Rows cached per request key, valid while every tree file the probe tried to import is unchanged.

    The probe reports the tree files its imports located (``deps``: those that loaded and those whose
    import failed, :class:`~patchkit.checks._probe.tracing.ImportLog`); a cached entry is reused when the
    request key matches and each of those files still hashes the same, so an edit of a file the probe
    never imports does not start the interpreter again, and the fix of a file whose import failed
    runs it again. The key holds what else the rows depend on: the request, the interpreter, the
    probe's code (:func:`probe_code`), the stubs and the names of the tree's Python files (a module
    appearing or vanishing changes what an import finds)."""

    def __init__(self, cache_dir: Path, gate: str, key: str):
        self.path = cache_dir / gate / f"{key}.json"

    def get(self, root: Path) -> list[dict[str, Any]] | None:
        if not self.path.is_file():
            return None
        try:
            entries = json.loads(self.path.read_text())
        except ValueError:
            return None
        for entry in entries:
            if all(file_digest(root / rel) == sha for rel, sha in entry["deps"].items()):
                return list(entry["rows"])
        return None

    def put(self, root: Path, deps: Iterable[str], rows: list[dict[str, Any]]) -> None:
        entries: list[dict[str, Any]] = []
        if self.path.is_file():
            try:
                entries = json.loads(self.path.read_text())
            except ValueError:
                entries = []
        digests = {rel: file_digest(root / rel) for rel in sorted(set(deps))}
        entries = [{"deps": digests, "rows": rows}, *entries][:8]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries))
        tmp.replace(self.path)


def run_probe(ctx: VerifyContext, gate: str, probe: Path, request: dict[str, Any], timeout: float,
              failure_file: str) -> dict[str, Any]:
    """Run ``probe`` with ``request`` on stdin in the gate's interpreter; its payload (after the marker)."""
    python = interpreter(ctx, gate)
    done = proc.run([python, str(probe)], input=json.dumps(request), timeout=timeout,
                    env={"PYTHONDONTWRITEBYTECODE": "1"}, cwd=ctx.root, check=False)
    payload = json.loads(done.stdout.split(MARKER, 1)[1]) if MARKER in done.stdout else {}
    if "rows" not in payload:
        detail = payload.get("import_error") or done.stderr[-2000:] or done.stdout[-2000:]
        raise BadInput(f"the {gate} probe could not run in {python}: {str(detail).strip()}",
                       location=Location(failure_file),
                       hint="check the isolated environment ([verify.env]) and the tree")
    return dict(payload)


def tree_relative(ctx: VerifyContext, path: str) -> str | None:
    root = str(ctx.root.resolve()) + "/"
    return path[len(root):] if path.startswith(root) else None


def tokens_of(*texts: str) -> set[str]:
    """Identifiers worth matching against source lines (``custom_mask``, ``return_logprob``, ...)."""
    return {w for text in texts for w in _WORD.findall(text or "") if w not in _NOT_TOKENS}


def trace_back(ctx: VerifyContext, executed: Iterable[Sequence[Any]], added: Mapping[str, frozenset[int]],
               tokens: set[str], function: str | None = None, raised_at: Sequence[Any] | None = None,
               passing: Iterable[Sequence[Any]] = (),
               ) -> tuple[str, int] | None:
    """The added line a failing check most likely comes from, of the added lines that ran
    (``executed``: (file, line, code key) in order):

    1. a ``raise`` at an added line: the condition that led to it (the line that ran just before it in
       the same function); any other error at an added line: that line;
    2. in the probed ``function`` itself, of the lines no passing check of the same function ran
       (``passing``: their executed lines; the branch only the failing check took): the last one
       mentioning a token of the failure (a field name, a value), else the first (where the failing
       path left the passing ones);
    3. in the probed ``function``: the last line mentioning a token, else its last added line that
       ran (the function returned something wrong);
    4. anywhere: the last line mentioning a token, else the last added line that ran.
    """
    sources: dict[str, list[str]] = {}

    def text(rel: str, line: int) -> str:
        lines = sources.setdefault(rel, (ctx.root / rel).read_text(errors="replace").splitlines())
        return lines[line - 1] if 0 < line <= len(lines) else ""

    ran = [(rel, int(row[1]), row[2] if len(row) > 2 else None) for row in executed
           if (rel := tree_relative(ctx, row[0])) is not None and int(row[1]) in added.get(rel, frozenset())]
    if raised_at:
        rel = tree_relative(ctx, raised_at[0])
        if rel is not None and int(raised_at[1]) in added.get(rel, frozenset()):
            line = int(raised_at[1])
            if text(rel, line).lstrip().startswith("raise"):
                before = [r for r in ran if r[0] == rel and r[2] == raised_at[2] and r[1] < line]
                if before:
                    return before[-1][0], before[-1][1]
            return rel, line

    def mentions(rel: str, line: int) -> bool:
        return bool(set(_WORD.findall(text(rel, line))) & tokens)

    own = [r for r in ran if function is not None and r[2] == function]
    others = {(rel, int(row[1])) for row in passing if (rel := tree_relative(ctx, row[0])) is not None}
    apart = [r for r in own if (r[0], r[1]) not in others] if others else []
    hits = [r for r in apart if mentions(r[0], r[1])]
    if hits:
        return hits[-1][0], hits[-1][1]
    if apart:
        return apart[0][0], apart[0][1]
    for group in (own, ran):
        hits = [r for r in group if mentions(r[0], r[1])]
        if hits:
            return hits[-1][0], hits[-1][1]
        if group:
            return group[-1][0], group[-1][1]
    return None
