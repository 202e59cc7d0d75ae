"""One pass over a module's ``ast``, shared by the visitors: the walk keeps what they all read (the
enclosing scopes, each node's parent, the facts being built, the expression roots a dispatch site
is anchored at) and calls, for each node, the handlers of every visitor in a fixed order, before
the node's children."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from patchkit.index.settings import IndexSettings
from patchkit.index.syntax import children


class Scope:
    """A class or function the walk is inside."""

    __slots__ = ("cls", "function", "kind", "name", "qualname")

    def __init__(self, kind: str, name: str, qualname: str, cls: str | None, function: dict[str, Any] | None):
        self.kind, self.name, self.qualname, self.cls, self.function = kind, name, qualname, cls, function


class Visitor:
    """One fact (or a few that are read together), collected from the node types in ``HANDLES``
    (node type -> method name). Visitors share the walk; each writes only its own facts."""

    HANDLES: ClassVar[dict[type, str]] = {}

    def __init__(self, walk: ModuleWalk):
        self.walk = walk

    def finish(self) -> None:
        """After the whole module: tidy what this visitor collected."""


class ModuleWalk:
    """The shared state of one pass: settings, source, scopes, parents and the facts dictionary."""

    def __init__(self, source: str, modname: str, is_package: bool, settings: IndexSettings,
                 visitors: Sequence[type[Visitor]]):
        self.source = source
        self.blines = source.encode("utf-8", errors="replace").splitlines(keepends=True)  # ast offsets are bytes
        self.modname = modname
        self.is_package = is_package
        self.settings = settings
        self.family = settings.family_re()
        self.helpers = set(settings.helpers)
        self.scopes: list[Scope] = []
        self.parents: dict[int, ast.AST] = {}
        self.roots: set[int] = set()  # expression roots where a dispatch site is anchored
        self.root_stack: list[ast.AST] = []
        self.facts: dict[str, Any] = {  # the layout (FACTS_SCHEMA); each visitor fills its own keys
            "module": modname,
            "package": is_package,
            "toplevel": {},
            "star_imports": [],
            "module_getattr": False,
            "functions": {},
            "classes": {},
            "imports": [],
            "calls": [],
            "attrs": [],
            "names": [],
            "uses": [],  # [base, attr, line, scope, ctx] for every attribute on a dotted base
            "dispatch": [],
            "predicates": {},  # helper definitions: qual -> {name, class, expr, line}
            "kwcalls": [],  # every call with keyword names: {callee, first, kw: {name: line}, line, scope}
            "subscripts": [],  # [base, literal key, line, scope] for every `a.b["key"]`
            "name_lists": {},  # module-level `NAME = [A, b.C, ...]`: name -> dotted elements
        }
        self.visitors = [visitor(self) for visitor in visitors]
        self._handlers: dict[type, list[Callable[[Any], None]]] = {}
        for visitor in self.visitors:
            for node_type, method in visitor.HANDLES.items():
                self._handlers.setdefault(node_type, []).append(getattr(visitor, method))

    def collect(self, tree: ast.Module) -> dict[str, Any]:
        self._visit(tree)
        for visitor in self.visitors:
            visitor.finish()
        return self.facts

    def _visit(self, node: ast.AST) -> None:
        pushed = id(node) in self.roots
        if pushed:
            self.root_stack.append(node)
        depth = len(self.scopes)
        for handler in self._handlers.get(type(node), ()):
            handler(node)
        for child in children(node):
            self.parents[id(child)] = node
            self._visit(child)
        del self.scopes[depth:]  # the class or function this node opened
        if pushed:
            self.root_stack.pop()

    # -- scopes ---------------------------------------------------------------------------------
    @property
    def qualname(self) -> str:
        return self.scopes[-1].qualname if self.scopes else ""

    @property
    def current_class(self) -> str | None:
        return self.scopes[-1].cls if self.scopes else None

    def function(self) -> dict[str, Any] | None:
        """The facts entry of the innermost enclosing function, if any."""
        for scope in reversed(self.scopes):
            if scope.kind == "def":
                return scope.function
            if scope.kind == "class":
                return None
        return None

    def in_module_scope(self) -> bool:
        return not self.scopes

    def in_enum(self) -> bool:
        """Inside the algorithm enum's class body (its ``is_*`` methods are predicates)."""
        return any(s.kind == "class" and s.name == self.settings.enum_name for s in self.scopes)

    def class_facts(self) -> dict[str, Any] | None:
        """The facts of the class whose body this is (a method's body binds no class attribute)."""
        if self.scopes and self.scopes[-1].kind == "class":
            found: dict[str, Any] = self.facts["classes"][self.scopes[-1].qualname]
            return found
        return None

    def bind_toplevel(self, name: str, kind: str, line: int, target: str | None = None) -> None:
        """A module-level binding (the first one of a name counts)."""
        if self.in_module_scope():
            self.facts["toplevel"].setdefault(name, {"kind": kind, "line": line, "target": target})

    def segment(self, node: ast.AST) -> str:
        """The exact source of ``node`` (``ast.get_source_segment`` re-splits the file on every call)."""
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if start is None or end is None:
            return ""
        first, last = self.blines[start - 1], self.blines[end - 1]
        col, end_col = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
        if start == end:
            return str(first[col:end_col].decode("utf-8", errors="replace"))
        middle = b"".join(self.blines[start:end - 1])
        return str((first[col:] + middle + last[:end_col]).decode("utf-8", errors="replace"))
