"""``patchkit verify``: run the gates of ``checks/`` over a patched tree and collect their findings.

Every selected gate runs, in registry order, even when an earlier one fails. A gate that raises is
a *crash* (status ``crash``, traceback kept), distinct from a gate that reports findings (``fail``).
Exit code: 0 when every gate passed, 1 when a gate reported an error finding, 3 when a gate crashed.
Warnings and info findings are reported but do not fail a gate.
"""

from __future__ import annotations

import enum
import os
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from patchkit import tomlfile
from patchkit.errors import EXIT_FAILED, EXIT_INTERNAL, EXIT_OK, BadInput, PatchkitError
from patchkit.patchset.base import locate
from patchkit.results import CommandResult
from patchkit.verify.api import Finding, Severity, VerifyContext

MANIFEST = "manifest.toml"


class GateStatus(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    CRASH = "crash"


@dataclass(frozen=True)
class GateRun:
    """One gate's outcome."""

    gate: str
    status: GateStatus
    seconds: float
    findings: tuple[Finding, ...]
    traceback: str | None = None  # set when status is crash

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.severity == severity)


@dataclass(frozen=True)
class VerifyResult(CommandResult):
    """What ``patchkit verify`` found; ``exit_code`` is 3 on a crash, 1 on findings, 0 when clean."""

    target: str
    set_dir: str
    touched: tuple[str, ...]
    gates: tuple[GateRun, ...]
    seconds: float
    unavailable: tuple[str, ...] = ()  # registered gates whose module is missing from this checkout
    junit: str | None = None

    @property
    def exit_code(self) -> int:
        if any(run.status == GateStatus.CRASH for run in self.gates):
            return EXIT_INTERNAL
        return EXIT_OK if self.ok else EXIT_FAILED

    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for run in self.gates for f in run.findings)


# ---------------------------------------------------------------- running gates


def gate_status(findings: Sequence[Finding]) -> GateStatus:
    return GateStatus.FAIL if any(f.severity == Severity.ERROR for f in findings) else GateStatus.PASS


def finding_from_error(gate: str, error: PatchkitError) -> Finding:
    """A gate refusing its input (say a malformed ``[verify.*]`` table) fails; it did not crash."""
    where = error.location
    return Finding(gate, Severity.ERROR, where.file if where else MANIFEST, where.line if where else None,
                   error.message, error.hint)


def run_gate(name: str, load: Any, ctx: VerifyContext) -> GateRun:
    """Run one gate; any exception other than Ctrl-C becomes a crash with its traceback."""
    start = time.perf_counter()
    try:
        module: ModuleType = load(name)
        findings = list(module.run(ctx))
        bad = [f for f in findings if not isinstance(f, Finding)]
        if bad:
            raise TypeError(f"gate {name} returned {type(bad[0]).__name__}, not Finding")
    except PatchkitError as error:
        findings = [finding_from_error(name, error)]
    except Exception:
        return GateRun(name, GateStatus.CRASH, time.perf_counter() - start, (), traceback.format_exc())
    return GateRun(name, gate_status(findings), time.perf_counter() - start, tuple(findings))


def select_gates(registered: Iterable[str], wanted: Sequence[str]) -> list[str]:
    """The wanted gates in registry order (all when none are named); unknown names are bad input."""
    order = list(registered)
    unknown = [name for name in wanted if name not in order]
    if unknown:
        raise BadInput(f"unknown gate {unknown[0]!r}", hint=f"choose from: {', '.join(order)}")
    return [name for name in order if not wanted or name in wanted]


def run_gates(ctx: VerifyContext, wanted: Sequence[str] = (), gates: Mapping[str, ModuleType] | None = None) -> tuple[GateRun, ...]:
    """Run the selected gates of ``gates`` (default: the registry) in order; every one runs."""
    if gates is None:
        from checks.registry import GATES as gates
    names = select_gates(gates, wanted)
    return tuple(run_gate(name, gates.__getitem__, ctx) for name in names)


# ---------------------------------------------------------------- building the context


def patchkit_home() -> Path:
    """Where patchkit keeps trees, caches and environments (``$PATCHKIT_HOME``, default ``.patchkit``)."""
    return Path(os.environ.get("PATCHKIT_HOME", ".patchkit"))


def load_manifest(set_dir: Path) -> dict[str, Any]:
    """The parsed ``manifest.toml`` of a set; a missing or malformed file is bad input naming the line."""
    return tomlfile.load(set_dir / MANIFEST, f"no {MANIFEST} in {set_dir}", "fix the manifest and run again")


