"""The one exception family of patchkit and the exit codes it maps to.

Everything a user can cause raises a subclass of :class:`PatchkitError`; the CLI entry point
(:func:`patchkit.error_handler.handle_errors`) is the only place that turns them into exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1  # a patch or a check failed
EXIT_BAD_INPUT = 2  # bad input or usage: malformed patch/manifest, wrong base, unsafe path
EXIT_INTERNAL = 3  # a bug in patchkit or a crashed gate
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Location:
    """Where a problem is: a file and, when known, a 1-based line."""

    file: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


class PatchkitError(Exception):
    """Base class. ``message`` says what is wrong, ``hint`` what to do about it."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, *, hint: str | None = None, location: Location | None = None):
        Exception.__init__(self, message)  # not super(): a subclass may also be a stdlib exception
        self.message = message
        self.hint = hint
        self.location = location

    def one_line(self) -> str:
        where = f"{self.location}: " if self.location else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{where}{self.message}{hint}"


class BadInput(PatchkitError):
    """The user gave something we refuse: bad manifest or patch, wrong base, unsafe path."""

    exit_code = EXIT_BAD_INPUT


class Failed(PatchkitError):
    """A patch did not apply, the tree drifted, or a check failed."""

    exit_code = EXIT_FAILED


class Internal(PatchkitError):
    """A bug: something that should not happen."""

    exit_code = EXIT_INTERNAL


class Interrupted(PatchkitError):
    """Ctrl-C or SIGTERM; raised after cleanup has run."""

    exit_code = EXIT_INTERRUPTED


def location(path: Path | str, line: int | None = None) -> Location:
    return Location(str(path), line)
