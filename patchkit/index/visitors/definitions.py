"""Classes and functions: their facts entries (bases, decorators, dataclass options, parameters and
their annotations, what each function returns as a literal dict), the module-level names they bind,
and the scopes the walk is inside."""

from __future__ import annotations

import ast
from typing import Any, ClassVar

from patchkit.index.syntax import dataclass_options, decorator_names, dotted, literal_keys, params
from patchkit.index.walk import Scope, Visitor


class Definitions(Visitor):
    HANDLES: ClassVar[dict[type, str]] = {ast.ClassDef: "on_class", ast.FunctionDef: "on_function",
                                          ast.AsyncFunctionDef: "on_function", ast.Return: "on_return"}

    def on_class(self, node: ast.ClassDef) -> None:
        walk, name = self.walk, node.name
        qual = f"{walk.qualname}.{name}" if walk.qualname else name
        owner = walk.class_facts()
        if owner is not None:
            owner["attrs"].append(name)
        walk.bind_toplevel(name, "class", node.lineno)
        walk.facts["classes"][qual] = {
            "name": name,
            "line": node.lineno,
            "bases": [dotted(b) or "?" for b in node.bases],
            "keywords": [k.arg for k in node.keywords if k.arg],
            "decorators": decorator_names(node.decorator_list),
            "dataclass": dataclass_options(node.decorator_list),
            "fields": [],
            "attrs": [],
            "self_assigned": [],
            "self_assigned_at": [],  # [attr, line, scope] for family attributes
            "self_reads": [],
            "self_types": {},  # attr -> type hint (see syntax.type_hint), "?" when assigned differently
            "dynamic_self": False,  # setattr(self, ...), vars(self) or self.__dict__ somewhere in it
            "has_getattr": False,
        }
        walk.scopes.append(Scope("class", name, qual, qual, None))

    def on_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        walk, name = self.walk, node.name
        qual = f"{walk.qualname}.{name}" if walk.qualname else name
        owner = walk.class_facts()
        if owner is not None:
            owner["attrs"].append(name)
            if name in ("__getattr__", "__getattribute__"):
                owner["has_getattr"] = True
        elif walk.in_module_scope() and name == "__getattr__":
            walk.facts["module_getattr"] = True
        walk.bind_toplevel(name, "function", node.lineno)
        all_args = [*node.args.posonlyargs, *node.args.args, node.args.vararg, *node.args.kwonlyargs, node.args.kwarg]
        param_types = {a.arg: walk.segment(a.annotation) for a in all_args
                       if a is not None and a.annotation is not None}
        entry = {
            "name": name,
            "line": node.lineno,
            "params": params(node.args),
            "decorators": decorator_names(node.decorator_list),
            "class": walk.scopes[-1].qualname if owner is not None else None,
            "nested": not walk.in_module_scope() and owner is None,
            "returns": walk.segment(node.returns) if node.returns is not None else None,
            "param_types": param_types,
            "locals": {},  # name -> type hint (see syntax.type_hint), "?" when assigned differently
            "value_names": [],  # local names used as numbers or sequences (operands, range(), ...)
            "loop_strings": {},  # loop variables over a literal tuple of strings
            "narrowed": {},  # expression -> [[line, [class, ...]], ...] from isinstance(expression, classes)
            "dict_returns": [],  # per return: its literal keys (`dict(a=...)`, `{"a": ...}`), or None for others
        }
        walk.facts["functions"].setdefault(qual, entry)
        walk.scopes.append(Scope("def", name, qual, walk.current_class, walk.facts["functions"][qual]))

    def on_return(self, node: ast.Return) -> None:
        function = self.walk.function()
        if function is not None:
            function["dict_returns"].append(literal_keys(node.value))

    def finish(self) -> None:
        facts: dict[str, Any] = self.walk.facts
        for cls in facts["classes"].values():
            cls["self_assigned"] = sorted(set(cls["self_assigned"]))
            cls["attrs"] = sorted(set(cls["attrs"]))
        for fn in facts["functions"].values():
            fn["value_names"] = sorted(set(fn["value_names"]))
