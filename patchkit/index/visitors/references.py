"""Attribute references: every ``base.attr`` on a dotted base with how it is used (load, store, call,
value), the family attributes (``attrs``), what a class reads of ``self``, literal-key subscripts, and
the local names a function uses as values. An import path counts as its chain of attributes."""

from __future__ import annotations

import ast
from typing import ClassVar

from patchkit.index.syntax import VALUE_CALLS, VALUE_PARENTS, dotted, string_value
from patchkit.index.walk import Visitor


class References(Visitor):
    HANDLES: ClassVar[dict[type, str]] = {ast.Import: "on_import", ast.ImportFrom: "on_import_from",
                                          ast.Name: "on_name", ast.Attribute: "on_attribute",
                                          ast.Subscript: "on_subscript"}

    def _path(self, path: str, line: int) -> None:
        parts = path.split(".")
        for n in range(1, len(parts)):
            self.walk.facts["attrs"].append([".".join(parts[:n]), parts[n], line, self.walk.qualname])

    def on_import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._path(alias.name, getattr(alias, "lineno", node.lineno))

    def on_import_from(self, node: ast.ImportFrom) -> None:
        if node.module:
            self._path(node.module, node.lineno)

    def on_name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and self._is_value_use(node):
            function = self.walk.function()
            if function is not None:
                function["value_names"].append(node.id)

    def _is_value_use(self, node: ast.AST) -> bool:
        parent = self.walk.parents.get(id(node))
        if isinstance(parent, VALUE_PARENTS) or (isinstance(parent, ast.Subscript) and parent.value is node):
            return True
        if isinstance(parent, ast.For) and parent.iter is node:
            return True
        return isinstance(parent, ast.Call) and node in parent.args and dotted(parent.func) in VALUE_CALLS

    def _ctx(self, node: ast.Attribute) -> str:
        parent = self.walk.parents.get(id(node))
        if isinstance(node.ctx, ast.Store):
            return "store"
        if isinstance(node.ctx, ast.Del):
            return "del"
        if isinstance(parent, ast.Call) and parent.func is node:
            return "call"
        return "value" if self._is_value_use(node) else "load"

    def on_attribute(self, node: ast.Attribute) -> None:
        walk, attr, line = self.walk, node.attr, node.lineno
        base = dotted(node.value)
        if base is None:
            if walk.family.search(attr):
                walk.facts["attrs"].append(["?", attr, line, walk.qualname])
            return
        walk.facts["uses"].append([base, attr, line, walk.qualname, self._ctx(node)])
        if base in ("self", "cls"):
            cls = walk.current_class
            if cls is not None and base == "self" and walk.family.search(attr):
                walk.facts["classes"][cls]["self_reads"].append([attr, line, walk.qualname])
            if attr == "__dict__" and cls is not None:
                walk.facts["classes"][cls]["dynamic_self"] = True
            if not walk.family.search(attr):
                return
        walk.facts["attrs"].append([base, attr, line, walk.qualname])

    def on_subscript(self, node: ast.Subscript) -> None:
        key, base = string_value(node.slice), dotted(node.value)
        if key is not None and base is not None:
            self.walk.facts["subscripts"].append([base, key, node.lineno, self.walk.qualname])
