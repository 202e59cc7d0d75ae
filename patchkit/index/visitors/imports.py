"""Imports: each imported module or name with its alias, line and scope, the star imports of the
module, and the module-level (and class-level) names they bind."""

from __future__ import annotations

import ast
from typing import ClassVar

from patchkit.index.files import resolve_relative
from patchkit.index.walk import Visitor


class Imports(Visitor):
    HANDLES: ClassVar[dict[type, str]] = {ast.Import: "on_import", ast.ImportFrom: "on_import_from"}

    def on_import(self, node: ast.Import) -> None:
        walk = self.walk
        for alias in node.names:
            full = alias.name
            bound = alias.asname or full.split(".")[0]
            target = full if alias.asname else full.split(".")[0]
            walk.bind_toplevel(bound, "module", node.lineno, target)
            line = getattr(alias, "lineno", node.lineno)
            walk.facts["imports"].append({"module": full, "name": None, "asname": bound, "line": line,
                                          "scope": walk.qualname})

    def on_import_from(self, node: ast.ImportFrom) -> None:
        walk = self.walk
        module = resolve_relative(walk.modname, walk.is_package, node.level or 0, node.module)
        if any(alias.name == "*" for alias in node.names):
            if walk.in_module_scope():
                walk.facts["star_imports"].append(module)
            return
        for alias in node.names:
            name, bound = alias.name, alias.asname or alias.name
            line = getattr(alias, "lineno", node.lineno)
            walk.bind_toplevel(bound, "import", node.lineno, f"{module}.{name}")
            owner = walk.class_facts()
            if owner is not None:
                owner["attrs"].append(bound)
            walk.facts["imports"].append({"module": module, "name": name, "asname": bound, "line": line,
                                          "scope": walk.qualname})
