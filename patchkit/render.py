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
