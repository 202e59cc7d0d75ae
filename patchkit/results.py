"""Typed results of commands. Each command's core function returns one of these (or raises).

A result is a frozen dataclass with ``command`` and ``ok``; :mod:`patchkit.render` prints it for
people (rich) or as the versioned ``--json`` envelope. Subclasses add their own fields; everything in
them must be JSON-serialisable through :func:`to_jsonable` (dataclasses, paths, enums, tuples).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from patchkit.errors import EXIT_FAILED, EXIT_OK


@dataclass(frozen=True)
class CommandResult:
    command: str
    ok: bool

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILED

    def payload(self) -> dict[str, Any]:
        """The command-specific part of the JSON envelope."""
        data: dict[str, Any] = to_jsonable(self)
        data.pop("command", None)
        data.pop("ok", None)
        return data


def to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    return value
