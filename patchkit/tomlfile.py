"""The one TOML reader: every TOML file patchkit reads (manifests, expectations, declarations) goes
through :func:`parse`, so a syntax error is always bad input naming the file and line."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from patchkit.errors import BadInput, Location

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


def error_line(exc: tomllib.TOMLDecodeError) -> int | None:
    """The line a TOML error names (``lineno`` on Python >= 3.14, else parsed from the message)."""
    lineno = getattr(exc, "lineno", None)
    if isinstance(lineno, int) and lineno:
        return lineno
    match = re.search(r"at line (\d+)", str(exc))
    return int(match.group(1)) if match else None


def parse(text: str, path: Path | str, hint: str = "fix the file and run again") -> dict[str, Any]:
    """``text`` (the contents of ``path``) parsed; a syntax error names ``path`` and its line."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
        return data
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"invalid TOML: {exc}", location=Location(str(path), error_line(exc)), hint=hint) from None


def load(path: Path, missing: str, hint: str = "fix the file and run again") -> dict[str, Any]:
    """``path`` parsed; ``missing`` is the message when the file does not exist."""
    if not path.is_file():
        raise BadInput(missing, hint="pass --set with a patch-set directory")
    return parse(path.read_text(encoding="utf-8"), path, hint)
