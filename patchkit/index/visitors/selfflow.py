"""The order of a method's ``self.X`` reads and writes: where in the function's blocks each happens,
so that xref can tell a read that runs before any assignment of X on its path (a lazily set
attribute that ``__init__`` never initialises) from one that follows an assignment.

Per function, ``self_flow`` holds ``[kind, attr, line, path, lift]``:

- ``kind``: ``load`` (``self.X`` read, called or used as a value; an augmented assignment reads
  first), ``store`` (``self.X = ...``, ``self.X: T`` with or without a value, a ``for``/``with`` target,
  ``setattr(self, "X", ...)``), ``guard`` (``hasattr(self, "X")``, ``getattr(self, "X", ...)``: the
  function checks for X, so its reads are guarded) or ``safe`` (a read inside a ``try`` that catches
  ``AttributeError``, or inside a ``lambda`` or a class body, which runs later or elsewhere);
- ``path``: the statement the event is in, as ``field:index`` steps from the function's body down
  (``["body:3", "orelse:0"]``: the first statement of the ``else`` of the function's fourth statement);
- ``lift``: how many of the last steps are blocks that always run once their statement starts
  (a ``with`` body, a ``try`` body or its ``finally``): an assignment there has happened by the end
  of the enclosing statement too.
"""

from __future__ import annotations

import ast
from typing import Any, ClassVar

from patchkit.index.syntax import dotted, string_value
from patchkit.index.walk import Visitor

_BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")
_CATCHES_ATTRIBUTE_ERROR = frozenset({"AttributeError", "Exception", "BaseException", "builtins.AttributeError"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_TRY = tuple(t for t in (ast.Try, getattr(ast, "TryStar", None)) if t is not None)


def _catches_attribute_error(node: ast.AST) -> bool:
    for handler in getattr(node, "handlers", []):
        if handler.type is None:
            return True
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(dotted(t) in _CATCHES_ATTRIBUTE_ERROR for t in types):
            return True
    return False


def _transparent(parent: ast.AST, field: str) -> bool:
    """A block that runs whenever its statement starts (an exception aside)."""
    if isinstance(parent, (ast.With, ast.AsyncWith)):
        return field == "body"
    return isinstance(parent, _TRY) and field in ("body", "finalbody")


class SelfFlow(Visitor):
    HANDLES: ClassVar[dict[type, str]] = {ast.Attribute: "on_attribute", ast.Call: "on_call"}

    def _record(self, kind: str, attr: str, node: ast.AST) -> None:
        function = self.walk.function()
        if function is None or self.walk.current_class is None:
            return  # methods and the functions nested in them (whose reads xref leaves alone)
        place = self._place(node)
        if place is None:
            return
        path, lift, safe = place
        if safe and kind == "load":
            kind = "safe"
        function.setdefault("self_flow", []).append([kind, attr, getattr(node, "lineno", 0), path, lift])

    def _place(self, node: ast.AST) -> tuple[list[str], int, bool] | None:
        """The statement path of ``node`` inside its function, the transparent tail, and whether a
        read there is guarded (a ``try`` catching AttributeError, a ``lambda``, a class body)."""
        parents = self.walk.parents
        steps: list[tuple[str, bool]] = []
        safe = False
        child, parent = node, parents.get(id(node))
        while parent is not None:
            if isinstance(parent, (ast.Lambda, ast.ClassDef)):
                safe = True
            for field in _BLOCK_FIELDS:
                block = getattr(parent, field, None)
                index = next((i for i, item in enumerate(block) if item is child), None) \
                    if isinstance(block, list) else None
                if index is not None:
                    steps.append((f"{field}:{index}", _transparent(parent, field)))
                    if isinstance(parent, _TRY) and field == "body" and _catches_attribute_error(parent):
                        safe = True
                    break
            if isinstance(parent, _FUNCTIONS):
                break
            child, parent = parent, parents.get(id(parent))
        if parent is None:
            return None
        steps.reverse()
        lift = 0
        for _step, transparent in reversed(steps):
            if not transparent:
                break
            lift += 1
        return [step for step, _ in steps], lift, safe

    def on_attribute(self, node: ast.Attribute) -> None:
        if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
            return
        if isinstance(node.ctx, ast.Load):
            self._record("load", node.attr, node)
        elif isinstance(node.ctx, ast.Store):
            parent = self.walk.parents.get(id(node))
            if isinstance(parent, ast.AugAssign) and parent.target is node:
                self._record("load", node.attr, node)
            self._record("store", node.attr, node)

    def on_call(self, node: ast.Call) -> None:
        callee = dotted(node.func)
        if callee not in ("hasattr", "getattr", "setattr") or len(node.args) < 2:
            return
        if dotted(node.args[0]) != "self":
            return
        name = string_value(node.args[1])
        if name is not None:
            self._record("store" if callee == "setattr" else "guard", name, node)

    def finish(self) -> None:
        functions: dict[str, dict[str, Any]] = self.walk.facts["functions"]
        for fn in functions.values():
            fn.setdefault("self_flow", [])
