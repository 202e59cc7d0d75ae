"""What a verify run produced: one gate's outcome and the whole result.

The data types the runner (:mod:`patchkit.verify.run`) builds and the JUnit writer and the renderer read;
they live below all three so that none of them imports another for a type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from patchkit.errors import EXIT_FAILED, EXIT_INTERNAL, EXIT_OK
from patchkit.results import CommandResult
from patchkit.verify.api import Finding, Severity
from patchkit.verify.target import TargetCheck

GateStatus = Literal["pass", "fail", "crash"]


@dataclass(frozen=True, kw_only=True)
class GateRun:
    """One gate's outcome."""

    gate: str
    status: GateStatus
    seconds: float
    findings: tuple[Finding, ...]
    traceback: str | None = None  # set when status is crash
    reused: bool = False  # replayed from an earlier pass on the same inputs (patchkit.verify.reuse)

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.severity == severity)


@dataclass(frozen=True, kw_only=True)
class VerifyResult(CommandResult):
    """What ``patchkit verify`` found; ``exit_code`` is 3 on a crash, 1 on findings, 0 when clean."""

    target: str
    set_dir: str
    target_check: TargetCheck  # whether the target is exactly the set applied, said before any gate ran
    touched: tuple[str, ...]
    gates: tuple[GateRun, ...]
    seconds: float
    junit: str | None = None

    @property
    def exit_code(self) -> int:
        if any(run.status == "crash" for run in self.gates):
            return EXIT_INTERNAL
        return EXIT_OK if self.ok else EXIT_FAILED

    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for run in self.gates for f in run.findings)
