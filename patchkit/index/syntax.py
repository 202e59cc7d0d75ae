"""Small readers of ``ast`` nodes that every visitor shares: dotted names, string literals, expression
text made layout-free, parameters, decorators, dataclass options, type hints, and the children of a
node in source order."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence
from typing import Any


def dotted(node: ast.AST | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def string_value(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


_WS = re.compile(r"\s+")
_TIGHT = re.compile(r"\s*([()\[\]{},.:])\s*")
_COMMENT = re.compile(r"#[^\n]*")


def normalise_expression(code: str) -> str:
    """Source text of an expression with comments and layout removed, so line shifts and
    reformatting do not change a dispatch site's identity."""
    text = _WS.sub(" ", _COMMENT.sub("", code)).strip()
    text = _TIGHT.sub(r"\1", text)
    return text.replace(",)", ")").replace(",]", "]").replace(",}", "}")


def canonical_expression(code: str) -> str:
    """:func:`normalise_expression`, with the members of set literals (and of ``frozenset`` /
    ``set`` calls over one literal) sorted: reordering a set changes nothing it means."""
    normal = normalise_expression(code)
    if "{" not in normal:
        return normal
    try:
        tree = ast.parse(normal, mode="eval")
    except SyntaxError:
        return normal
    spans: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Set) and all(getattr(e, "end_col_offset", None) is not None for e in node.elts):
            parts = sorted(normal[e.col_offset:e.end_col_offset] for e in node.elts)
            spans.append((node.col_offset, node.end_col_offset, "{" + ",".join(parts) + "}"))  # type: ignore[arg-type]
    for start, end, replacement in sorted(spans, reverse=True):
        if not any(s < start and end < e for s, e, _ in spans):  # outermost sets only: inner ones sort inside
            normal = normal[:start] + replacement + normal[end:]
    return normal


def params(node: ast.arguments) -> list[list[Any]]:
    """[[name, kind, has_default]] with kind in posonly/pos/varargs/kwonly/varkw."""
    positional = [(a, "posonly") for a in node.posonlyargs] + [(a, "pos") for a in node.args]
    first_default = len(positional) - len(node.defaults)
    out: list[list[Any]] = [[a.arg, kind, i >= first_default] for i, (a, kind) in enumerate(positional)]
    if node.vararg is not None:
        out.append([node.vararg.arg, "varargs", False])
    for a, default in zip(node.kwonlyargs, node.kw_defaults, strict=True):
        out.append([a.arg, "kwonly", default is not None])
    if node.kwarg is not None:
        out.append([node.kwarg.arg, "varkw", False])
    return out


def decorator_names(decorators: Sequence[ast.expr]) -> list[str]:
    return [dotted(d.func if isinstance(d, ast.Call) else d) or "?" for d in decorators]


def _bool_option(value: ast.AST) -> bool | None:
    """A decorator or ``field()`` option: True/False literals; any other name reads as False."""
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return value.value
    return False if isinstance(value, ast.Name) else None


def dataclass_options(decorators: Sequence[ast.expr]) -> dict[str, Any] | None:
    for d in decorators:
        call = d if isinstance(d, ast.Call) else None
        name = dotted(call.func if call else d) or ""
        if name.split(".")[-1] != "dataclass":
            continue
        options: dict[str, Any] = {}
        for kw in call.keywords if call else ():
            value = _bool_option(kw.value)
            if kw.arg and value is not None:
                options[kw.arg] = value
        return options
    return None


def field_call_options(value: ast.AST | None) -> dict[str, bool]:
    """For ``x: T = field(...)``: whether it is in __init__, has a default, is keyword-only."""
    opts = {"init": True, "default": value is not None, "kw_only": False}
    if isinstance(value, ast.Call) and (dotted(value.func) or "").split(".")[-1] == "field":
        opts["default"] = False
        for kw in value.keywords:
            if kw.arg in ("default", "default_factory"):
                opts["default"] = True
            elif kw.arg in ("init", "kw_only") and (flag := _bool_option(kw.value)) is not None:
                opts[kw.arg] = flag
    return opts


