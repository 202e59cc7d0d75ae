"""Probe-side helper (standard library only; probes import it by path): record which lines of the
tree's touched files run while a call executes, so a failing check can name the added line behind it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any


def code_key(code: Any) -> str:
    """A code object's identity across processes: file, first line and name."""
    return f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}"


@contextmanager
def lines_run(files: Mapping[str, set[int] | None] | set[str]) -> Iterator[list[tuple[str, int, str]]]:
    """Collect (file, line, function) for every line executed in ``files`` (absolute paths; with a
    dict, only its lines of each file: the added ones), in order, once each; ``function`` is
    :func:`code_key` of the code object the line belongs to."""
    wanted: Mapping[str, set[int] | None] = files if isinstance(files, Mapping) else dict.fromkeys(files)
    seen: set[tuple[str, int]] = set()
    order: list[tuple[str, int, str]] = []

    def local(frame: Any, event: str, arg: Any) -> Callable[..., Any] | None:
        if event == "line":
            key = (frame.f_code.co_filename, frame.f_lineno)
            lines = wanted.get(key[0])
            if key not in seen and (lines is None or key[1] in lines):
                seen.add(key)
                order.append((key[0], key[1], code_key(frame.f_code)))
        return local

    def start(frame: Any, event: str, arg: Any) -> Callable[..., Any] | None:
        return local if frame.f_code.co_filename in wanted else None

    previous = sys.gettrace()
    sys.settrace(start)
    try:
        yield order
    finally:
        sys.settrace(previous)
