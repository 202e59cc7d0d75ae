"""``patchkit verify``: run the gates over a patched tree and collect their findings.

The runner is handed the registry (``checks.registry.GATES``, by the CLI, the composition root): it
never imports ``checks`` itself. Before any gate runs it refuses what would waste the run (an unknown
gate, a ``--junit`` path it cannot write) and states whether the target is exactly the set applied; a
target that is not is refused with the fix (``--allow-drift`` runs the gates anyway and says so).
A folder the manifest names outside the set that is missing is one ``set`` row before the gates
(:mod:`patchkit.verify.references`); the gates are told, and leave out its consequences.

Every selected gate runs, in registry order, even when an earlier one fails. A gate that raises is
a *crash* (status ``crash``, traceback kept), distinct from a gate that reports findings (``fail``).
Exit code: 0 when every gate passed, 1 when a gate reported an error finding, 3 when a gate crashed.
Warnings and info findings are reported but do not fail a gate.

Without the cache (``--no-cache``) the gates get an empty cache folder of their own, removed after
the run, and no pass is replayed: every result is computed from the inputs. With the cache, the
verdict must be the same (tests/verify/test_cache_soundness.py drives random edits through both).
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from patchkit import manifest as manifest_mod
from patchkit import paths
from patchkit.errors import BadInput, PatchkitError
from patchkit.results import CommandResult
from patchkit.verify.api import Finding, Gate, Severity, VerifyContext
from patchkit.verify.outcome import GateRun, GateStatus, VerifyResult
from patchkit.verify.reuse import GateReuse, reuse_for
from patchkit.verify.target import base_and_touched, check_target, tree_identity


class GateProgress(Protocol):
    """What the runner reports while it works (the CLI passes the renderer's live view)."""

    def note(self, text: str) -> None:
        """A slow step inside a gate (creating the environment: pip's lines)."""

    def started(self, gate: str, index: int, total: int) -> None: ...

    def finished(self, run: GateRun, index: int, total: int) -> None: ...


class _Silent:
    def note(self, text: str) -> None:
        pass

    def started(self, gate: str, index: int, total: int) -> None:
        pass

    def finished(self, run: GateRun, index: int, total: int) -> None:
        pass


# ---------------------------------------------------------------- running gates


def gate_status(findings: Sequence[Finding]) -> GateStatus:
    return "fail" if any(f.severity == Severity.ERROR for f in findings) else "pass"


def finding_from_error(gate: str, error: PatchkitError) -> Finding:
    """A gate refusing its input (say a malformed ``[verify.*]`` table) fails; it did not crash."""
    where = error.location
    return Finding(gate=gate, severity=Severity.ERROR, file=where.file if where else manifest_mod.MANIFEST_NAME,
                   line=where.line if where else None, message=error.message, hint=error.hint)


def run_gate(name: str, load: Callable[[str], Gate], ctx: VerifyContext) -> GateRun:
    """Run one gate; any exception other than Ctrl-C becomes a crash with its traceback."""
    start = time.perf_counter()
    try:
        findings = list(load(name).run(ctx))
        bad = [f for f in findings if not isinstance(f, Finding)]
        if bad:
            raise TypeError(f"gate {name} returned {type(bad[0]).__name__}, not Finding")
    except PatchkitError as error:
        findings = [finding_from_error(name, error)]
    except Exception:  # a crashing gate must not stop the others
        return GateRun(gate=name, status="crash", seconds=time.perf_counter() - start, findings=(),
                       traceback=traceback.format_exc())
    return GateRun(gate=name, status=gate_status(findings), seconds=time.perf_counter() - start,
                   findings=tuple(findings))


def select_gates(registered: Iterable[str], wanted: Sequence[str]) -> list[str]:
    """The wanted gates in registry order (all when none are named); unknown names are bad input."""
    order = list(registered)
    unknown = [name for name in wanted if name not in order]
    if unknown:
        raise BadInput(f"unknown gate {unknown[0]!r}", hint=f"choose from: {', '.join(order)}")
    return [name for name in order if not wanted or name in wanted]


def reused_run(name: str, reuse: GateReuse | None) -> GateRun | None:
    """The gate's stored pass on the same inputs, replayed (the gate module is not imported), or None."""
    start = time.perf_counter()
    findings = reuse.get(name) if reuse is not None else None
    if findings is None:
        return None
    return GateRun(gate=name, status=gate_status(findings), seconds=time.perf_counter() - start,
                   findings=findings, reused=True)


def run_gates(ctx: VerifyContext, registry: Mapping[str, Gate], wanted: Sequence[str] = (),
              progress: GateProgress | None = None, extra: Mapping[str, Gate] | None = None,
              reuse: GateReuse | None = None) -> tuple[GateRun, ...]:
    """Run the selected gates of ``registry`` in order, every one of them, then each of ``extra``
    (opt-in gates such as ``--each-prefix``), reporting each to ``progress``. With ``reuse``, a
    registered gate's stored pass on the same inputs is replayed, and a new pass stored."""
    progress = progress or _Silent()
    extra = extra or {}
    names = select_gates(registry, wanted) + list(extra)

    def load(name: str) -> Gate:
        return extra[name] if name in extra else registry[name]

    runs = []
    for index, name in enumerate(names, 1):
        progress.started(name, index, len(names))
        registered = name not in extra
        run = (reused_run(name, reuse) if registered else None) or run_gate(name, load, ctx)
        if reuse is not None and registered and not run.reused and run.status == "pass":
            reuse.put(name, run.findings)
        progress.finished(run, index, len(names))
        runs.append(run)
    return tuple(runs)


# ---------------------------------------------------------------- before the gates


def check_junit_path(junit: Path) -> None:
    """Refuse a report path that cannot be written, before minutes of gates (a real write probe)."""
    if junit.is_dir():
        raise BadInput(f"--junit {junit} is a directory", hint="pass a file path, e.g. --junit verify.xml")
    try:
        junit.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=junit.parent, prefix=".patchkit-junit-probe-"):
            pass
    except OSError as error:
        raise BadInput(f"--junit {junit} cannot be written: {error.strerror or error}",
                       hint="pass a path in a writable directory") from None


