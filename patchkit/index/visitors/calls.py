"""Calls: the family's calls with their argument shape, every call that names keywords, the classes
``isinstance`` narrows a value to, and ``setattr``/``vars`` on ``self`` (what they assign, or that the
class's attributes cannot be known)."""

from __future__ import annotations

import ast
from typing import ClassVar

from patchkit.index.syntax import dotted, isinstance_classes, receiver_call_text, string_value
from patchkit.index.walk import Visitor


class Calls(Visitor):
    HANDLES: ClassVar[dict[type, str]] = {ast.Call: "on_call"}

    def on_call(self, node: ast.Call) -> None:
        walk = self.walk
        callee = dotted(node.func)
        self._keyword_call(node, callee)
        if callee in ("setattr", "vars") and node.args and dotted(node.args[0]) == "self" and walk.current_class:
            self._dynamic_self(node, callee)
        if callee == "isinstance" and len(node.args) == 2:
            self._narrowing(node)
        if callee is None or not walk.family.search(callee):
            return
        walk.facts["calls"].append({
            "callee": callee,
            "npos": sum(1 for a in node.args if not isinstance(a, ast.Starred)),
            "star": any(isinstance(a, ast.Starred) for a in node.args),
            "dstar": any(k.arg is None for k in node.keywords),
            "kw": [k.arg for k in node.keywords if k.arg is not None],
            "kw_lines": {k.arg: k.lineno for k in node.keywords if k.arg is not None},
            "line": node.lineno,
            "scope": walk.qualname,
            "cls": walk.current_class,
        })

    def _keyword_call(self, node: ast.Call, callee: str | None) -> None:
        """Every call that names keywords (xref checks those that set fields of a known class)."""
        keywords = {k.arg: k.lineno for k in node.keywords if k.arg is not None}
        text = callee or receiver_call_text(node.func)
        if not keywords or text is None:
            return
        first = node.args[0] if node.args and not isinstance(node.args[0], ast.Starred) else None
        self.walk.facts["kwcalls"].append({"callee": text, "first": dotted(first) if first is not None else None,
                                           "kw": keywords, "line": node.lineno, "scope": self.walk.qualname,
                                           "cls": self.walk.current_class})

    def _narrowing(self, node: ast.Call) -> None:
        """``isinstance(x, T)`` anywhere in a function: from that line on, ``x`` may be a ``T`` (the
        xref gate takes T as a possible type besides the declared one; it never tracks the branch)."""
        function = self.walk.function()
        subject = dotted(node.args[0])
        if function is not None and subject is not None:
            function["narrowed"].setdefault(subject, []).append([node.lineno, isinstance_classes(node.args[1])])

    def _dynamic_self(self, node: ast.Call, callee: str) -> None:
        """``setattr(self, name, v)`` assigns ``name`` when it is a literal (or a loop over literals);
        any other name, or ``vars(self)``, makes the class's attributes unknowable."""
        cls = self.walk.facts["classes"][self.walk.current_class]
        name = node.args[1] if callee == "setattr" and len(node.args) > 1 else None
        literal = string_value(name)
        function = self.walk.function()
        names = [literal] if literal is not None else (
            function["loop_strings"].get(name.id) if function is not None and isinstance(name, ast.Name) else None)
        if names:
            cls["self_assigned"].extend(names)
        else:
            cls["dynamic_self"] = True
