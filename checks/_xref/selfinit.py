"""xref's rule for ``self`` attributes that are read before anything assigns them (issue 37).

Deleting ``self._kv_rows: Optional[int] = None`` from ``DDTreeWorkerV2.__init__`` passed every gate:
``_kv_row_bytes`` still assigns ``self._kv_rows`` (lazily, after reading it), so the attribute is
"defined" by the class and the name rules (``names.py``) are content. The first round then raises
``AttributeError`` (through ``DFlashWorkerV2.__getattr__``: the target worker has no ``_kv_rows``).

On the lines the series adds, a read of ``self.X`` in a method M of class C is an error when:

- X exists: something in C or its bases assigns it (an X nothing assigns is the name rules' finding);
- X is no class-level name of C or its bases (class attribute, annotation, dataclass field, method,
  property, nested class), and nothing run at construction assigns it: the ``__init__``,
  ``__new__``, ``__post_init__`` and ``__setstate__`` of C and of every base, every method they
  reference on ``self`` (transitively, every implementation) and the functions nested in those;
- M is the only method that assigns X: it initialises X lazily. A method that reads X and never
  assigns it relies on the object's life cycle (a set-up method run before it, as SGLang calls
  ``FlashAttentionBackend.init_cuda_graph_state`` before any replay reads what it set), which the
  gate cannot see, so it is not judged;
- nothing assigned X first on the read's path: no ``self.X = ...`` in an earlier statement of the
  read's block or of a block around it (an assignment in a ``with`` or ``try`` body has run by the end
  of that statement), no ``hasattr(self, "X")`` or ``getattr(self, "X", ...)`` in M, and no read of X
  in M inside a ``try`` that catches ``AttributeError`` (M handles X's absence itself).

Conservative on purpose: a class with a base outside the index, ``setattr(self, name)`` with a name
that is not a literal, ``vars(self)`` or ``self.__dict__``, ``__slots__``, ``__setattr__`` or
``__getattribute__``, or a ``__getattr__`` (its own or a base's) without a declared dynamic source
(``[verify.xref] dynamic``; with one, the source must not have X either) is not judged. One finding
per attribute and method, at the first such read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from patchkit.checks._xref.model import KNOWN_BASES, Model, Ref

#: What runs when an instance is made (or restored): what these assign, every instance has.
CONSTRUCTORS = frozenset({"__init__", "__new__", "__post_init__", "__attrs_post_init__", "__setstate__"})
#: Class-level names that make an instance's attributes something else than its assignments.
_TRICKS = frozenset({"__slots__", "__setattr__", "__getattribute__"})
_NOT_METHODS = frozenset({"staticmethod", "classmethod"})


@dataclass(frozen=True)
class InitProblem:
    file: str
    line: int
    message: str
    hint: str


def _events(fn: dict[str, Any]) -> list[list[Any]]:
    events: list[list[Any]] = fn.get("self_flow", [])
    return events


def _split(step: str) -> tuple[str, int]:
    name, _, index = step.partition(":")
    return name, int(index)


def covers(store_path: list[str], lift: int, read_path: list[str]) -> bool:
    """Whether an assignment at ``store_path`` has run before a read at ``read_path``: the read is in
    a later statement of the assignment's block, or of a block around it, or, when the assignment
    sits in ``lift`` always-run blocks (``with``, ``try``), later than the statement they belong to."""
    depth = len(store_path)
    for k in range(depth, max(depth - lift, 1) - 1, -1):
        if len(read_path) < k or read_path[:k - 1] != store_path[:k - 1]:
            continue
        (store_field, store_index), (read_field, read_index) = _split(store_path[k - 1]), _split(read_path[k - 1])
        if store_field == read_field and read_index > store_index:
            return True
    return False


@dataclass
class ClassView:
    """What C and its bases assign, and where (built once per class)."""

    ref: Ref
    getattr_owner: str | None = None  # the class whose __getattr__ C uses (C or a base)
    sources: list[Ref] = field(default_factory=list)  # where that __getattr__ is declared to forward
    class_names: set[str] = field(default_factory=set)  # class-level names: never "unassigned"
    assigned: set[str] = field(default_factory=set)  # self.X assigned anywhere in C or its bases
    functions: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)  # name -> [(qual, fn)]
    nested: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # method qual -> its nested functions
    stored_in: dict[str, set[str]] = field(default_factory=dict)  # X -> the methods (quals) that assign it
    at_construction: set[str] = field(default_factory=set)

    def _all_events(self, qual: str, fn: dict[str, Any]) -> Iterator[list[Any]]:
        yield from _events(fn)
        for inner in self.nested.get(qual, []):
            yield from _events(inner)

    def own_stores(self, qual: str, fn: dict[str, Any]) -> set[str]:
        return {e[1] for e in self._all_events(qual, fn) if e[0] == "store"}

    def referenced(self, qual: str, fn: dict[str, Any]) -> set[str]:
        """The methods ``fn`` (or a function nested in it) names on ``self``."""
        return {e[1] for e in self._all_events(qual, fn) if e[0] != "store"} & set(self.functions)

    def closure(self, roots: set[str]) -> set[str]:
        """The method names ``roots`` reach through ``self.m`` references (every implementation)."""
        seen: set[str] = set()
        todo = [name for name in roots if name in self.functions]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for qual, fn in self.functions[name]:
                todo.extend(self.referenced(qual, fn) - seen)
        return seen


class SelfInitRule:
    """The rule of the module docstring; ``names`` is the :class:`~.names.AddedCodeRules` it serves
    (its members, dynamic sources and ``defines``)."""

    def __init__(self, model: Model, names: Any):
        self.model = model
        self.names = names
        self._views: dict[Ref, ClassView | None] = {}

    # -- the class ------------------------------------------------------------------------------
    def view(self, ref: Ref) -> ClassView | None:
        if ref not in self._views:
            self._views[ref] = self._build(ref)
        return self._views[ref]

    def _build(self, ref: Ref) -> ClassView | None:
        members = self.names._members(ref)
        if not members.complete or members.is_enum or self.names._dynamic_class(ref):
            return None
        view = ClassView(ref)
        owner = self.names.getattr_owner(ref)
        if owner is not None:
            sources = self.names._forwarded(ref)
            if not sources:
                return None  # __getattr__ may answer anything (or its declared source is not in the tree)
            view.getattr_owner, view.sources = owner.qualname, sources
        with self.model.loading():
            chain = self.model.mro(ref)
        for cls_ref in chain:
            cls = self.model.class_facts(cls_ref)
            facts = self.model.facts(cls_ref.module, load=True)
            if cls is None or facts is None or set(cls["attrs"]) & _TRICKS:
                return None
            view.class_names |= set(cls["attrs"]) | {f["name"] for f in cls["fields"]}
            view.assigned |= set(cls["self_assigned"])
            for base in cls["bases"]:
                known = KNOWN_BASES.get(base)
                if known is not None:
                    view.class_names |= set(dir(known))
            for qual, fn in facts["functions"].items():
                if fn["class"] == cls_ref.qualname:
                    view.functions.setdefault(fn["name"], []).append((qual, fn))
                    view.nested[qual] = [inner for q, inner in facts["functions"].items() if q.startswith(qual + ".")]
                    for attr in view.own_stores(qual, fn):
                        view.stored_in.setdefault(attr, set()).add(qual)
        for name in view.closure(set(CONSTRUCTORS)):
            for qual, fn in view.functions[name]:
                view.at_construction |= view.own_stores(qual, fn)
        return view

    # -- the reads ------------------------------------------------------------------------------
    def check(self, facts: dict[str, Any], added: frozenset[int]) -> Iterator[InitProblem]:
        for qual, fn in facts["functions"].items():
            cls = fn["class"]
            if cls is None or set(fn["decorators"]) & _NOT_METHODS:
                continue
            reads = [e for e in _events(fn) if e[0] == "load" and e[2] in added and e[3]]
            if not reads:
                continue
            view = self.view(Ref("class", facts["module"], cls))
            if view is None:
                continue
            reported: set[str] = set()
            for event in reads:
                attr = event[1]
                if attr in reported or not self._judged(view, qual, attr) or self._covered(fn, attr, event[3]):
                    continue
                reported.add(attr)
                yield self._problem(facts, view, fn, attr, event[2])

    def _judged(self, view: ClassView, qual: str, attr: str) -> bool:
        """X exists, is no class-level name, construction never sets it, and only this method does:
        a method that reads X without assigning it relies on the object's life cycle (a set-up method
        run before it, as FlashAttentionBackend.init_cuda_graph_state before a replay), which is not
        visible here, so only the lazily initialising method itself is judged."""
        if attr.startswith("__") or attr in view.class_names or attr not in view.assigned:
            return False
        if attr in view.at_construction or view.stored_in.get(attr, set()) != {qual}:
            return False
        return all(self.names.defines(source, attr) is False for source in view.sources)

    def _covered(self, fn: dict[str, Any], attr: str, path: list[str]) -> bool:
        """Whether something assigns ``attr`` before the point ``path`` of ``fn`` on every path to it."""
        events = _events(fn)
        if any(e[0] in ("guard", "safe") and e[1] == attr for e in events):
            return True  # it checks for X, or handles its absence (try/except AttributeError)
        return any(kind == "store" and name == attr and at and covers(at, lift, path)
                   for kind, name, _line, at, lift in events)

    def _problem(self, facts: dict[str, Any], view: ClassView, fn: dict[str, Any], attr: str,
                 line: int) -> InitProblem:
        cls = view.ref.qualname
        inits = [q for q, _fn in view.functions.get("__init__", [])]
        init = inits[0] if inits else f"{cls}.__init__"
        later = sorted(e[2] for e in _events(fn) if e[0] == "store" and e[1] == attr and e[2] >= line)
        after = f" at line {later[0]}, after this read" if later else " on another path than this read's"
        via = ""
        if view.getattr_owner:
            sources = ", ".join(s.qualname for s in view.sources)
            via = f" ({view.getattr_owner}.__getattr__ forwards it to {sources}, which has no {attr} either)"
        message = (f"`self.{attr}` is read here, but no method of {cls} assigns it before this read and "
                   f"__init__ never sets it: only {fn['name']}() assigns it,{after}, so the first call on a new "
                   f"instance raises AttributeError{via}")
        hint = f"initialise it in {init} (e.g. `self.{attr} = None`)"
        return InitProblem(facts["path"], line, message, hint)