def build_context(set_dir: Path | None, target: Path | None, progress: Callable[[str], None] | None = None,
                  overrides: Mapping[str, Mapping[str, Any]] | None = None) -> VerifyContext:
    """Resolve defaults, read the manifest, find the touched files."""
    set_dir, root = (p.resolve() for p in paths.locate(set_dir, target))  # the defaults: newest set, apply's tree
    manifest = manifest_mod.load(set_dir)
    if not root.is_dir():
        raise BadInput(f"target {root} does not exist", hint="run patchkit apply first, or pass --target")
    base, touched = base_and_touched(root, manifest)
    # the per-user cache, shared by every checkout (an environment is about 2.4 GB)
    return VerifyContext(root=root, set_dir=set_dir, manifest=manifest, base_commit=base,
                         touched=touched, cache_dir=paths.verify_cache_dir().resolve(),
                         env_dir=paths.envs_dir().resolve(), progress=progress or (lambda text: None),
                         overrides=dict(overrides or {}))


def check_references(ctx: VerifyContext) -> tuple[VerifyContext, tuple[GateRun, ...]]:
    """The set's folders outside itself that are missing: one ``set`` row of findings before the gates,
    and the context that tells the gates which folders were reported (they leave out the consequences)."""
    from patchkit.verify.references import SET_CHECK, load_findings, missing_references

    missing = missing_references(ctx.set_dir, ctx.manifest)
    if not missing:
        return ctx, ()
    findings = tuple(load_findings(ctx.set_dir, ctx.manifest, missing))
    ctx = dataclasses.replace(ctx, missing_references=frozenset(ref.path for ref in missing))
    return ctx, (GateRun(gate=SET_CHECK, status="fail", seconds=0.0, findings=findings),)


@contextlib.contextmanager
def without_cache(ctx: VerifyContext) -> Iterator[VerifyContext]:
    """``ctx`` with an empty cache folder of its own, removed afterwards: every gate computes every
    result (``--no-cache``). The environments stay: they are inputs, pinned by the hash of their
    table, not results."""
    with tempfile.TemporaryDirectory(prefix="patchkit-no-cache-") as scratch:
        yield dataclasses.replace(ctx, cache_dir=Path(scratch))


# ---------------------------------------------------------------- the command