def touched_files(root: Path) -> tuple[str, ...]:
    """Tree-relative files that differ from the tree's base (its root commit), deletions excluded.

    Compares the working tree with the base, so both applied commits and uncommitted edits count,
    plus untracked files that git does not ignore. (Kept in one function so that it can switch to the
    core's git module and base marker.)
    """
    import git  # gitpython

    try:
        repo = git.Repo(root)
        roots = repo.git.rev_list("--max-parents=0", "HEAD").split()
    except (git.exc.GitError, ValueError) as error:
        raise BadInput(f"{root} is not a git tree with a base commit ({error.__class__.__name__})",
                       hint="pass --target with a tree made by patchkit apply") from None
    changed = repo.git.diff("--name-only", "--no-renames", "--diff-filter=d", "-z", roots[-1]).split("\0")
    untracked = [p for p in repo.untracked_files if "__pycache__/" not in p and not p.endswith(".pyc")]
    return tuple(sorted({p for p in changed if p} | set(untracked)))


def build_context(set_dir: Path | None, target: Path | None) -> VerifyContext:
    """Resolve defaults, parse the manifest, find the touched files."""
    set_dir, root = locate(set_dir, target)  # defaults: newest set, the tree `patchkit apply` made
    set_dir, root = set_dir.resolve(), root.resolve()
    manifest = load_manifest(set_dir)
    if not root.is_dir():
        raise BadInput(f"target {root} does not exist", hint="run patchkit apply first, or pass --target")
    home = patchkit_home().resolve()
    return VerifyContext(root=root, set_dir=set_dir, manifest=manifest, touched=touched_files(root),
                         cache_dir=home / "cache" / "verify", env_dir=home / "envs")


# ---------------------------------------------------------------- the command


def verify(set_dir: Path | None = None, target: Path | None = None, gates: Sequence[str] = (),
           junit: Path | None = None, each_prefix: bool = False) -> VerifyResult:
    """The core of ``patchkit verify``: run the selected gates and optionally write a JUnit report.
    ``each_prefix`` adds the bisectability check (checks/prefixes.py) as one more gate row."""
    from checks.registry import GATES, unavailable

    start = time.perf_counter()
    select_gates(GATES, gates)  # refuse unknown names before any work
    ctx = build_context(set_dir, target)
    runs = run_gates(ctx, gates, GATES)
    if each_prefix:
        from checks import prefixes  # opt-in, not registered: a set need not be bisectable to pass

        runs += (run_gate(prefixes.NAME, lambda _name: prefixes, ctx),)
    ok = all(run.status == GateStatus.PASS for run in runs)
    result = VerifyResult("verify", ok, str(ctx.root), str(ctx.set_dir), ctx.touched, runs,
                          time.perf_counter() - start, unavailable(), str(junit) if junit else None)
    if junit:
        from patchkit.verify.junit import write_junit

        write_junit(result, junit)
    return result


@dataclass(frozen=True)
class DispatchSitesResult(CommandResult):
    """``patchkit dispatch-sites``: the declarations file rewritten for the tree's current sites."""

    path: Path
    kept: int
    added: int  # new sites, written with an empty treatment: the gate fails until they are reviewed
    dropped: tuple[str, ...]  # declarations whose site no longer exists


def update_dispatch_declarations(set_dir: Path | None, target: Path | None) -> DispatchSitesResult:
    from checks.dispatch import write_declarations  # lazy: the gate modules load libcst

    update = write_declarations(build_context(set_dir, target))
    # ok only when nothing is left to review, so a CI step running this also flags new sites
    return DispatchSitesResult("dispatch-sites", update.added == 0, update.path, update.kept, update.added,
                               update.dropped)


@dataclass(frozen=True)
class SymbolsResult(CommandResult):
    """``patchkit symbols``: every name of the manifest's symbol family, with where it is defined,
    imported and used (the semantic version of grepping for the family)."""

    family: str
    symbols: tuple[Any, ...]  # checks.xref.Symbol


def symbol_table(set_dir: Path | None, target: Path | None) -> SymbolsResult:
    from checks import xref  # lazy: the gate modules load libcst

    ctx = build_context(set_dir, target)
    family = ctx.gate_config("xref").get("family", "")
    return SymbolsResult("symbols", True, family, tuple(xref.symbols(ctx)))
