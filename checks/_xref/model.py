"""Name resolution over a :class:`~patchkit.pyindex.PyIndex`: what a name, a dotted expression or a
class's members are, and what a callable's signature is. Deliberately conservative: whenever a
question cannot be answered from the index (a third-party base class, a decorator that may change a
signature, a value assigned at run time), the answer is "unknown" and no finding is raised.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from patchkit.index import PyIndex

# Decorators that keep a function's call signature.
SIGNATURE_SAFE_DECORATORS = frozenset({
    "staticmethod", "classmethod", "property", "abstractmethod", "abc.abstractmethod",
    "lru_cache", "functools.lru_cache", "cache", "functools.cache", "cached_property",
    "functools.cached_property", "torch.no_grad", "torch.inference_mode", "torch.compile",
    "override", "typing.override", "typing_extensions.override",
})

# Bases whose attributes Python itself defines; anything else outside the index is unknown.
KNOWN_BASES: dict[str, Any] = {
    "object": object, "Enum": enum.Enum, "enum.Enum": enum.Enum, "IntEnum": enum.IntEnum,
    "enum.IntEnum": enum.IntEnum, "ABC": abc.ABC, "abc.ABC": abc.ABC, "str": str, "int": int,
    "Exception": Exception, "ValueError": ValueError, "RuntimeError": RuntimeError,
}
ENUM_BASES = {"Enum", "enum.Enum", "IntEnum", "enum.IntEnum", "IntFlag", "Flag", "StrEnum"}


@dataclass(frozen=True)
class Ref:
    """What a name resolves to: a module, or a class/function (qualname) inside a module."""

    kind: str  # "module" | "class" | "function" | "value"
    module: str
    qualname: str = ""


@dataclass(frozen=True)
class Members:
    names: frozenset[str]
    complete: bool  # False when some base class could not be resolved
    has_getattr: bool
    is_enum: bool


class Model:
    """Resolution helpers over the facts of an index (facts are loaded on demand)."""

    def __init__(self, index: PyIndex, root_packages: tuple[str, ...]):
        self.index = index
        self.root_packages = root_packages
        self.load_all = False  # see :meth:`loading`

    # -- modules --------------------------------------------------------------------------------
    def in_tree(self, module: str) -> bool:
        return module.split(".")[0] in self.root_packages

    def facts(self, module: str, load: bool = False) -> dict[str, Any] | None:
        """Facts of an indexed module. Others are parsed only when ``load`` (import checks through
        star-import chains): a module outside the index cannot define a family name, and loading
        every module an attribute chain touches costs ~40 extra parses on the v1 tree."""
        if not self.in_tree(module):
            return None
        rel = self.index.module_file(module)
        if rel is None or (not (load or self.load_all) and rel not in self.index.facts):
            return None
        return self.index.load(rel)

    @contextmanager
    def loading(self) -> Iterator[None]:
        """Resolve with on-demand parsing of unindexed modules (for family names: a reference to
        ``Cls.DDTREE`` whose class lives in an unindexed module is exactly the missing-member case)."""
        previous, self.load_all = self.load_all, True
        try:
            yield
        finally:
            self.load_all = previous

    def module_exists(self, module: str) -> bool:
        return self.index.module_file(module) is not None or self.index.is_namespace_package(module)

    def exports(self, module: str, _seen: frozenset[str] = frozenset()) -> set[str] | None:
        """Names ``from module import X`` may bind; None when anything goes (module __getattr__)."""
        facts = self.facts(module, load=True)
        if facts is None or facts.get("module_getattr"):
            return None  # unknown, or a namespace package (only submodules, checked separately)
        names = set(facts["toplevel"])
        for star in facts["star_imports"]:
            if star in _seen:
                continue
            if not self.in_tree(star):
                return None  # a star import from a third-party module: unknowable here
            sub = self.exports(star, _seen | {module})
            if sub is None:
                return None
            names |= {n for n in sub if not n.startswith("_")}
        return names

    def has_submodule(self, module: str, name: str) -> bool:
        return self.module_exists(f"{module}.{name}")

    # -- names ----------------------------------------------------------------------------------
    def resolve_name(self, facts: dict[str, Any], name: str, depth: int = 0) -> Ref | None:
        """What ``name`` means at module level of ``facts`` (imports anywhere in the file count)."""
        if depth > 8:
            return None
        entry = facts["toplevel"].get(name)
        if entry is None:
            entry = self._local_import(facts, name)
            if entry is None:
                return None
        kind, target = entry["kind"], entry.get("target")
        if kind in ("class", "function"):
            return Ref(kind, facts["module"], name)
        if kind == "module":
            return Ref("module", target) if self.in_tree(target) else None
        if kind == "import":
            return self.resolve_import(target, depth + 1)
        return Ref("value", facts["module"], name)

    def _local_import(self, facts: dict[str, Any], name: str) -> dict[str, Any] | None:
        for imp in facts["imports"]:
            if imp["asname"] == name:
                if imp["name"] is None:
                    return {"kind": "module", "target": imp["module"]}
                return {"kind": "import", "target": f"{imp['module']}.{imp['name']}"}
        return None

    def resolve_import(self, target: str, depth: int = 0) -> Ref | None:
        """``pkg.mod.Name`` (from an import) to a module, class or function."""
        if self.module_exists(target):
            return Ref("module", target)
        module, _, name = target.rpartition(".")
        facts = self.facts(module)
        if facts is None:
            return None
        if name in facts["toplevel"] or self._local_import(facts, name):
            return self.resolve_name(facts, name, depth + 1)
        for star in facts["star_imports"]:
            if self.in_tree(star):
                found = self.resolve_import(f"{star}.{name}", depth + 1)
                if found is not None:
                    return found
        return None

    def resolve_dotted(self, facts: dict[str, Any], dotted: str) -> Ref | None:
        """``a.b.C`` seen in ``facts`` to what it names (modules and classes followed)."""
        head, *rest = dotted.split(".")
        ref = self.resolve_name(facts, head)
        for part in rest:
            if ref is None:
                return None
            ref = self.member(ref, part)
        return ref

    def member(self, ref: Ref, name: str) -> Ref | None:
        if ref.kind == "module":
            return self.resolve_import(f"{ref.module}.{name}")
        if ref.kind == "class":
            for cls_ref in self.mro(ref):
                facts = self.facts(cls_ref.module)
                qual = f"{cls_ref.qualname}.{name}"
                if facts and qual in facts["classes"]:
                    return Ref("class", cls_ref.module, qual)
                if facts and qual in facts["functions"]:
                    return Ref("function", cls_ref.module, qual)
        return None

    # -- classes --------------------------------------------------------------------------------
    def class_facts(self, ref: Ref) -> dict[str, Any] | None:
        facts = self.facts(ref.module)
        return facts["classes"].get(ref.qualname) if facts else None

    def bases(self, ref: Ref) -> list[Ref | str]:
        """The class's bases: resolved refs, or the base's text when it is outside the index."""
        cls = self.class_facts(ref)
        facts = self.facts(ref.module)
        out: list[Ref | str] = []
        for base in cls["bases"] if cls else ():
            resolved = self.resolve_dotted(facts, base) if facts else None
            out.append(resolved if resolved is not None and resolved.kind == "class" else base)
        return out

    def mro(self, ref: Ref) -> list[Ref]:
        """The class and its resolvable ancestors, depth first (good enough for member lookup)."""
        out: list[Ref] = []
        stack = [ref]
        while stack:
            current = stack.pop(0)
            if current in out:
                continue
            out.append(current)
            stack.extend(b for b in self.bases(current) if isinstance(b, Ref))
        return out

    def members(self, ref: Ref) -> Members:
        names: set[str] = set()
        complete, has_getattr, is_enum = True, False, False
        for cls_ref in self.mro(ref):
            cls = self.class_facts(cls_ref)
            if cls is None:
                complete = False
                continue
            names |= set(cls["attrs"]) | set(cls["self_assigned"])
            has_getattr |= cls["has_getattr"]
            for base in self.bases(cls_ref):
                if isinstance(base, Ref):
                    continue
                if base in ENUM_BASES:
                    is_enum = True
                known = KNOWN_BASES.get(base)
                if known is None:
                    complete = False
                else:
                    names |= set(dir(known))
        return Members(frozenset(names), complete, has_getattr, is_enum)

    # -- signatures -----------------------------------------------------------------------------
    def function_facts(self, ref: Ref) -> dict[str, Any] | None:
        facts = self.facts(ref.module)
        return facts["functions"].get(ref.qualname) if facts else None

    def signature(self, ref: Ref, bound: bool) -> list[list[Any]] | None:
        """Parameters of calling ``ref`` ([name, kind, has_default]); None when unknown.

        ``bound``: called through an instance or class attribute, so a method's first parameter
        is already supplied (unless it is a staticmethod)."""
        if ref.kind == "function":
            fn = self.function_facts(ref)
            if fn is None or any(d not in SIGNATURE_SAFE_DECORATORS for d in fn["decorators"]):
                return None
            params = list(fn["params"])
            if fn["class"] and "staticmethod" not in fn["decorators"] and (bound or "classmethod" in fn["decorators"]):
                params = params[1:]
            return params
        if ref.kind == "class":
            return self._constructor(ref)
        return None

    def _constructor(self, ref: Ref) -> list[list[Any]] | None:
        cls = self.class_facts(ref)
        if cls is None or cls["keywords"] or self.members(ref).is_enum:
            return None
        for cls_ref in self.mro(ref):
            facts = self.facts(cls_ref.module)
            if facts and f"{cls_ref.qualname}.__new__" in facts["functions"]:
                return None
            init = Ref("function", cls_ref.module, f"{cls_ref.qualname}.__init__")
            if facts and init.qualname in facts["functions"]:
                return self.signature(init, bound=True)
            info = self.class_facts(cls_ref)
            if info and info["dataclass"] is not None:
                return self._dataclass_fields(ref)
            if any(isinstance(b, str) and b not in ("object", "ABC", "abc.ABC") for b in self.bases(cls_ref)):
                return None  # an __init__ may come from a base we cannot see
        return []

    def _dataclass_fields(self, ref: Ref) -> list[list[Any]] | None:
        chain = [r for r in reversed(self.mro(ref)) if (self.class_facts(r) or {}).get("dataclass") is not None]
        positional: dict[str, list[Any]] = {}
        keyword_only: dict[str, list[Any]] = {}
        for cls_ref in chain:
            info = self.class_facts(cls_ref)
            assert info is not None  # the chain holds only classes with facts
            kw_all = bool(info["dataclass"].get("kw_only"))
            after_sentinel = False
            for f in info["fields"]:
                if f.get("kw_sentinel"):
                    after_sentinel = True
                    continue
                if not f["init"]:
                    continue
                target = keyword_only if (kw_all or after_sentinel or f["kw_only"]) else positional
                positional.pop(f["name"], None)
                keyword_only.pop(f["name"], None)
                target[f["name"]] = [f["name"], "pos" if target is positional else "kwonly", f["default"]]
        return list(positional.values()) + list(keyword_only.values())


def bind_problems(params: list[list[Any]], npos: int, keywords: list[str], star: bool, dstar: bool) -> list[str]:
    """Why a call with ``npos`` positional arguments and ``keywords`` does not fit ``params``."""
    positional = [p for p in params if p[1] in ("posonly", "pos")]
    by_name = {p[0]: p for p in params if p[1] in ("pos", "kwonly")}
    has_varargs = any(p[1] == "varargs" for p in params)
    has_varkw = any(p[1] == "varkw" for p in params)
    problems = []
    if not star and not has_varargs and npos > len(positional):
        problems.append(f"takes {len(positional)} positional argument(s) but {npos} were given")
    filled = {p[0] for p in positional[:npos]}
    for kw in keywords:
        if kw in filled and kw in by_name:
            problems.append(f"got multiple values for argument {kw!r}")
        elif kw not in by_name and not has_varkw:
            problems.append(f"got an unexpected keyword argument {kw!r}")
        if kw in by_name:  # a positional-only name passed by keyword lands in **kwargs, not the parameter
            filled.add(kw)
    if not star and not dstar:
        missing = [p[0] for p in params if p[1] in ("posonly", "pos", "kwonly") and not p[2] and p[0] not in filled]
        if missing:
            problems.append(f"missing required argument(s): {', '.join(missing)}")
    return problems
