"""Algorithm dispatch sites: a branch on the speculative algorithm (a helper call such as
``is_ddtree()``, an enum member, an algorithm name compared as a string, a collection of names or
input-type members), anchored at the innermost expression root around it (a condition, an argument,
an assigned value, ...) with its canonical text, so the dispatch gate can tell each site by what it
says. The helpers' own definitions are not sites: the gate checks them against its families."""

from __future__ import annotations

import ast
from typing import Any, ClassVar

from patchkit.index.syntax import canonical_expression, normalise_expression, string_value
from patchkit.index.walk import ModuleWalk, Visitor


class DispatchSites(Visitor):
    HANDLES: ClassVar[dict[type, str]] = {
        ast.ClassDef: "on_class", ast.Assign: "on_value", ast.AnnAssign: "on_value", ast.AugAssign: "on_value",
        ast.Call: "on_call", ast.Attribute: "on_attribute", ast.If: "on_test", ast.While: "on_test",
        ast.IfExp: "on_test", ast.Assert: "on_test", ast.comprehension: "on_comprehension", ast.Return: "on_value",
        ast.Expr: "on_value", ast.Lambda: "on_lambda", ast.Tuple: "on_collection", ast.List: "on_collection",
        ast.Set: "on_collection", ast.Dict: "on_dict", ast.Compare: "on_compare",
    }

    def __init__(self, walk: ModuleWalk):
        super().__init__(walk)
        self.algo_names = set(walk.settings.algorithm_names)
        self.member_enums = set(walk.settings.member_enums)
        self._site_roots: dict[int, dict[str, Any]] = {}
        self._compared: set[int] = set()  # collections that are operands of a comparison

    # -- the roots a site is anchored at --------------------------------------------------------
    def _mark_root(self, node: ast.AST | None) -> None:
        if node is not None:
            self.walk.roots.add(id(node))

    def on_class(self, node: ast.ClassDef) -> None:
        for base in (*node.bases, *(k.value for k in node.keywords)):
            self._mark_root(base.value if isinstance(base, ast.Starred) else base)

    def on_value(self, node: ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Return | ast.Expr) -> None:
        self._mark_root(node.value)

    def on_test(self, node: ast.If | ast.While | ast.IfExp | ast.Assert) -> None:
        self._mark_root(node.test)

    def on_comprehension(self, node: ast.comprehension) -> None:
        for test in node.ifs:
            self._mark_root(test)

    def on_lambda(self, node: ast.Lambda) -> None:
        self._mark_root(node.body)

    def on_dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if key is not None:
                self._mark_root(value)

    # -- the sites ------------------------------------------------------------------------------
    def on_call(self, node: ast.Call) -> None:
        for arg in node.args:
            self._mark_root(arg.value if isinstance(arg, ast.Starred) else arg)
        for kw in node.keywords:
            self._mark_root(kw.value)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in self.walk.helpers and not node.args and not node.keywords:
            self._add_site(f"{func.attr}()")

    def on_attribute(self, node: ast.Attribute) -> None:
        enum = self.walk.settings.enum_name
        if isinstance(node.value, ast.Name) and node.value.id == enum and node.attr.isupper():
            self._add_site(f"{enum}.{node.attr}")

    def on_collection(self, node: ast.Tuple | ast.List | ast.Set) -> None:
        for el in node.elts:
            if not isinstance(el, ast.Starred):
                self._mark_root(el)
        if isinstance(node.ctx if not isinstance(node, ast.Set) else ast.Load(), ast.Load):
            self._membership(node)

    def on_compare(self, node: ast.Compare) -> None:
        ops = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)
        operands = [node.left, *node.comparators]
        for operand in operands:
            if isinstance(operand, (ast.Tuple, ast.List, ast.Set)):
                self._compared.add(id(operand))
        if not all(isinstance(op, ops) for op in node.ops):
            return
        for operand in operands:
            for name in self._algorithm_strings(operand):
                self._add_site(f'"{name}"')

    def _in_helper_definition(self) -> bool:
        # The helpers' own bodies (``return self == SpeculativeAlgorithm.DFLASH``) define, not branch:
        # the dispatch gate checks them against [verify.dispatch] families instead. The same goes
        # for the enum's other predicates (is_none, is_speculative).
        defs = [s for s in self.walk.scopes if s.kind == "def"]
        if not defs:
            return False
        return defs[-1].name in self.walk.helpers or (self.walk.in_enum() and defs[-1].name.startswith("is_"))

    def _add_site(self, primitive: str, root: ast.AST | None = None) -> None:
        walk = self.walk
        if (root is None and not walk.root_stack) or self._in_helper_definition():
            return
        root = root if root is not None else walk.root_stack[-1]
        site = self._site_roots.get(id(root))
        if site is None:
            code = walk.segment(root)
            if isinstance(root, ast.Tuple) and code.startswith("(") and code.endswith(")"):
                code = code[1:-1]  # outer parentheses are layout, not identity
            site = {
                "scope": walk.qualname or "<module>",
                "expr": canonical_expression(code),
                "code": code,
                "primitives": [],
                "line": root.lineno,  # type: ignore[attr-defined]
                "duplicates": [],
            }
            self._site_roots[id(root)] = site
            walk.facts["dispatch"].append(site)
        if primitive not in site["primitives"]:
            site["primitives"].append(primitive)

    def _algorithm_strings(self, node: ast.AST) -> list[str]:
        value = string_value(node)
        if value is not None:
            return [value] if value.upper() in self.algo_names and self._is_plain_string(node) else []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [name for el in node.elts for name in self._algorithm_strings(el)]
        return []

    def _is_plain_string(self, node: ast.AST) -> bool:
        """One string literal on one line, not an implicit concatenation of several."""
        if node.lineno != node.end_lineno:  # type: ignore[attr-defined]
            return False
        text = self.walk.blines[node.lineno - 1][node.col_offset:node.end_col_offset]  # type: ignore[attr-defined]
        body = text.lstrip(b"rRuU")
        quote = body[:1]
        return quote in (b"'", b'"') and body.count(quote) in (2, 6)

    def _membership(self, node: ast.Tuple | ast.List | ast.Set) -> None:
        """A collection of algorithm names or input-type members (``_RESERVED_NAMES``,
        ``is_verify_input``'s set) is a dispatch site as a whole, anchored at the innermost root
        around the collection; members listed twice are recorded for the gate."""
        if id(node) in self._compared and not any(self._member_attr(el) for el in node.elts):
            return  # string comparisons are sites already
        members = [el for el in node.elts if self._member_attr(el)]
        names = [el for el in node.elts if self._algorithm_strings(el)]
        if not members and len(names) < 2:
            return
        walk = self.walk
        root = walk.root_stack[-1] if walk.root_stack else None
        if root is None or (root is node and isinstance(walk.parents.get(id(node)), (ast.Tuple, ast.List, ast.Set))):
            return
        before = len(walk.facts["dispatch"])
        for el in members:
            self._add_site(walk.segment(el), root)
        for el in names:
            self._add_site(f'"{string_value(el)}"', root)
        site = self._site_roots.get(id(root))
        if site is None or len(walk.facts["dispatch"]) < before:
            return
        seen: set[str] = set()
        for el in node.elts:
            code = normalise_expression(walk.segment(el))
            if code in seen and (el in members or el in names):
                site["duplicates"].append([code, el.lineno])
            seen.add(code)

    def _member_attr(self, node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in self.member_enums and node.attr.isupper())
