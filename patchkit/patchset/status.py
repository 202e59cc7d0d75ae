"""``patchkit status``: base ok, which patches are applied (by commit trailer), drift.

The definitions (the base, drift, "exactly the set applied") live in :mod:`patchkit.patchset.state`;
this module is the verb: it finishes (or refuses to finish) an interrupted apply first, then reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchkit.errors import EXIT_FAILED, EXIT_OK
from patchkit.git import open_repo
from patchkit.patchset import transaction
from patchkit.patchset.series import load_set
from patchkit.patchset.state import AppliedCommit, DriftEntry, TreeState, exactness
from patchkit.results import CommandResult


# ---------------------------------------------------------------------- the status command
@dataclass(frozen=True, kw_only=True)
class StatusResult(CommandResult):
    target: str
    set: str
    base_ok: bool
    base_commit: str | None
    state: TreeState
    applied: tuple[AppliedCommit, ...]
    missing: tuple[str, ...]
    drift: tuple[DriftEntry, ...]
    journal: str | None  # what recovery did with an interrupted apply's journal, if any
    fix: str = ""  # what makes the tree exact (the commands), empty when it is

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILED


def status(set_dir: Path, target: Path) -> StatusResult:
    """Report base, applied patches and drift of ``target`` against the set."""
    pset = load_set(set_dir)
    repo = open_repo(target)
    recovered = transaction.recover_if_pending(repo, "status")
    found = exactness(repo, pset)
    return StatusResult(
        command="status",
        ok=found.exact,
        target=str(target),
        set=found.set,
        base_ok=found.base_commit is not None,
        base_commit=found.base_commit,
        state=found.state,
        applied=found.applied,
        missing=found.missing,
        drift=found.drift,
        journal=recovered,
        fix=found.fix(),
    )
