"""Probe-side helper (standard library only; probes import it by path): record which lines of the
tree's touched files run while a call executes, so a failing check can name the added line behind it,
(:class:`Provenance`) which line produced the value a watched attribute last received, and
(:class:`ImportLog`) every tree file the run tried to import, for the cache of its result."""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any


def code_key(code: Any) -> str:
    """A code object's identity across processes: file, first line and name."""
    return f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}"


class Provenance:
    """Where the value each watched attribute last received was produced.

    A value's origin is the line that made it: the ``return`` of the innermost traced function that
    returned that very object up a chain of traced calls (``return "fa3"`` in a helper, returned on by
    its callers, stored by ``self.attention_backend = self._default(...)`` in base code), else the
    line that stores it (a literal or an expression computed there). The chain is followed through
    the traced files only and within one statement of each frame: a value that went through a local
    variable, or through an untraced file, originates at the line that stored or returned it last.

    ``returned`` is fed by :func:`lines_run`'s tracer, ``stored`` by :meth:`watching`'s attribute
    hook; :attr:`origins` maps each watched attribute to ``[file, line, value]`` (file and line None
    when the last write came from outside the traced files)."""

    def __init__(self, watched: Iterable[str], files: Iterable[str]):
        self.watched = frozenset(watched)
        self.files = frozenset(files)
        self.origins: dict[str, list[Any]] = {}
        # id(frame) -> (frame, value, line the frame was on, origin file, origin line): the last value a
        # traced callee returned into that frame. The frame is held so that its id is not reused.
        self._into: dict[int, tuple[Any, Any, int, str, int]] = {}

    def statement(self, file: str, line: int) -> int:
        """The first line of the innermost statement holding ``line`` (a compound statement owns its
        header lines only), so two lines of one multi-line statement compare equal."""
        starts = _STATEMENTS.get(file)
        if starts is None:
            starts = _STATEMENTS[file] = _statement_starts(file)
        return starts.get(line, line)

    def _received(self, frame: Any, value: Any) -> tuple[str, int] | None:
        """The origin of ``value`` if a traced callee returned it into ``frame`` in its current statement."""
        entry = self._into.get(id(frame))
        if entry is None or entry[0] is not frame or entry[1] is not value:
            return None
        file = frame.f_code.co_filename
        if self.statement(file, entry[2]) != self.statement(file, frame.f_lineno):
            return None
        return entry[3], entry[4]

    def returned(self, frame: Any, value: Any) -> None:
        """A traced frame returns ``value``: pass the value's origin to its caller when the caller is traced."""
        origin = self._received(frame, value) or (frame.f_code.co_filename, frame.f_lineno)
        self._into.pop(id(frame), None)  # the frame is done
        caller = frame.f_back
        if caller is not None and caller.f_code.co_filename in self.files:
            self._into[id(caller)] = (caller, value, caller.f_lineno, origin[0], origin[1])

    def stored(self, frame: Any, name: str, value: Any) -> None:
        """``frame`` stores ``value`` into the watched attribute ``name``."""
        file = frame.f_code.co_filename if frame is not None else None
        origin: tuple[str | None, int | None] = (None, None)
        if file in self.files:
            origin = self._received(frame, value) or (file, frame.f_lineno)
        shown = value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
        self.origins[name] = [origin[0], origin[1], shown]

    @contextmanager
    def watching(self, cls: type) -> Iterator[None]:
        """Record writes of the watched attributes on instances of ``cls`` (through its own
        ``__setattr__`` when it has one). A class that refuses the hook is simply not watched."""
        own = cls.__dict__.get("__setattr__")
        write = getattr(cls, "__setattr__")  # noqa: B009 - the inherited one when cls has none
        provenance = self

        def recording(obj: Any, name: str, value: Any) -> None:
            if name in provenance.watched:
                provenance.stored(sys._getframe(1), name, value)
            write(obj, name, value)

        try:
            type.__setattr__(cls, "__setattr__", recording)
        except (TypeError, AttributeError):
            yield
            return
        try:
            yield
        finally:
            if own is None:
                type.__delattr__(cls, "__setattr__")
            else:
                type.__setattr__(cls, "__setattr__", own)
            self._into.clear()


#: Per file, each line's statement start; parsed once per process (the probe resolves many cases).
_STATEMENTS: dict[str, dict[int, int]] = {}


def _statement_starts(file: str) -> dict[int, int]:
    try:
        with open(file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    starts: dict[int, int] = {}
    for node in ast.walk(tree):  # outer statements first: inner ones overwrite their own lines
        if isinstance(node, ast.stmt):
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                starts[line] = node.lineno
    return starts


@contextmanager
def lines_run(files: Mapping[str, set[int] | None] | set[str],
              provenance: Provenance | None = None) -> Iterator[list[tuple[str, int, str]]]:
    """Collect (file, line, function) for every line executed in ``files`` (absolute paths; with a
    dict, only its lines of each file: the added ones), in order, once each; ``function`` is
    :func:`code_key` of the code object the line belongs to. With ``provenance``, every return of a
    frame in ``files`` is reported to it."""
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
        elif event == "return" and provenance is not None:
            provenance.returned(frame, arg)
        return local

    def start(frame: Any, event: str, arg: Any) -> Callable[..., Any] | None:
        return local if frame.f_code.co_filename in wanted else None

    previous = sys.gettrace()
    sys.settrace(start)
    try:
        yield order
    finally:
        sys.settrace(previous)


class ImportLog:
    """Every file under ``prefix`` the import system located while the log is installed
    (:meth:`install`), whether its import then succeeded or not.

    What a run read through imports is what a cache of its result must be keyed on. ``sys.modules``
    alone misses exactly the files behind a failure: a module whose code raises, or that does not
    compile, is removed from it again, so a result cached with the modules that loaded would stay
    valid after that file is fixed (issue 37: a stale IndentationError). The log sits first on
    ``sys.meta_path`` and asks the finders after it, as the import system would, noting where each
    spec it returns lies; ``seen`` (when given) hears each file as it is located."""

    def __init__(self, prefix: str, seen: Callable[[str], None] | None = None):
        self.prefix = os.path.abspath(prefix) + os.sep
        self.files: set[str] = set()
        self.seen = seen

    def install(self) -> ImportLog:
        sys.meta_path.insert(0, self)
        return self

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            try:
                spec = find(name, path, target)
            except TypeError:  # an older finder without the target parameter
                spec = find(name, path)
            if spec is not None:
                origin = spec.origin if getattr(spec, "has_location", False) else None
                if origin and os.path.abspath(origin).startswith(self.prefix):
                    self.files.add(origin)
                    if self.seen is not None:
                        self.seen(origin)
                return spec
        return None

    def tree_files(self) -> list[str]:
        """The files located (loaded or not) and every tree module still loaded, sorted."""
        loaded = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
        found = {f for f in loaded if f and os.path.abspath(f).startswith(self.prefix)} | self.files
        return sorted(found)
