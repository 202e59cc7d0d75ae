"""Reusing a gate's whole result on a warm ``patchkit verify``.

A passing gate's findings are stored under a key of everything the gate can read, and replayed when
every part is the same: the gate is not even imported then. That is what makes a warm run a few file
reads per gate instead of re-running each gate's own (finer, per-file) caches.

The key, :func:`inputs_key`:

* the tree, by :func:`patchkit.verify.target.tree_identity`: the commit tree the work tree holds byte
  for byte (clean status, nothing untracked or ignored but ``__pycache__`` bytecode, no index entry git
  skips); only a target the exactness check found to be exactly the set applied is considered at all
  (never with ``--allow-drift``), and the target's path is part of the key (findings name it);
* the set directory, every file (manifest, patches, expectations, declarations, the set's tests),
  and every folder the manifest names outside the set (``patchkit.references``: the shared test
  packages of ``[verify.tests] shared``, ``[verify.xref] use_paths``, the stubs folder): an edit to a
  shared test misses;
* patchkit's own code (every file of the package but the bundled sets): an edited gate misses;
* the interpreter running patchkit, the environments and cache folders, every ``PATCHKIT_*``
  variable (``PATCHKIT_VERIFY_PYTHON`` picks another interpreter for the probes), and the command
  line's settings of the gates' tables (``--strict-coverage``).

Only passes are stored: a failure, a crash or a timeout is computed again every run, so nothing
transient can stick. Gates opt in by name (``checks.registry.REUSABLE``): the ones whose result is a
function of those inputs alone.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.references import outside_references
from patchkit.verify.api import Finding, Severity, VerifyContext
from patchkit.verify.cache import ResultCache, key_of, sha256_file

NAMESPACE = "gate-results"
#: Bump when the stored form of a result changes.
FORMAT = 1
_PACKAGE = Path(__file__).resolve().parents[1]


def folder_digest(folder: Path, skip: frozenset[str] = frozenset()) -> str:
    """One hash over the names and bytes of every file under ``folder`` (links followed, bytecode,
    dot-folders and the top-level names in ``skip`` left out)."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        top = Path(dirpath) == folder
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith(".")
                             and not (top and d in skip))
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(dirpath, name)
            digest.update(f"{path.relative_to(folder)}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


def code_digest() -> str:
    """patchkit's code and data (the gates included, through ``patchkit/checks``), not the bundled sets."""
    return folder_digest(_PACKAGE, frozenset({"sets"}))


def inputs_key(ctx: VerifyContext, tree: str) -> str:
    """Everything but the gate's name that a reusable gate's result depends on (see the module)."""
    set_dir = ctx.set_dir.resolve()
    outside = sorted({str((ctx.set_dir / ref.path).resolve()) for ref in outside_references(ctx.set_dir, ctx.manifest)})
    variables = sorted((k, v) for k, v in os.environ.items() if k.startswith("PATCHKIT_"))
    return key_of(NAMESPACE, FORMAT, tree, str(ctx.root), folder_digest(set_dir),
                  [(path, folder_digest(Path(path)) if Path(path).is_dir() else None) for path in outside],
                  code_digest(),
                  sys.version, sys.executable, str(ctx.env_dir), str(ctx.cache_dir), variables,
                  {gate: dict(settings) for gate, settings in sorted(ctx.overrides.items())})


def _stored(finding: Finding) -> dict[str, Any]:
    return {"gate": finding.gate, "severity": finding.severity.value, "file": finding.file, "line": finding.line,
            "message": finding.message, "hint": finding.hint}


def _finding(row: dict[str, Any]) -> Finding:
    return Finding(gate=row["gate"], severity=Severity(row["severity"]), file=row["file"], line=row["line"],
                   message=row["message"], hint=row["hint"])


@dataclass(frozen=True)
class GateReuse:
    """The passing results of the gates in ``gates`` for one set of inputs (:func:`inputs_key`)."""

    cache: ResultCache
    inputs: str
    gates: frozenset[str]

    def _key(self, gate: str) -> str:
        return key_of(self.inputs, gate)

    def get(self, gate: str) -> tuple[Finding, ...] | None:
        """The findings of the gate's stored pass, or None (not reusable, never stored, unreadable)."""
        if gate not in self.gates:
            return None
        stored = self.cache.get(self._key(gate))
        try:
            return tuple(_finding(row) for row in stored["findings"]) if stored else None
        except (KeyError, TypeError, ValueError):  # a damaged entry is a miss
            return None

    def put(self, gate: str, findings: tuple[Finding, ...]) -> None:
        if gate in self.gates and not any(f.severity == Severity.ERROR for f in findings):
            self.cache.put(self._key(gate), {"findings": [_stored(f) for f in findings]})


def reuse_for(ctx: VerifyContext, gates: frozenset[str], tree: str | None) -> GateReuse | None:
    """Reuse for ``gates`` on the tree ``tree`` (a :func:`~patchkit.verify.target.tree_identity`),
    or None when there is no such identity or nothing is reusable."""
    if tree is None or not gates:
        return None
    return GateReuse(ResultCache(ctx.cache_dir, NAMESPACE), inputs_key(ctx, tree), gates)