def verify(set_dir: Path | None = None, target: Path | None = None, gates: Sequence[str] = (),
           junit: Path | None = None, *, registry: Mapping[str, Gate], on_gate: GateProgress | None = None,
           allow_drift: bool = False, extra: Mapping[str, Gate] | None = None,
           reusable: frozenset[str] = frozenset(),
           overrides: Mapping[str, Mapping[str, Any]] | None = None, use_cache: bool = True) -> VerifyResult:
    """The core of ``patchkit verify``: check the target, run the selected gates (then the opt-in
    ``extra`` ones, e.g. :class:`patchkit.verify.prefixes.EachPrefix` for ``--each-prefix``), write the JUnit report.

    On a target that is exactly the set applied, the gates named in ``reusable`` replay their pass
    from an earlier run on the same inputs (:mod:`patchkit.verify.reuse`). ``overrides`` are the command
    line's settings of gates' ``[verify.<gate>]`` tables (:attr:`VerifyContext.overrides`). Without
    ``use_cache`` nothing is read from or written to the cache (:func:`without_cache`), nothing replayed."""
    start = time.perf_counter()
    select_gates(registry, gates)  # refuse unknown names before any work
    if junit:
        check_junit_path(junit)
    on_gate = on_gate or _Silent()
    ctx = build_context(set_dir, target, on_gate.note, overrides)
    target_check = check_target(ctx, allow_drift=allow_drift)
    ctx, loaded = check_references(ctx)
    with contextlib.nullcontext(ctx) if use_cache else without_cache(ctx) as ctx:
        tree = tree_identity(ctx.root) if use_cache and target_check.exact and reusable else None
        runs = (*loaded, *run_gates(ctx, registry, gates, on_gate, extra, reuse_for(ctx, reusable, tree)))
    ok = all(run.status == "pass" for run in runs)
    result = VerifyResult(command="verify", ok=ok, target=str(ctx.root), set_dir=str(ctx.set_dir),
                          target_check=target_check, touched=ctx.touched, gates=runs,
                          seconds=time.perf_counter() - start, junit=str(junit) if junit else None)
    if junit:
        from patchkit.verify.junit import write_junit

        write_junit(result, junit)
    return result


@dataclass(frozen=True, kw_only=True)
class DispatchSitesResult(CommandResult):
    """``patchkit dispatch-sites``: the declarations file rewritten for the tree's current sites."""

    path: Path
    kept: int
    added: int  # new sites, written with an empty treatment: the gate fails until they are reviewed
    dropped: tuple[str, ...]  # declarations whose site no longer exists


class DeclarationUpdate(Protocol):
    """What the dispatch gate's ``write_declarations`` returns."""

    @property
    def path(self) -> Path: ...
    @property
    def kept(self) -> int: ...
    @property
    def added(self) -> int: ...
    @property
    def dropped(self) -> tuple[str, ...]: ...


def update_dispatch_declarations(set_dir: Path | None, target: Path | None,
                                 write: Callable[[VerifyContext], DeclarationUpdate]) -> DispatchSitesResult:
    """Rewrite the set's dispatch declarations with ``write`` (the dispatch gate's, handed in by the CLI)."""
    update = write(build_context(set_dir, target))
    # ok only when nothing is left to review, so a CI step running this also flags new sites
    return DispatchSitesResult(command="dispatch-sites", ok=update.added == 0, path=update.path, kept=update.kept,
                               added=update.added, dropped=update.dropped)


@dataclass(frozen=True, kw_only=True)
class SymbolsResult(CommandResult):
    """``patchkit symbols``: every name of the manifest's symbol family, with where it is defined,
    imported and used (the semantic version of grepping for the family)."""

    family: str
    symbols: tuple[Any, ...]  # the xref gate's Symbol rows: name, kinds, defined, imported, used


def symbol_table(set_dir: Path | None, target: Path | None,
                 symbols: Callable[[VerifyContext], Sequence[Any]]) -> SymbolsResult:
    """The family's symbol table by ``symbols`` (the xref gate's, handed in by the CLI)."""
    ctx = build_context(set_dir, target)
    family = ctx.gate_config("xref").get("family", "")
    return SymbolsResult(command="symbols", ok=True, family=family, symbols=tuple(symbols(ctx)))
