"""xref's rules for names OUTSIDE the symbol family, in the code the series adds.

The family rules follow DDTREE/DDTree/ddtree names everywhere; these follow every attribute, but
only on the lines the series adds or changes (``facts.added_lines``), so the base's own code, which
the set does not own, never produces a finding:

- ``self.X`` read in a class: X is defined by the class or its indexed bases (methods, class
  attributes, dataclass fields, ``self.X =`` anywhere in them), or by the class's declared dynamic
  source when it forwards unknown names with ``__getattr__`` (``[verify.xref] dynamic``);
- ``v.X`` read or written where the type of ``v`` is known: an annotated parameter, a local built by
  a class or by a function with a return annotation, a copy of a typed value (``deepcopy(server_args)``),
  ``self.attr`` typed through its assignment, chains of these (``self.model_runner.server_args``):
  X must be a field or member of that type, or of a class an ``isinstance(v, ...)`` check earlier in
  the function narrows ``v`` to (``verify_input = batch.spec_info`` is typed by the base class
  ``SpecInput``; after ``assert isinstance(verify_input, DDTreeVerifyInput if tree else
  DFlashVerifyInput)`` it may be either subclass). Narrowing only adds possible types: the branch is
  not tracked, so X is reported only when none of them defines it;
- a method without ``@property`` read as a value (an operand, ``range()``'s argument, a loop's
  iterable, directly or through one local): reported at the method's own ``def``, where the decorator
  went missing;
- ``self.X`` read before anything assigns it, where X exists but ``__init__`` never sets it (a lazily
  set attribute whose initialisation went missing; ``selfinit.py``, family names included).

Whenever a type or a class's members cannot be known from the index (a base outside the tree, a
class that sets attributes with ``setattr``), the rule says nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from patchkit.checks._xref.fields import FieldClasses, FieldRules
from patchkit.checks._xref.model import Members, Model, Ref
from patchkit.checks._xref.selfinit import SelfInitRule

PROPERTY_DECORATORS = frozenset({"property", "cached_property", "functools.cached_property"})
_OPTIONAL = re.compile(r"^(?:typing\.)?Optional\[(.*)\]$")
_UNION_NONE = re.compile(r"^(?:typing\.)?Union\[(.*),\s*None\]$")
_DOTTED = re.compile(r"[A-Za-z_][\w.]*")


def annotation_class(text: str) -> str | None:
    """The class an annotation names: ``"X"``, ``Optional[X]``, ``X | None``, ``Union[X, None]``;
    None for anything else (generics, unions of classes, strings that are not names)."""
    text = text.strip().strip("\"'").strip()
    for _ in range(4):
        match = _OPTIONAL.match(text) or _UNION_NONE.match(text)
        if match:
            text = match.group(1).strip().strip("\"'").strip()
            continue
        parts = [p.strip() for p in text.split("|")]
        if len(parts) == 2 and "None" in parts:
            text = next(p for p in parts if p != "None").strip("\"'")
            continue
        break
    return text if _DOTTED.fullmatch(text) and text != "None" else None


@dataclass
class TypeIndex:
    """What the index knows about the type of a name, a ``self`` attribute or a dotted chain."""

    model: Model
    typed_names: dict[str, str]  # [verify.xref] typed_names: parameter name -> class (dotted import path)

    def class_ref(self, facts: dict[str, Any], dotted: str) -> Ref | None:
        with self.model.loading():
            ref = self.model.resolve_dotted(facts, dotted)
        return ref if ref is not None and ref.kind == "class" else None

    def of_annotation(self, facts: dict[str, Any], text: str | None) -> Ref | None:
        name = annotation_class(text) if text else None
        return self.class_ref(facts, name) if name else None

    def of_function_result(self, ref: Ref) -> Ref | None:
        fn = self.model.function_facts(ref)
        facts = self.model.facts(ref.module, load=True)
        if fn is None or facts is None or not fn.get("returns"):
            return None
        return self.of_annotation(facts, fn["returns"])

    def of_hint(self, facts: dict[str, Any], hint: str | None, scope: str, cls: str | None, depth: int) -> Ref | None:
        if not hint or hint == "?" or depth > 6:
            return None
        kind, _, value = hint.partition(":")
        if kind == "ann":
            return self.of_annotation(facts, value)
        if kind == "call":
            if value.startswith("self.") and cls and value.count(".") == 1:
                with self.model.loading():
                    callee = self.model.member(Ref("class", facts["module"], cls), value[5:])
            else:
                with self.model.loading():
                    callee = self.model.resolve_dotted(facts, value)
            if callee is None:
                return None
            if callee.kind == "class":
                return callee
            return self.of_function_result(callee) if callee.kind == "function" else None
        if kind == "same":
            return self.of_expression(facts, value, scope, cls, depth + 1)
        return None

    def of_name(self, facts: dict[str, Any], name: str, scope: str, cls: str | None, depth: int) -> Ref | None:
        """A local or parameter of the function ``scope`` (or of the functions around it)."""
        qual = scope
        while qual:
            fn = facts["functions"].get(qual)
            if fn is not None:
                hint = fn["locals"].get(name)
                if hint is not None:
                    return self.of_hint(facts, hint, qual, cls, depth)
                if name in fn["param_types"]:
                    return self.of_annotation(facts, fn["param_types"][name])
                if any(p[0] == name for p in fn["params"]):
                    return self._declared_name(facts, name)
            qual = qual.rpartition(".")[0]
        return None

    def _declared_name(self, facts: dict[str, Any], name: str) -> Ref | None:
        target = self.typed_names.get(name)
        if not target:
            return None
        with self.model.loading():
            ref = self.model.resolve_import(target)
        return ref if ref is not None and ref.kind == "class" else None

    def narrowed_to(self, facts: dict[str, Any], dotted: str, scope: str, line: int) -> list[Ref | None]:
        """The classes the ``isinstance(dotted, ...)`` checks of ``scope`` (and of the functions around
        it) at or before ``line`` say ``dotted`` may be; None for a class the index cannot resolve."""
        out: list[Ref | None] = []
        qual = scope
        while qual:
            fn = facts["functions"].get(qual)
            for at, classes in (fn or {}).get("narrowed", {}).get(dotted, []):
                if at <= line:
                    out.extend(self.class_ref(facts, name) if name != "?" else None for name in classes)
            qual = qual.rpartition(".")[0]
        return out

    def of_attribute(self, ref: Ref, attr: str, depth: int) -> Ref | None:
        """The type of ``instance_of_ref.attr``: its ``self.attr = ...`` assignments, a field or
        class annotation, or a property's return annotation."""
        with self.model.loading():
            chain = self.model.mro(ref)
        for cls_ref in chain:
            cls = self.model.class_facts(cls_ref)
            facts = self.model.facts(cls_ref.module, load=True)
            if cls is None or facts is None:
                continue
            hint = cls.get("self_types", {}).get(attr)
            if hint is not None:
                if hint.startswith("same:"):
                    return None  # relative to a method's locals, which are not known here
                return self.of_hint(facts, hint, "", cls_ref.qualname, depth + 1)
            for field in cls["fields"]:
                if field["name"] == attr and field.get("annotation"):
                    return self.of_annotation(facts, field["annotation"])
            fn = facts["functions"].get(f"{cls_ref.qualname}.{attr}")
            if fn is not None and set(fn["decorators"]) & PROPERTY_DECORATORS:
                return self.of_annotation(facts, fn.get("returns"))
        return None

    def of_expression(self, facts: dict[str, Any], dotted: str, scope: str, cls: str | None,
                      depth: int = 0) -> Ref | None:
        """The instance type of ``a.b.c`` evaluated in ``scope`` (``self`` is an instance of ``cls``)."""
        head, *rest = dotted.split(".")
        if head == "self":
            ref = Ref("class", facts["module"], cls) if cls else None
        else:
            ref = self.of_name(facts, head, scope, cls, depth)
        for part in rest:
            if ref is None:
                return None
            ref = self.of_attribute(ref, part, depth)
        return ref


