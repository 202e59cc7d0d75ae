"""The only module that prints results: rich for people, a versioned JSON envelope for machines.

Add a human renderer for a new result type with ``@human.register(MyResult)``. Output is plain text
when stdout is not a terminal (rich detects that), so logs and pipes stay readable.
"""

from __future__ import annotations

import json
import sys
from functools import singledispatch
from typing import Any

from rich.console import Console
from rich.table import Table

from patchkit import JSON_SCHEMA_VERSION
from patchkit.errors import PatchkitError
from patchkit.results import CommandResult, to_jsonable

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def envelope(command: str, ok: bool, exit_code: int, **rest: Any) -> dict[str, Any]:
    """The ``--json`` envelope; tests pin its keys."""
    return {"patchkit": JSON_SCHEMA_VERSION, "command": command, "ok": ok, "exit_code": exit_code, **rest}


def emit(result: CommandResult, as_json: bool) -> None:
    if as_json:
        doc = envelope(result.command, result.ok, result.exit_code, result=result.payload())
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    else:
        human(result)


def emit_error(command: str, error: PatchkitError, as_json: bool, log_path: str | None = None) -> None:
    if as_json:
        loc = error.location
        doc = envelope(
            command,
            False,
            error.exit_code,
            error={
                "type": type(error).__name__,
                "message": error.message,
                "hint": error.hint,
                "file": loc.file if loc else None,
                "line": loc.line if loc else None,
                "log": log_path,
            },
        )
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    text = f"patchkit {command}: error: {error.one_line()}"
    if log_path:
        text += f"\n  details: {log_path}"
    stderr.print(text, markup=False)


def progress(description: str):
    """A transient spinner/progress context for long steps (download, multi-patch apply)."""
    return stderr.status(description)


@singledispatch
def human(result: CommandResult) -> None:
    """Fallback: a two-column table of the result's fields."""
    table = Table(title=f"patchkit {result.command}", show_header=False)
    for key, value in to_jsonable(result).items():
        table.add_row(str(key), json.dumps(value) if isinstance(value, (dict, list)) else str(value))
    stdout.print(table)


# ---------------------------------------------------------------- verify (gates)

from rich.markup import escape  # noqa: E402 - kept with the verify renderers it serves

_STATUS_STYLE = {"pass": "green", "fail": "red", "crash": "bold magenta"}
_SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}


def _verify_summary(result: Any) -> Table:
    table = Table(title=f"patchkit verify: {len(result.touched)} touched file(s)")
    for column in ("gate", "status", "errors", "warnings", "info", "seconds"):
        table.add_column(column, justify="right" if column in ("errors", "warnings", "info", "seconds") else "left")
    for run in result.gates:
        style = _STATUS_STYLE[run.status.value]
        counts = [str(sum(1 for f in run.findings if f.severity.value == s)) for s in ("error", "warning", "info")]
        table.add_row(run.gate, f"[{style}]{run.status.value}[/]", *counts, f"{run.seconds:.2f}")
    return table


def _verify_finding_line(finding: Any) -> str:
    """``severity gate file:line: message`` (one line per finding: grep- and editor-friendly)."""
    where = f"{finding.file}:{finding.line}" if finding.line else finding.file
    style = _SEVERITY_STYLE[finding.severity.value]
    text = f"[{style}]{finding.severity.value:<7}[/] {finding.gate:<8} {escape(where)}: {escape(finding.message)}"
    return text + (f"\n         [dim]hint: {escape(finding.hint)}[/]" if finding.hint else "")


def verify_human(result: Any) -> None:
    """Summary table, then every finding, then crash tracebacks and the closing verdict."""
    stdout.print(_verify_summary(result))
    for finding in result.findings():
        stdout.print(_verify_finding_line(finding))
    for run in result.gates:
        if run.traceback:
            stdout.print(f"[bold magenta]gate {run.gate} crashed:[/]")
            stdout.print(run.traceback.rstrip(), markup=False)
    if result.unavailable:
        stdout.print(f"[yellow]not in this checkout (not run): {', '.join(result.unavailable)}[/]")
    if result.junit:
        stdout.print(f"JUnit report: {escape(result.junit)}")
    verdict = {0: "[green]all gates passed[/]", 1: "[red]findings: verification failed[/]", 3: "[bold magenta]a gate crashed[/]"}
    stdout.print(f"{verdict.get(result.exit_code, result.exit_code)} in {result.seconds:.2f} s")


def _register_verify() -> None:
    from patchkit.verify import VerifyResult

    human.register(VerifyResult)(verify_human)


_register_verify()
