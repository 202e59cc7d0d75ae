"""Assignments: the names they bind (module level, class attributes, a function's locals with a type
hint each), what a class assigns to ``self`` (and the hint of each), dataclass fields, ``__all__``,
module-level lists of names, and loop variables over literal strings."""

from __future__ import annotations

import ast
from typing import ClassVar

from patchkit.index.syntax import assigned_names, dotted, field_call_options, string_value, type_hint
from patchkit.index.walk import Visitor


class Bindings(Visitor):
    HANDLES: ClassVar[dict[type, str]] = {
        ast.Assign: "on_assign", ast.AnnAssign: "on_ann_assign", ast.AugAssign: "on_aug_assign", ast.For: "on_for",
        ast.AsyncFor: "on_for", ast.withitem: "on_withitem", ast.NamedExpr: "on_named_expr",
    }

    def _hint(self, table: dict[str, str], name: str, hint: str | None) -> None:
        if table.get(name, hint) != hint:
            table[name] = "?"
        else:
            table[name] = hint if hint is not None else "?"

    def _record_target(self, target: ast.AST, value: ast.AST | None = None, annotation: ast.AST | None = None) -> None:
        walk = self.walk
        function = walk.function()
        for t in assigned_names(target):
            if isinstance(t, ast.Name):
                walk.bind_toplevel(t.id, "assign", t.lineno)
                owner = walk.class_facts()
                if owner is not None:
                    owner["attrs"].append(t.id)
                if function is not None:
                    hint = f"ann:{walk.segment(annotation)}" if annotation is not None else (
                        type_hint(value, function["param_types"]) if value is not None and t is target else None)
                    if t.id in function["param_types"] and annotation is None:
                        hint = "?"  # a parameter rebound to something else
                    self._hint(function["locals"], t.id, hint)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                cls = walk.current_class
                if cls is not None:
                    facts = walk.facts["classes"][cls]
                    facts["self_assigned"].append(t.attr)
                    if walk.family.search(t.attr):
                        facts["self_assigned_at"].append([t.attr, t.lineno, walk.qualname])
                    params = function["param_types"] if function is not None else {}
                    local_hints = function["locals"] if function is not None else {}
                    hint = f"ann:{walk.segment(annotation)}" if annotation is not None else (
                        type_hint(value, params, local_hints) if value is not None and t is target else None)
                    self._hint(facts["self_types"], t.attr, hint)

    def on_assign(self, node: ast.Assign) -> None:
        walk = self.walk
        for target in node.targets:
            self._record_target(target, node.value)
            self._name_list(target, node.value)
            if walk.in_module_scope() and isinstance(target, ast.Name) and target.id == "__all__":
                walk.facts["all"] = [s for el in getattr(node.value, "elts", []) if (s := string_value(el))]

    def _name_list(self, target: ast.AST, value: ast.AST) -> None:
        """``NAMESPACES = [Model, Spec, ...]`` at module level (xref's field classes read it)."""
        if not (self.walk.in_module_scope() and isinstance(target, ast.Name)
                and isinstance(value, (ast.List, ast.Tuple))):
            return
        names = [dotted(el) for el in value.elts]
        if names and all(names):
            self.walk.facts["name_lists"][target.id] = names

    def on_ann_assign(self, node: ast.AnnAssign) -> None:
        self._record_target(node.target, node.value, node.annotation)
        owner = self.walk.class_facts()
        if owner is not None and isinstance(node.target, ast.Name):
            annotation = self.walk.segment(node.annotation)
            if "ClassVar" not in annotation:
                entry = {"name": node.target.id, **field_call_options(node.value)}
                entry["kw_sentinel"] = annotation.endswith("KW_ONLY")
                entry["annotation"] = annotation
                owner["fields"].append(entry)

    def on_aug_assign(self, node: ast.AugAssign) -> None:
        self._record_target(node.target)

    def on_for(self, node: ast.For | ast.AsyncFor) -> None:
        self._record_target(node.target)
        function = self.walk.function()
        names = [string_value(el) for el in getattr(node.iter, "elts", [None])]
        if function is not None and isinstance(node.target, ast.Name) and names and None not in names:
            function["loop_strings"][node.target.id] = names  # `for attr in ("a", "b"): setattr(self, attr, ...)`

    def on_withitem(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self._record_target(node.optional_vars)

    def on_named_expr(self, node: ast.NamedExpr) -> None:
        self._record_target(node.target)