@dataclass(frozen=True)
class NameProblem:
    file: str
    line: int | None
    message: str
    hint: str


def class_of(facts: dict[str, Any], scope: str) -> str | None:
    """The innermost class whose methods (or their nested functions) make up ``scope``."""
    best = None
    for qual in facts["classes"]:
        if (scope.startswith(qual + ".")) and (best is None or len(qual) > len(best)):
            best = qual
    return best


class AddedCodeRules:
    """The rules of the module docstring over the added lines of the touched files."""

    def __init__(self, model: Model, config: dict[str, Any], family: Callable[[str], Any]):
        self.model = model
        self.types = TypeIndex(model, dict(config.get("typed_names", {})))
        self.dynamic: dict[str, list[str]] = {
            cls: [targets] if isinstance(targets, str) else list(targets)
            for cls, targets in config.get("dynamic", {}).items()
        }
        self.family = family  # family names keep their own (tree-wide) rule
        self.fields = FieldClasses(model, dict(config.get("fields", {})))
        self.field_rules = FieldRules(self.fields, self.types)
        self.self_init = SelfInitRule(model, self)

    # -- members --------------------------------------------------------------------------------
    def _members(self, ref: Ref) -> Members:
        with self.model.loading():
            return self.model.members(ref)

    def _dynamic_class(self, ref: Ref) -> bool:
        with self.model.loading():
            chain = self.model.mro(ref)
        return any((self.model.class_facts(r) or {}).get("dynamic_self") for r in chain)

    def getattr_owner(self, ref: Ref) -> Ref | None:
        """The class whose ``__getattr__`` instances of ``ref`` use: ``ref`` or the first base with one."""
        with self.model.loading():
            chain = self.model.mro(ref)
        return next((r for r in chain if {"__getattr__", "__getattribute__"} & set(
            (self.model.class_facts(r) or {}).get("attrs", ()))), None)

    def _forwarded(self, ref: Ref) -> list[Ref] | None:
        """The declared dynamic sources of a ``__getattr__`` class (None when undeclared); a subclass
        forwards where the base whose ``__getattr__`` it inherits is declared to."""
        targets = self.dynamic.get(f"{ref.module}.{ref.qualname}")
        owner = self.getattr_owner(ref) if targets is None else None
        if owner is not None:
            targets = self.dynamic.get(f"{owner.module}.{owner.qualname}")
        if targets is None:
            return None
        out = []
        for target in targets:
            with self.model.loading():
                found = self.model.resolve_import(target)
            if found is not None and found.kind == "class":
                out.append(found)
        return out

    def defines(self, ref: Ref, attr: str) -> bool | None:
        """Whether instances of ``ref`` have ``attr``; None when that cannot be known."""
        if self.fields.is_field_class(ref):
            return self.fields.defines(ref, attr)  # closed: a caller-named setattr does not open it
        members = self._members(ref)
        if attr in members.names:
            return True
        if not members.complete or self._dynamic_class(ref):
            return None
        if members.has_getattr:
            sources = self._forwarded(ref)
            if sources is None:
                return None
            answers = [self.defines(source, attr) for source in sources]
            return True if True in answers else (None if None in answers else False)
        return False

    # -- the rules ------------------------------------------------------------------------------
    def check(self, facts: dict[str, Any], added: frozenset[int]) -> Iterator[NameProblem]:
        seen: set[tuple[str, str, int | None]] = set()
        for base, attr, line, scope, ctx in facts["uses"]:
            if line not in added or not scope or attr.startswith("__") or (base, attr, line) in seen:
                continue
            seen.add((base, attr, line))
            cls = class_of(facts, scope)
            if base == "self":
                if ctx in ("store", "del") or cls is None or self.family(attr):
                    continue  # family names: the tree-wide self-read rule
                problem = self._self_read(facts, cls, attr, line)
            else:
                problem = self._typed_use(facts, base, attr, line, scope, cls, ctx)
            if problem is not None:
                yield problem
        yield from self._methods_used_as_values(facts, added)
        for found in self.field_rules.check(facts, added):
            yield NameProblem(found.file, found.line, found.message, found.hint)
        for unset in self.self_init.check(facts, added):
            yield NameProblem(unset.file, unset.line, unset.message, unset.hint)

    def _self_read(self, facts: dict[str, Any], cls: str, attr: str, line: int) -> NameProblem | None:
        ref = Ref("class", facts["module"], cls)
        if self.defines(ref, attr) is not False:
            return None
        sources = self._forwarded(ref) if self._members(ref).has_getattr else None
        via = f" (nor its declared dynamic source {', '.join(s.qualname for s in sources)})" if sources else ""
        return NameProblem(facts["path"], line, f"self.{attr} is read in {cls}, but neither {cls} nor its bases "
                           f"define {attr}{via}", f"fix the name, or define {attr} in {cls}")

    def _typed_use(self, facts: dict[str, Any], base: str, attr: str, line: int, scope: str, cls: str | None,
                   ctx: str) -> NameProblem | None:
        ref = self.types.of_expression(facts, base, scope, cls)
        if ref is None or self.defines(ref, attr) is not False:
            return None
        narrowed: list[Ref] = []
        for other in self.types.narrowed_to(facts, base, scope, line):
            if other is None or self.defines(other, attr) is not False:
                return None  # an isinstance check says it may be a class that has it (or one not known)
            narrowed.append(other)
        verb = "assigns" if ctx == "store" else "reads"
        names = list(dict.fromkeys(n.qualname for n in narrowed if n != ref))
        nor = f", nor {' or '.join(names)}, which an isinstance check narrows {base} to" if names else ""
        return NameProblem(facts["path"], line, f"`{base}.{attr}` {verb} {attr}, which {ref.qualname} "
                           f"({ref.module}) does not define{nor}", f"use a field of {ref.qualname}, or fix the name")

    def _methods_used_as_values(self, facts: dict[str, Any], added: frozenset[int]) -> Iterator[NameProblem]:
        through_locals: dict[tuple[str, str], str] = {}  # (scope, "a.b") -> local that holds it as a value
        for qual, fn in facts["functions"].items():
            for local, hint in fn["locals"].items():
                if hint.startswith("same:") and "." in hint and local in fn["value_names"]:
                    through_locals[(qual, hint[5:])] = local
        for base, attr, line, scope, ctx in facts["uses"]:
            if line not in added or not scope:
                continue
            if ctx != "value" and (scope, f"{base}.{attr}") not in through_locals:
                continue
            cls = class_of(facts, scope)
            ref = self.types.of_expression(facts, base, scope, cls)
            if ref is None:
                continue
            with self.model.loading():
                method = self.model.member(ref, attr)
            fn = self.model.function_facts(method) if method is not None and method.kind == "function" else None
            if fn is None or set(fn["decorators"]) & PROPERTY_DECORATORS or fn["decorators"]:
                continue
            if [p[0] for p in fn["params"]] != ["self"]:
                continue  # only property-shaped methods: one that takes arguments is a callable on purpose
            def_file = self.model.index.module_file(method.module) or facts["path"]  # type: ignore[union-attr]
            yield NameProblem(def_file, fn["line"],
                              f"{method.qualname}() is a method without @property, but {facts['path']}:{line} "  # type: ignore[union-attr]
                              f"uses `{base}.{attr}` as a value", f"put @property back on {attr}, or call it")
