"""Every occurrence of a symbol-family name (``[verify.xref] family``): definitions, import paths and
aliases, parameters, keywords, globals, exception names, names and attributes, with the scope it is
in (a class or function's own name counts inside its own scope)."""

from __future__ import annotations

import ast
from typing import ClassVar

from patchkit.index.walk import Visitor


class Names(Visitor):
    HANDLES: ClassVar[dict[type, str]] = {
        ast.ClassDef: "on_definition", ast.FunctionDef: "on_definition", ast.AsyncFunctionDef: "on_definition",
        ast.Import: "on_import", ast.ImportFrom: "on_import_from", ast.Global: "on_global",
        ast.Nonlocal: "on_global", ast.ExceptHandler: "on_except", ast.arg: "on_arg", ast.keyword: "on_keyword",
        ast.Name: "on_name", ast.Attribute: "on_attribute",
    }

    def name(self, name: str, line: int) -> None:
        if self.walk.family.search(name):
            self.walk.facts["names"].append([name, line, self.walk.qualname])

    def on_definition(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.name(node.name, node.lineno)  # after Definitions opened its scope

    def on_import(self, node: ast.Import) -> None:
        for alias in node.names:
            line = getattr(alias, "lineno", node.lineno)
            for part in alias.name.split("."):
                self.name(part, line)
            if alias.asname:
                self.name(alias.asname, line)

    def on_import_from(self, node: ast.ImportFrom) -> None:
        for part in node.module.split(".") if node.module else ():
            self.name(part, node.lineno)
        if any(alias.name == "*" for alias in node.names):
            return
        for alias in node.names:
            line = getattr(alias, "lineno", node.lineno)
            self.name(alias.name, line)
            if alias.asname:
                self.name(alias.asname, line)

    def on_global(self, node: ast.Global | ast.Nonlocal) -> None:
        for name in node.names:
            self.name(name, node.lineno)

    def on_except(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.name(node.name, node.lineno)

    def on_arg(self, node: ast.arg) -> None:
        self.name(node.arg, node.lineno)

    def on_keyword(self, node: ast.keyword) -> None:
        if node.arg:
            self.name(node.arg, node.lineno)

    def on_name(self, node: ast.Name) -> None:
        self.name(node.id, node.lineno)

    def on_attribute(self, node: ast.Attribute) -> None:
        self.name(node.attr, node.end_lineno or node.lineno)
