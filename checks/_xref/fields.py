"""xref's field rules: the fields of a configuration record such as SGLang's ``ServerArgs``,
however the release declares and assigns them, and the keys of dicts the set builds.

A *field class* is declared in the manifest (``[verify.xref.fields]``)::

    classes = ["sglang.srt.server_args.ServerArgs"]           # records whose names are closed
    namespaces = { "sglang.srt.server_args.ServerArgs" = "_INPUT_NAMESPACES" }  # 0.5.23: merged groups
    setters = ["override"]                                     # its methods whose keywords are fields
    calls = { "get_spec().override" = "sglang.srt.arg_groups.fields.spec.Spec" }  # keywords of other calls

Its names are the class's own (dataclass fields, annotations, methods, ``self.X =`` and literal
``setattr`` in it), the fields of each class in its module's namespace list (0.5.23 assembles
``ServerArgs`` from the ``arg_groups/fields`` classes with ``msgspec.defstruct``) and the attributes its
module assigns on the class (``ServerArgs._NAMESPACES = ...``). A ``setattr(self, name, value)`` whose
name comes from a caller (0.5.17's ``override(**fields)``) no longer makes the record unknowable: the
callers' keywords are checked instead. Names with a leading underscore are bookkeeping the record
keeps outside its fields (``object.__setattr__``), so they are never reported.

On the lines the series adds:

- ``v.X`` read or written where ``v`` is a field class (the typed-attribute rule, ``names.py``);
- a keyword that is not a field in ``v.override(...)`` (a declared setter), ``dataclasses.replace(v, ...)``,
  ``ServerArgs(...)`` or a declared call (``get_spec().override(...)``), at the keyword's own line;
- ``d["key"]`` where ``d`` holds the result of a function of the index whose every ``return`` builds a
  dict with literal keys (``return dict(budget=..., topk=...)``) and ``key`` is none of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from patchkit.checks._xref.model import Model, Ref
from patchkit.errors import BadInput, location

REPLACE_CALLS = frozenset({"dataclasses.replace", "replace", "copy.replace"})


@dataclass(frozen=True)
class FieldProblem:
    file: str
    line: int | None
    message: str
    hint: str


@dataclass
class FieldClasses:
    """The declared field classes and what their names are (cached per class)."""

    model: Model
    config: dict[str, Any]
    _names: dict[Ref, frozenset[str]] = field(default_factory=dict)
    _closed: dict[str, Ref | None] = field(default_factory=dict)

    def resolve(self, target: str) -> Ref | None:
        if target not in self._closed:
            with self.model.loading():
                found = self.model.resolve_import(target)
            self._closed[target] = found if found is not None and found.kind == "class" else None
        return self._closed[target]

    def declared(self) -> list[Ref]:
        targets = list(self.config.get("classes", [])) + list(self.config.get("calls", {}).values())
        return [ref for ref in (self.resolve(t) for t in targets) if ref is not None]

    def is_field_class(self, ref: Ref) -> bool:
        return ref in self.declared()

    def names(self, ref: Ref) -> frozenset[str]:
        """Every name an instance of the field class ``ref`` has (see the module docstring)."""
        if ref not in self._names:
            with self.model.loading():
                names = set(self.model.members(ref).names)
                facts = self.model.facts(ref.module, load=True) or {}
                for class_name in self._namespaces(ref, facts):
                    names |= self._own_names(facts, class_name)
            for base, attr, _line, scope, ctx in facts.get("uses", []):
                if ctx == "store" and not scope and base == ref.qualname:
                    names.add(attr)  # `ServerArgs._NS_BY_FIELD = ...` at module level
            self._names[ref] = frozenset(names)
        return self._names[ref]

    def _namespaces(self, ref: Ref, facts: dict[str, Any]) -> list[str]:
        list_name = self.config.get("namespaces", {}).get(f"{ref.module}.{ref.qualname}")
        if not list_name:
            return []
        found = facts.get("name_lists", {}).get(list_name)
        if found is None:
            raise BadInput(f"[verify.xref.fields] namespaces: {ref.module} has no module-level list {list_name}",
                           hint="name the list of namespace classes the record is assembled from",
                           location=location("manifest.toml"))
        return list(found)

    def _own_names(self, facts: dict[str, Any], dotted: str) -> set[str]:
        ref = self.model.resolve_dotted(facts, dotted)
        if ref is None or ref.kind != "class":
            return set()
        out: set[str] = set()
        for cls_ref in self.model.mro(ref):  # a namespace's own fields and those of its indexed bases
            cls = self.model.class_facts(cls_ref) or {}
            out |= {f["name"] for f in cls.get("fields", [])} | set(cls.get("attrs", []))
        return out

    def defines(self, ref: Ref, attr: str) -> bool | None:
        """None when ``ref`` is not a field class, or the name is private bookkeeping."""
        if not self.is_field_class(ref) or attr.startswith("_"):
            return None
        return attr in self.names(ref)


class FieldRules:
    """The keyword and dict-key rules of the module docstring, over the added lines of one file."""

    def __init__(self, fields: FieldClasses, types: Any):
        self.fields = fields
        self.types = types  # names.TypeIndex (not imported: names.py imports this module)
        self.setters = frozenset(fields.config.get("setters", []))
        self.calls: dict[str, str] = dict(fields.config.get("calls", {}))

    def check(self, facts: dict[str, Any], added: frozenset[int]) -> Iterator[FieldProblem]:
        if self.fields.declared():
            for call in facts.get("kwcalls", []):
                if call["line"] in added or any(line in added for line in call["kw"].values()):
                    yield from self._keywords(facts, call)
        yield from self._dict_keys(facts, added)

    def _record_of_call(self, facts: dict[str, Any], call: dict[str, Any]) -> tuple[Ref | None, str]:
        """The field class whose fields the call's keywords must name, and how to say the call."""
        callee, scope, cls = call["callee"], call["scope"], call["cls"]
        if callee in self.calls:
            return self.fields.resolve(self.calls[callee]), f"{callee}(...)"
        receiver, _, method = callee.rpartition(".")
        if receiver and method in self.setters and "(" not in receiver:
            return self.types.of_expression(facts, receiver, scope, cls), f"{callee}(...)"
        if callee in REPLACE_CALLS and call["first"]:
            return self.types.of_expression(facts, call["first"], scope, cls), f"{callee}({call['first']}, ...)"
        if "(" not in callee:
            with self.fields.model.loading():
                ref = self.fields.model.resolve_dotted(facts, callee)
            if ref is not None and ref.kind == "class":
                return ref, f"{callee}(...)"
        return None, callee

    def _keywords(self, facts: dict[str, Any], call: dict[str, Any]) -> Iterator[FieldProblem]:
        ref, said = self._record_of_call(facts, call)
        if ref is None or not self.fields.is_field_class(ref):
            return
        names = self.fields.names(ref)
        for keyword, line in call["kw"].items():
            if keyword.startswith("_") or keyword in names:
                continue
            yield FieldProblem(facts["path"], line, f"{said} sets {keyword}, which is not a field of "
                               f"{ref.qualname} ({ref.module})", f"use a field of {ref.qualname}, or fix the name")

    def _dict_keys(self, facts: dict[str, Any], added: frozenset[int]) -> Iterator[FieldProblem]:
        for base, key, line, scope in facts.get("subscripts", []):
            if line not in added or not scope or "." in base:
                continue
            built = self._built_by(facts, base, scope)
            if built is None:
                continue
            function, keys = built
            if key not in keys:
                yield FieldProblem(facts["path"], line,
                                   f"`{base}[{key!r}]` reads key {key!r}, but {function.qualname}() "
                                   f"({function.module}) returns a dict with keys {', '.join(sorted(keys))} only",
                                   f"use one of its keys, or add {key!r} to what {function.qualname}() returns")

    def _built_by(self, facts: dict[str, Any], local: str, scope: str) -> tuple[Ref, frozenset[str]] | None:
        """The function whose literal-key dict the local ``local`` of ``scope`` holds, and its keys."""
        fn = facts["functions"].get(scope)
        hint = (fn or {}).get("locals", {}).get(local, "")
        if not hint.startswith("call:") or "." in hint[5:]:
            return None
        with self.fields.model.loading():
            ref = self.fields.model.resolve_dotted(facts, hint[5:])
        target = self.fields.model.function_facts(ref) if ref is not None and ref.kind == "function" else None
        returns = (target or {}).get("dict_returns", [])
        if ref is None or not returns or any(keys is None for keys in returns):
            return None
        return ref, frozenset(k for keys in returns for k in keys)