def assigned_names(target: ast.AST) -> Iterator[ast.AST]:
    """Every elementary target of an assignment (unpacks tuples, lists, starred)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for el in target.elts:
            yield from assigned_names(el)
    elif isinstance(target, ast.Starred):
        yield from assigned_names(target.value)
    else:
        yield target


#: Calls whose result has the type of their first argument (``x = deepcopy(server_args)``).
COPY_CALLS = frozenset({"deepcopy", "copy.deepcopy", "copy.copy", "copy", "dataclasses.replace", "replace"})
#: Builtins whose argument is used as a number or a sequence, never as a callable.
VALUE_CALLS = frozenset({"range", "int", "float", "len", "min", "max", "sum", "abs", "round", "bool", "str"})
VALUE_PARENTS = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.AugAssign, ast.FormattedValue)


def type_hint(value: ast.AST, params: dict[str, str], local_hints: dict[str, str] | None = None) -> str | None:
    """What the value assigned to a name or ``self`` attribute says about its type, as a hint the
    xref gate resolves later: ``ann:T`` (an annotation), ``call:f`` (``f(...)``'s result: a class
    or a function's return annotation), ``same:x`` (a copy of, or the same object as, ``x``)."""
    if isinstance(value, ast.Call):
        func = dotted(value.func)
        if func in COPY_CALLS and value.args:
            source = dotted(value.args[0])
            return f"same:{source}" if source else None
        return f"call:{func}" if func else None
    source = dotted(value)
    if source is None:
        return None
    if source in params:
        return f"ann:{params[source]}"
    if local_hints and local_hints.get(source, "?") != "?":
        return local_hints[source]
    return f"same:{source}"


def literal_keys(node: ast.AST | None) -> list[str] | None:
    """The keys of ``dict(a=..., b=...)`` or ``{"a": ..., "b": ...}``; None for any other value."""
    if isinstance(node, ast.Call) and dotted(node.func) == "dict" and not node.args:
        names = [k.arg for k in node.keywords]
        return None if None in names else [n for n in names if n is not None]
    if isinstance(node, ast.Dict):
        keys = [string_value(k) if k is not None else None for k in node.keys]
        return None if None in keys else [k for k in keys if k is not None]
    return None


def receiver_call_text(func: ast.AST) -> str | None:
    """``get_spec().override`` for a method called on the result of a call (no dotted name)."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and not func.value.args:
        inner = dotted(func.value.func)
        return f"{inner}().{func.attr}" if inner else None
    return None


def isinstance_classes(node: ast.AST) -> list[str]:
    """The classes ``isinstance``'s second argument may name: a class, a tuple of them, either side
    of ``A if cond else B``; ``"?"`` for anything else (a variable, a call), whose class is unknown."""
    if isinstance(node, ast.Tuple):
        return [name for el in node.elts for name in isinstance_classes(el)]
    if isinstance(node, ast.IfExp):
        return isinstance_classes(node.body) + isinstance_classes(node.orelse)
    return [dotted(node) or "?"]


# Children in source order (ast's field order puts decorators after the body, IfExp's test first).
_CHILD_ORDER: dict[type, tuple[str, ...]] = {
    ast.FunctionDef: ("decorator_list", "args", "returns", "body"),
    ast.AsyncFunctionDef: ("decorator_list", "args", "returns", "body"),
    ast.ClassDef: ("decorator_list", "bases", "keywords", "body"),
    ast.IfExp: ("body", "test", "orelse"),
}


def children(node: ast.AST) -> Iterator[ast.AST]:
    order = _CHILD_ORDER.get(type(node))
    if order is None:
        yield from ast.iter_child_nodes(node)
        return
    for name in order:
        value = getattr(node, name, None)
        if isinstance(value, list):
            yield from (v for v in value if isinstance(v, ast.AST))
        elif isinstance(value, ast.AST):
            yield value
