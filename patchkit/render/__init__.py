"""The only package that prints results and the only importer of rich: rich for people, a versioned
JSON envelope for machines.

stdout carries the result, stderr the progress (spinners, streamed gate rows) and errors, so
``patchkit ... > file`` keeps only the result and ``--json`` output is one document. When stdout is
not a terminal, tables are drawn in plain ASCII and lines are not wrapped at 80 columns.

Human renderers live in one module per area of patchkit, named after the package of the result type
(``patchkit.patchset.apply.ApplyResult`` -> :mod:`patchkit.render.patchset`), each registering its
renderers with ``@human.register``. Only the area a command needs is imported, when it needs it; a
result whose area has no module gets the fallback table.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import singledispatch
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from patchkit import JSON_SCHEMA_VERSION
from patchkit.error_handler import reader_gone
from patchkit.errors import PatchkitError
from patchkit.results import CommandResult, to_jsonable

#: --quiet, the default, --verbose.
QUIET, NORMAL, VERBOSE = -1, 0, 1


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader went away (``| head -1``): print no more, but let the command finish with its own
        exit code (rich's default exits 1, which means "failed" or "drift" here)."""
        self.quiet = True
        reader_gone(self.file)


def _console(stream: str) -> Console:
    file = getattr(sys, stream)
    terminal = hasattr(file, "isatty") and file.isatty()
    width = None if terminal else int(os.environ.get("COLUMNS") or 200)  # logs: no wrapping at 80 columns
    return _Console(stderr=stream == "stderr", highlight=False, soft_wrap=True, width=width)


class _Consoles:
    """The two consoles, made on first use: tests and ``CliRunner`` swap ``sys.stdout`` between calls."""

    def __init__(self) -> None:
        self._made: dict[tuple[str, int], Console] = {}

    def get(self, stream: str) -> Console:
        key = (stream, id(getattr(sys, stream)))
        if key not in self._made:
            self._made = {k: v for k, v in self._made.items() if k[0] != stream}
            self._made[key] = _console(stream)
        return self._made[key]


_consoles = _Consoles()


def out() -> Console:
    """The console for results (stdout)."""
    return _consoles.get("stdout")


def err() -> Console:
    """The console for progress and errors (stderr)."""
    return _consoles.get("stderr")


def say(text: str) -> None:
    """One line of plain text on stdout (never markup: paths and code may hold brackets)."""
    out().print(text, markup=False)


def table(*columns: str, title: str | None = None, right: tuple[str, ...] = (), show_header: bool = True) -> Table:
    """A table in rich's box style on a terminal, plain ASCII elsewhere."""
    style = box.HEAVY_HEAD if out().is_terminal else box.ASCII
    made = Table(title=title, box=style, show_header=show_header)
    for column in columns:
        made.add_column(column, justify="right" if column in right else "left")
    return made


def envelope(command: str, ok: bool, exit_code: int, **rest: Any) -> dict[str, Any]:
    """The ``--json`` envelope; tests pin its keys."""
    return {"patchkit": JSON_SCHEMA_VERSION, "command": command, "ok": ok, "exit_code": exit_code, **rest}


def _write_json(doc: dict[str, Any]) -> None:
    try:
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        reader_gone(sys.stdout)


def emit(result: CommandResult, as_json: bool, verbosity: int = NORMAL) -> None:
    """Print a command's result: the JSON envelope, or its area's human renderer."""
    if as_json:
        _write_json(envelope(result.command, result.ok, result.exit_code, result=result.payload()))
        return
    _load_area(result)
    human(result, verbosity)


def _load_area(result: CommandResult) -> None:
    """Import the render module of the result's package (``patchkit.<area>.…``), if there is one."""
    parts = type(result).__module__.split(".")
    if len(parts) > 2 and parts[0] == "patchkit":
        with contextlib.suppress(ModuleNotFoundError):
            importlib.import_module(f"patchkit.render.{parts[1]}")


def emit_error(command: str, error: PatchkitError, as_json: bool, log_path: str | None = None) -> None:
    if as_json:
        loc = error.location
        _write_json(envelope(command, False, error.exit_code, error={
            "type": type(error).__name__,
            "message": error.message,
            "hint": error.hint,
            "file": loc.file if loc else None,
            "line": loc.line if loc else None,
            "log": log_path,
        }))
    text = f"patchkit {command}: error: {error.one_line()}"
    if log_path:
        text += f"\n  details: {log_path}"
    err().print(text, markup=False)


#: Piped to a log, no stretch of a run goes longer than this without a line on stderr.
SILENCE_S = 8.0


class Heartbeat:
    """For stderr that is not a terminal (a log, CI): while something runs, a line at least every
    ``every_s`` seconds saying what it is and its latest step (pip's, pytest's counts), so a log is
    never silent for minutes. A terminal gets a live spinner instead. Use as a context manager."""

    def __init__(self, every_s: float = SILENCE_S) -> None:
        self.every_s = every_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last = self._since = time.monotonic()
        self._what = ""
        self._detail = ""
        self._thread = threading.Thread(target=self._beat, name="patchkit-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def line(self, text: str) -> None:
        with self._lock:
            err().print(text, markup=False)
            self._last = time.monotonic()

    def doing(self, what: str) -> None:
        """What runs from now on (a gate, a download); "" when nothing does."""
        with self._lock:
            self._what, self._detail, self._since = what, "", time.monotonic()

    def note(self, detail: str) -> None:
        self._detail = detail

    def _beat(self) -> None:
        while not self._stop.wait(min(0.25, self.every_s / 4)):
            now = time.monotonic()
            if self._what and now - self._last >= self.every_s:
                detail = f": {self._detail[:200]}" if self._detail else ""
                self.line(f"{self._what}, {now - self._since:.0f} s so far{detail}")


@contextlib.contextmanager
def progress(description: str, verbosity: int = NORMAL) -> Iterator[Callable[[str], None]]:
    """A transient spinner on stderr for a long step; the yielded ``update(text)`` changes its text.
    When stderr is not a terminal: a :class:`Heartbeat` line when a step runs long. Nothing with --quiet."""
    if verbosity <= QUIET:
        yield lambda text: None
        return
    if not err().is_terminal:
        with Heartbeat() as beat:
            beat.doing(f"patchkit: {description}")
            yield beat.note
        return
    from rich.markup import escape

    with err().status(escape(description)) as status:
        yield lambda text: status.update(escape(text[:160]))


def with_progress(description: str, core: Callable[[Callable[[str], None]], Any], verbosity: int = NORMAL) -> Any:
    """Run ``core(progress)`` under :func:`progress`."""
    with progress(description, verbosity) as update:
        return core(update)


@singledispatch
def human(result: CommandResult, verbosity: int = NORMAL) -> None:
    """Fallback: a two-column table of the result's fields."""
    shown = table("field", "value", title=f"patchkit {result.command}", show_header=False)
    for key, value in to_jsonable(result).items():
        shown.add_row(str(key), json.dumps(value) if isinstance(value, (dict, list)) else str(value))
    out().print(shown)
