"""The family helpers' definitions (``is_ddtree``, the enum's ``is_*``): each return expression as a
small tree the dispatch gate evaluates per member. Read before the function's own scope opens."""

from __future__ import annotations

import ast
from typing import Any, ClassVar

from patchkit.index.syntax import dotted, normalise_expression, string_value
from patchkit.index.walk import Visitor


class Predicates(Visitor):
    HANDLES: ClassVar[dict[type, str]] = {ast.FunctionDef: "on_function", ast.AsyncFunctionDef: "on_function"}

    def on_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        walk = self.walk
        if not (node.name in walk.helpers or (walk.in_enum() and node.name.startswith("is_"))):
            return
        qual = f"{walk.qualname}.{node.name}" if walk.qualname else node.name
        cls = walk.scopes[-1].qualname if walk.class_facts() is not None else None
        body = [s for s in node.body if not (isinstance(s, ast.Expr) and string_value(s.value) is not None)]
        expr: list[Any] = ["unknown", "a body other than one return statement"]
        line = node.lineno
        if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
            expr, line = self._predicate(body[0].value), body[0].lineno
        walk.facts["predicates"][qual] = {"name": node.name, "class": cls, "expr": expr, "line": line}

    def _members_of(self, node: ast.AST) -> list[str] | None:
        """``E.X`` -> ["X"]; a tuple/list/set (or frozenset/set of one) of them -> their names."""
        if isinstance(node, ast.Call) and dotted(node.func) in ("frozenset", "set", "tuple") and len(node.args) == 1:
            return self._members_of(node.args[0])
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            names = [self._members_of(el) for el in node.elts]
            return None if any(n is None for n in names) else [x for n in names for x in n]  # type: ignore[union-attr]
        enum = self.walk.settings.enum_name
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == enum:
            return [node.attr]
        return None

    def _predicate(self, node: ast.AST) -> list[Any]:
        """A helper's return expression as a small tree the dispatch gate evaluates per member:
        ["in", [members]], ["call", helper], ["or"|"and", a, b, ...], ["not", a], ["const", bool],
        or ["unknown", source]."""
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return ["const", node.value]
        if isinstance(node, ast.BoolOp):
            return ["or" if isinstance(node.op, ast.Or) else "and", *(self._predicate(v) for v in node.values)]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ["not", self._predicate(node.operand)]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and dotted(node.func.value) == "self"
                and not node.args and not node.keywords):
            return ["call", node.func.attr]
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, op, right = node.left, node.ops[0], node.comparators[0]
            if dotted(right) == "self" and isinstance(op, (ast.Eq, ast.Is, ast.NotEq, ast.IsNot)):
                left, right = right, left
            if dotted(left) == "self":
                members = self._members_of(right)
                if members is not None:
                    test = ["in", members]
                    return ["not", test] if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)) else test
        return ["unknown", normalise_expression(self.walk.segment(node))]
