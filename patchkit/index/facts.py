"""A cached index of Python facts for the static gates (xref, dispatch).

Pipeline: a bytes-regex prefilter over the tree picks the files worth parsing; each picked file is
parsed once with the standard library's ``ast`` and one recursive pass extracts its *facts*
(definitions, imports, calls, attribute references and uses, ``self`` attribute reads and writes with
what they are assigned, the classes ``isinstance`` checks narrow a value to, algorithm dispatch sites,
the family helpers' definitions). Facts are plain
JSON, cached under ``<cache_dir>/pyindex/`` keyed by the file's content hash plus the extraction
settings, so a warm run reads JSON instead of parsing.

Why ``ast`` and not libcst: the facts need source text of expressions (``ast.get_source_segment``)
and line numbers, never a lossless tree; ``ast.parse`` plus one pass costs about a tenth of
libcst's parse (61 files of the v1 tree: ~2 s instead of ~25 s of CPU on this 2-core machine).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from patchkit.manifest import Manifest

FACTS_SCHEMA = 12  # bump when the facts layout or extraction logic changes

# Spec-algorithm helpers whose call is a dispatch site.
DEFAULT_HELPERS = (
    "is_dflash",
    "is_eagle",
    "is_eagle3",
    "is_standalone",
    "is_ngram",
    "is_frozen_kv_mtp",
    "is_ddtree",
    "is_dflash_family",
    "supports_spec_v2",
)
# Algorithm names that make a string comparison a dispatch site.
DEFAULT_ALGORITHM_NAMES = (
    "DFLASH",
    "DDTREE",
    "EAGLE",
    "EAGLE3",
    "NEXTN",
    "STANDALONE",
    "NGRAM",
    "FROZEN_KV_MTP",
)
DEFAULT_ENUM = "SpeculativeAlgorithm"


@dataclass(frozen=True)
class IndexSettings:
    """What the extraction looks for; part of every cache key."""

    family: str  # regex of the symbol family, e.g. "DDTREE|DDTree|ddtree"
    helpers: tuple[str, ...] = DEFAULT_HELPERS
    algorithm_names: tuple[str, ...] = DEFAULT_ALGORITHM_NAMES
    enum_name: str = DEFAULT_ENUM
    source_root: str = "python"  # tree-relative directory that is the import root
    member_enums: tuple[str, ...] = ()  # enums whose members listed in a collection make a dispatch site

    def key(self) -> str:
        raw = json.dumps([FACTS_SCHEMA, self.family, self.helpers, self.algorithm_names, self.enum_name,
                          self.source_root, self.member_enums])
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def family_re(self) -> re.Pattern[str]:
        return re.compile(self.family)


# ---------------------------------------------------------------------------------------------
# Prefilter


def python_files(root: Path, source_root: str) -> list[str]:
    """Tree-relative paths of every ``.py`` file under ``root/source_root``, sorted."""
    base = root / source_root
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for name in filenames:
            if name.endswith(".py"):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(found)


def prefilter(root: Path, files: Iterable[str], pattern: bytes) -> list[str]:
    """The files whose bytes match ``pattern`` (one read and one regex search per file)."""
    regex = re.compile(pattern)
    hits = []
    for rel in files:
        try:
            data = (root / rel).read_bytes()
        except OSError:
            continue
        if regex.search(data):
            hits.append(rel)
    return hits


@dataclass(frozen=True)
class Scan:
    """One pass over the tree's Python files: the family hits (xref) and the dispatch hits."""

    files: tuple[str, ...]
    family: tuple[str, ...]
    dispatch: tuple[str, ...]


_SCANS: dict[tuple[str, str], tuple[dict[str, tuple[int, int]], Scan]] = {}


def scan(root: Path, settings: IndexSettings, cache_dir: Path | None = None) -> Scan:
    """Prefilter the tree for both the family and the dispatch patterns with one read per file.

    Memoised per process, and with ``cache_dir`` across runs, on each file's (size, mtime): xref and
    dispatch run one after the other in one ``patchkit verify``, and a warm run only stats the tree
    and reads the files that changed."""
    files = python_files(root, settings.source_root)
    stats = {rel: ((st := (root / rel).stat()).st_size, st.st_mtime_ns) for rel in files}
    memo_key = (str(root.resolve()), settings.key())
    cached = _SCANS.get(memo_key)
    if cached is not None and cached[0] == stats:
        return cached[1]
    store = (cache_dir / "pyindex" / settings.key() /
             f"scan-{hashlib.sha256(memo_key[0].encode()).hexdigest()[:16]}.json") if cache_dir else None
    known: dict[str, list[Any]] = {}
    if store is not None and store.is_file():
        try:
            known = json.loads(store.read_text())
        except ValueError:
            known = {}
    family, dispatch = re.compile(settings.family.encode()), re.compile(dispatch_pattern(settings))
    # Literal substrings every dispatch hit contains: `in` on bytes is ~2x cheaper than the regex,
    # which then only runs on the few files that pass.
    literals = ([f"{h}(".encode() for h in settings.helpers] + [f"{settings.enum_name}.".encode()]
                + [f"{e}.".encode() for e in settings.member_enums] + [n.encode() for n in settings.algorithm_names])
    fresh: dict[str, list[Any]] = {}
    for rel in files:
        size, mtime = stats[rel]
        entry = known.get(rel)
        if entry is None or entry[0] != size or entry[1] != mtime:
            data = (root / rel).read_bytes()
            entry = [size, mtime, bool(family.search(data)), any(lit in data for lit in literals)
                     and bool(dispatch.search(data))]
        fresh[rel] = entry
    if store is not None and fresh != known:
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = store.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(fresh))
        tmp.replace(store)
    result = Scan(tuple(files), tuple(r for r in files if fresh[r][2]), tuple(r for r in files if fresh[r][3]))
    _SCANS[memo_key] = (stats, result)
    return result


def dispatch_pattern(settings: IndexSettings) -> bytes:
    """Bytes regex that every file holding a dispatch site matches."""
    helpers = "|".join(map(re.escape, settings.helpers))
    names = "|".join(map(re.escape, settings.algorithm_names))
    enums = "|".join(map(re.escape, (settings.enum_name, *settings.member_enums)))
    return (rf"\.(?:{helpers})\(|(?:{enums})\.|[\"'](?:{names})[\"']").encode()


# ---------------------------------------------------------------------------------------------
# Module naming


def module_name(rel: str, source_root: str) -> tuple[str, bool]:
    """``python/sglang/srt/x.py`` -> ``("sglang.srt.x", False)``; ``__init__.py`` -> package True."""
    prefix = source_root.rstrip("/") + "/"
    path = rel[len(prefix):] if rel.startswith(prefix) else rel
    parts = (path[:-3] if path.endswith(".py") else path).split("/")
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module named by ``from <dots><target> import ...`` inside ``module``."""
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    if target:
        parts.append(target)
    return ".".join(parts)


# ---------------------------------------------------------------------------------------------
# Fact extraction (one recursive pass over the ``ast`` of a module)


def dotted(node: ast.AST | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _string_value(node: ast.AST | None) -> str | None:
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


def _params(node: ast.arguments) -> list[list[Any]]:
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


def _decorator_names(decorators: Sequence[ast.expr]) -> list[str]:
    return [dotted(d.func if isinstance(d, ast.Call) else d) or "?" for d in decorators]


def _bool_option(value: ast.AST) -> bool | None:
    """A decorator or ``field()`` option: True/False literals; any other name reads as False."""
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return value.value
    return False if isinstance(value, ast.Name) else None


def _dataclass_options(decorators: Sequence[ast.expr]) -> dict[str, Any] | None:
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


def _field_call_options(value: ast.AST | None) -> dict[str, bool]:
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


def _assigned_names(target: ast.AST) -> Iterator[ast.AST]:
    """Every elementary target of an assignment (unpacks tuples, lists, starred)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for el in target.elts:
            yield from _assigned_names(el)
    elif isinstance(target, ast.Starred):
        yield from _assigned_names(target.value)
    else:
        yield target


#: Calls whose result has the type of their first argument (``x = deepcopy(server_args)``).
COPY_CALLS = frozenset({"deepcopy", "copy.deepcopy", "copy.copy", "copy", "dataclasses.replace", "replace"})
#: Builtins whose argument is used as a number or a sequence, never as a callable.
VALUE_CALLS = frozenset({"range", "int", "float", "len", "min", "max", "sum", "abs", "round", "bool", "str"})
_VALUE_PARENTS = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.AugAssign, ast.FormattedValue)


def _type_hint(value: ast.AST, params: dict[str, str], local_hints: dict[str, str] | None = None) -> str | None:
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


def _literal_keys(node: ast.AST | None) -> list[str] | None:
    """The keys of ``dict(a=..., b=...)`` or ``{"a": ..., "b": ...}``; None for any other value."""
    if isinstance(node, ast.Call) and dotted(node.func) == "dict" and not node.args:
        names = [k.arg for k in node.keywords]
        return None if None in names else [n for n in names if n is not None]
    if isinstance(node, ast.Dict):
        keys = [_string_value(k) if k is not None else None for k in node.keys]
        return None if None in keys else [k for k in keys if k is not None]
    return None


def _receiver_call_text(func: ast.AST) -> str | None:
    """``get_spec().override`` for a method called on the result of a call (no dotted name)."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and not func.value.args:
        inner = dotted(func.value.func)
        return f"{inner}().{func.attr}" if inner else None
    return None


def _isinstance_classes(node: ast.AST) -> list[str]:
    """The classes ``isinstance``'s second argument may name: a class, a tuple of them, either side
    of ``A if cond else B``; ``"?"`` for anything else (a variable, a call), whose class is unknown."""
    if isinstance(node, ast.Tuple):
        return [name for el in node.elts for name in _isinstance_classes(el)]
    if isinstance(node, ast.IfExp):
        return _isinstance_classes(node.body) + _isinstance_classes(node.orelse)
    return [dotted(node) or "?"]


class _Scope:
    __slots__ = ("cls", "function", "kind", "name", "qualname")

    def __init__(self, kind: str, name: str, qualname: str, cls: str | None, function: dict[str, Any] | None):
        self.kind, self.name, self.qualname, self.cls, self.function = kind, name, qualname, cls, function


# Children in source order (ast's field order puts decorators after the body, IfExp's test first).
_CHILD_ORDER: dict[type, tuple[str, ...]] = {
    ast.FunctionDef: ("decorator_list", "args", "returns", "body"),
    ast.AsyncFunctionDef: ("decorator_list", "args", "returns", "body"),
    ast.ClassDef: ("decorator_list", "bases", "keywords", "body"),
    ast.IfExp: ("body", "test", "orelse"),
}


def _children(node: ast.AST) -> Iterator[ast.AST]:
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


class FactCollector:
    """One pass over a module; see the module docstring for what is collected."""

    def __init__(self, source: str, modname: str, is_package: bool, settings: IndexSettings):
        self.source = source
        self.blines = source.encode("utf-8", errors="replace").splitlines(keepends=True)  # ast offsets are bytes
        self.modname = modname
        self.is_package = is_package
        self.settings = settings
        self.family = settings.family_re()
        self.helpers = set(settings.helpers)
        self.algo_names = set(settings.algorithm_names)
        self.member_enums = set(settings.member_enums)
        self.scopes: list[_Scope] = []
        self.facts: dict[str, Any] = {
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
        self._roots: set[int] = set()  # expression roots where a dispatch site is anchored
        self._root_stack: list[ast.AST] = []
        self._site_roots: dict[int, dict[str, Any]] = {}
        self._parents: dict[int, ast.AST] = {}
        self._compared: set[int] = set()  # collections that are operands of a comparison

    # -- driving --------------------------------------------------------------------------------
    def collect(self, tree: ast.Module) -> dict[str, Any]:
        self._visit(tree)
        for cls in self.facts["classes"].values():
            cls["self_assigned"] = sorted(set(cls["self_assigned"]))
            cls["attrs"] = sorted(set(cls["attrs"]))
        for fn in self.facts["functions"].values():
            fn["value_names"] = sorted(set(fn["value_names"]))
        return self.facts

    def _visit(self, node: ast.AST) -> None:
        pushed = id(node) in self._roots
        if pushed:
            self._root_stack.append(node)
        handler = self._HANDLERS.get(type(node))
        scope = handler(self, node) if handler is not None else None
        for child in _children(node):
            self._parents[id(child)] = node
            self._visit(child)
        if scope is not None:
            self.scopes.pop()
        if pushed:
            self._root_stack.pop()

    # -- scopes ---------------------------------------------------------------------------------
    @property
    def qualname(self) -> str:
        return self.scopes[-1].qualname if self.scopes else ""

    @property
    def current_class(self) -> str | None:
        return self.scopes[-1].cls if self.scopes else None

    def _function(self) -> dict[str, Any] | None:
        """The facts entry of the innermost enclosing function, if any."""
        for scope in reversed(self.scopes):
            if scope.kind == "def":
                return scope.function
            if scope.kind == "class":
                return None
        return None

    def _in_module_scope(self) -> bool:
        return not self.scopes

    def _bind_toplevel(self, name: str, kind: str, line: int, target: str | None = None) -> None:
        if self._in_module_scope():
            self.facts["toplevel"].setdefault(name, {"kind": kind, "line": line, "target": target})

    def _class_facts(self) -> dict[str, Any] | None:
        # Only the class body itself (not a method) binds class attributes.
        if self.scopes and self.scopes[-1].kind == "class":
            found: dict[str, Any] = self.facts["classes"][self.scopes[-1].qualname]
            return found
        return None

    def _name(self, name: str, line: int) -> None:
        if self.family.search(name):
            self.facts["names"].append([name, line, self.qualname])

    def _dotted_path(self, path: str, line: int) -> None:
        """A dotted module path of an import: its Name and Attribute references, as libcst saw them."""
        parts = path.split(".")
        for part in parts:
            self._name(part, line)
        for n in range(1, len(parts)):
            self.facts["attrs"].append([".".join(parts[:n]), parts[n], line, self.qualname])

    def visit_ClassDef(self, node: ast.ClassDef) -> _Scope:
        name = node.name
        qual = f"{self.qualname}.{name}" if self.qualname else name
        owner = self._class_facts()
        if owner is not None:
            owner["attrs"].append(name)
        self._bind_toplevel(name, "class", node.lineno)
        for base in (*node.bases, *(k.value for k in node.keywords)):
            self._mark_root(base.value if isinstance(base, ast.Starred) else base)
        self.facts["classes"][qual] = {
            "name": name,
            "line": node.lineno,
            "bases": [dotted(b) or "?" for b in node.bases],
            "keywords": [k.arg for k in node.keywords if k.arg],
            "decorators": _decorator_names(node.decorator_list),
            "dataclass": _dataclass_options(node.decorator_list),
            "fields": [],
            "attrs": [],
            "self_assigned": [],
            "self_assigned_at": [],  # [attr, line, scope] for family attributes
            "self_reads": [],
            "self_types": {},  # attr -> type hint (see _type_hint), "?" when assigned differently
            "dynamic_self": False,  # setattr(self, ...), vars(self) or self.__dict__ somewhere in it
            "has_getattr": False,
        }
        scope = _Scope("class", name, qual, qual, None)
        self.scopes.append(scope)
        self._name(name, node.lineno)  # inside its own scope, as libcst saw the name node
        return scope

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> _Scope:
        name = node.name
        qual = f"{self.qualname}.{name}" if self.qualname else name
        owner = self._class_facts()
        if owner is not None:
            owner["attrs"].append(name)
            if name in ("__getattr__", "__getattribute__"):
                owner["has_getattr"] = True
        elif self._in_module_scope() and name == "__getattr__":
            self.facts["module_getattr"] = True
        self._bind_toplevel(name, "function", node.lineno)
        params = _params(node.args)
        all_args = [*node.args.posonlyargs, *node.args.args, node.args.vararg, *node.args.kwonlyargs, node.args.kwarg]
        param_types = {a.arg: self._segment(a.annotation) for a in all_args
                       if a is not None and a.annotation is not None}
        entry = {
            "name": name,
            "line": node.lineno,
            "params": params,
            "decorators": _decorator_names(node.decorator_list),
            "class": self.scopes[-1].qualname if owner is not None else None,
            "nested": not self._in_module_scope() and owner is None,
            "returns": self._segment(node.returns) if node.returns is not None else None,
            "param_types": param_types,
            "locals": {},  # name -> type hint (see _type_hint), "?" when assigned differently
            "value_names": [],  # local names used as numbers or sequences (operands, range(), ...)
            "loop_strings": {},  # loop variables over a literal tuple of strings
            "narrowed": {},  # expression -> [[line, [class, ...]], ...] from isinstance(expression, classes)
            "dict_returns": [],  # per return: its literal keys (`dict(a=...)`, `{"a": ...}`), or None for others
        }
        self.facts["functions"].setdefault(qual, entry)
        in_enum = any(s.kind == "class" and s.name == self.settings.enum_name for s in self.scopes)
        if name in self.helpers or (in_enum and name.startswith("is_")):
            self._record_predicate(node, qual, (owner is not None and self.scopes[-1].qualname) or None)
        scope = _Scope("def", name, qual, self.current_class, self.facts["functions"][qual])
        self.scopes.append(scope)
        self._name(name, node.lineno)
        return scope

    def _segment(self, node: ast.AST) -> str:
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

    # -- bindings -------------------------------------------------------------------------------
    def _hint(self, table: dict[str, str], name: str, hint: str | None) -> None:
        if table.get(name, hint) != hint:
            table[name] = "?"
        else:
            table[name] = hint if hint is not None else "?"

    def _record_target(self, target: ast.AST, value: ast.AST | None = None, annotation: ast.AST | None = None) -> None:
        function = self._function()
        for t in _assigned_names(target):
            if isinstance(t, ast.Name):
                self._bind_toplevel(t.id, "assign", t.lineno)
                owner = self._class_facts()
                if owner is not None:
                    owner["attrs"].append(t.id)
                if function is not None:
                    hint = f"ann:{self._segment(annotation)}" if annotation is not None else (
                        _type_hint(value, function["param_types"]) if value is not None and t is target else None)
                    if t.id in function["param_types"] and annotation is None:
                        hint = "?"  # a parameter rebound to something else
                    self._hint(function["locals"], t.id, hint)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                cls = self.current_class
                if cls is not None:
                    facts = self.facts["classes"][cls]
                    facts["self_assigned"].append(t.attr)
                    if self.family.search(t.attr):
                        facts["self_assigned_at"].append([t.attr, t.lineno, self.qualname])
                    params = function["param_types"] if function is not None else {}
                    local_hints = function["locals"] if function is not None else {}
                    hint = f"ann:{self._segment(annotation)}" if annotation is not None else (
                        _type_hint(value, params, local_hints) if value is not None and t is target else None)
                    self._hint(facts["self_types"], t.attr, hint)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._mark_root(node.value)
        for target in node.targets:
            self._record_target(target, node.value)
            self._name_list(target, node.value)
            if self._in_module_scope() and isinstance(target, ast.Name) and target.id == "__all__":
                self.facts["all"] = [s for el in getattr(node.value, "elts", []) if (s := _string_value(el))]

    def _name_list(self, target: ast.AST, value: ast.AST) -> None:
        """``NAMESPACES = [Model, Spec, ...]`` at module level (xref's field classes read it)."""
        if not (self._in_module_scope() and isinstance(target, ast.Name) and isinstance(value, (ast.List, ast.Tuple))):
            return
        names = [dotted(el) for el in value.elts]
        if names and all(names):
            self.facts["name_lists"][target.id] = names

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._mark_root(node.value)
        self._record_target(node.target, node.value, node.annotation)
        owner = self._class_facts()
        if owner is not None and isinstance(node.target, ast.Name):
            annotation = self._segment(node.annotation)
            if "ClassVar" not in annotation:
                entry = {"name": node.target.id, **_field_call_options(node.value)}
                entry["kw_sentinel"] = annotation.endswith("KW_ONLY")
                entry["annotation"] = annotation
                owner["fields"].append(entry)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._mark_root(node.value)
        self._record_target(node.target)

    def visit_For(self, node: ast.For) -> None:
        self._record_target(node.target)
        function = self._function()
        names = [_string_value(el) for el in getattr(node.iter, "elts", [None])]
        if function is not None and isinstance(node.target, ast.Name) and names and None not in names:
            function["loop_strings"][node.target.id] = names  # `for attr in ("a", "b"): setattr(self, attr, ...)`

    def visit_withitem(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self._record_target(node.optional_vars)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self._record_target(node.target)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            full = alias.name
            bound = alias.asname or full.split(".")[0]
            target = full if alias.asname else full.split(".")[0]
            self._bind_toplevel(bound, "module", node.lineno, target)
            line = getattr(alias, "lineno", node.lineno)
            self._dotted_path(full, line)
            if alias.asname:
                self._name(alias.asname, line)
            self.facts["imports"].append({"module": full, "name": None, "asname": bound, "line": line,
                                          "scope": self.qualname})

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = resolve_relative(self.modname, self.is_package, node.level or 0, node.module)
        if node.module:
            self._dotted_path(node.module, node.lineno)
        if any(alias.name == "*" for alias in node.names):
            if self._in_module_scope():
                self.facts["star_imports"].append(module)
            return
        for alias in node.names:
            name, bound = alias.name, alias.asname or alias.name
            line = getattr(alias, "lineno", node.lineno)
            self._bind_toplevel(bound, "import", node.lineno, f"{module}.{name}")
            owner = self._class_facts()
            if owner is not None:
                owner["attrs"].append(bound)
            self._name(name, line)
            if alias.asname:
                self._name(alias.asname, line)
            self.facts["imports"].append({"module": module, "name": name, "asname": bound, "line": line,
                                          "scope": self.qualname})

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        for name in node.names:
            self._name(name, node.lineno)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._name(node.name, node.lineno)

    def visit_arg(self, node: ast.arg) -> None:
        self._name(node.arg, node.lineno)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg:
            self._name(node.arg, node.lineno)

    # -- references -----------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        self._name(node.id, node.lineno)
        if isinstance(node.ctx, ast.Load) and self._is_value_use(node):
            function = self._function()
            if function is not None:
                function["value_names"].append(node.id)

    def _is_value_use(self, node: ast.AST) -> bool:
        parent = self._parents.get(id(node))
        if isinstance(parent, _VALUE_PARENTS) or (isinstance(parent, ast.Subscript) and parent.value is node):
            return True
        if isinstance(parent, ast.For) and parent.iter is node:
            return True
        return isinstance(parent, ast.Call) and node in parent.args and dotted(parent.func) in VALUE_CALLS

    def _ctx(self, node: ast.Attribute) -> str:
        parent = self._parents.get(id(node))
        if isinstance(node.ctx, ast.Store):
            return "store"
        if isinstance(node.ctx, ast.Del):
            return "del"
        if isinstance(parent, ast.Call) and parent.func is node:
            return "call"
        return "value" if self._is_value_use(node) else "load"

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr, line = node.attr, node.lineno
        self._name(attr, node.end_lineno or line)
        self._dispatch_primitive_enum(node)
        base = dotted(node.value)
        if base is None:
            if self.family.search(attr):
                self.facts["attrs"].append(["?", attr, line, self.qualname])
            return
        self.facts["uses"].append([base, attr, line, self.qualname, self._ctx(node)])
        if base in ("self", "cls"):
            cls = self.current_class
            if cls is not None and base == "self" and self.family.search(attr):
                self.facts["classes"][cls]["self_reads"].append([attr, line, self.qualname])
            if attr == "__dict__" and cls is not None:
                self.facts["classes"][cls]["dynamic_self"] = True
            if not self.family.search(attr):
                return
        self.facts["attrs"].append([base, attr, line, self.qualname])

    def visit_Call(self, node: ast.Call) -> None:
        for arg in node.args:
            self._mark_root(arg.value if isinstance(arg, ast.Starred) else arg)
        for kw in node.keywords:
            self._mark_root(kw.value)
        self._dispatch_primitive_call(node)
        callee = dotted(node.func)
        self._keyword_call(node, callee)
        if callee in ("setattr", "vars") and node.args and dotted(node.args[0]) == "self" and self.current_class:
            self._dynamic_self(node, callee)
        if callee == "isinstance" and len(node.args) == 2:
            self._narrowing(node)
        if callee is None or not self.family.search(callee):
            return
        self.facts["calls"].append({
            "callee": callee,
            "npos": sum(1 for a in node.args if not isinstance(a, ast.Starred)),
            "star": any(isinstance(a, ast.Starred) for a in node.args),
            "dstar": any(k.arg is None for k in node.keywords),
            "kw": [k.arg for k in node.keywords if k.arg is not None],
            "kw_lines": {k.arg: k.lineno for k in node.keywords if k.arg is not None},
            "line": node.lineno,
            "scope": self.qualname,
            "cls": self.current_class,
        })

    def _keyword_call(self, node: ast.Call, callee: str | None) -> None:
        """Every call that names keywords (xref checks those that set fields of a known class)."""
        keywords = {k.arg: k.lineno for k in node.keywords if k.arg is not None}
        text = callee or _receiver_call_text(node.func)
        if not keywords or text is None:
            return
        first = node.args[0] if node.args and not isinstance(node.args[0], ast.Starred) else None
        self.facts["kwcalls"].append({"callee": text, "first": dotted(first) if first is not None else None,
                                      "kw": keywords, "line": node.lineno, "scope": self.qualname,
                                      "cls": self.current_class})

    def _narrowing(self, node: ast.Call) -> None:
        """``isinstance(x, T)`` anywhere in a function: from that line on, ``x`` may be a ``T`` (the
        xref gate takes T as a possible type besides the declared one; it never tracks the branch)."""
        function = self._function()
        subject = dotted(node.args[0])
        if function is not None and subject is not None:
            function["narrowed"].setdefault(subject, []).append([node.lineno, _isinstance_classes(node.args[1])])

    def _dynamic_self(self, node: ast.Call, callee: str) -> None:
        """``setattr(self, name, v)`` assigns ``name`` when it is a literal (or a loop over literals);
        any other name, or ``vars(self)``, makes the class's attributes unknowable."""
        cls = self.facts["classes"][self.current_class]
        name = node.args[1] if callee == "setattr" and len(node.args) > 1 else None
        literal = _string_value(name)
        function = self._function()
        names = [literal] if literal is not None else (
            function["loop_strings"].get(name.id) if function is not None and isinstance(name, ast.Name) else None)
        if names:
            cls["self_assigned"].extend(names)
        else:
            cls["dynamic_self"] = True

    # -- dispatch sites -------------------------------------------------------------------------
    def _mark_root(self, node: ast.AST | None) -> None:
        if node is not None:
            self._roots.add(id(node))

    def visit_If(self, node: ast.If | ast.While) -> None:
        self._mark_root(node.test)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._mark_root(node.test)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._mark_root(node.test)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        for test in node.ifs:
            self._mark_root(test)

    def visit_Return(self, node: ast.Return) -> None:
        self._mark_root(node.value)
        function = self._function()
        if function is not None:
            function["dict_returns"].append(_literal_keys(node.value))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        key, base = _string_value(node.slice), dotted(node.value)
        if key is not None and base is not None:
            self.facts["subscripts"].append([base, key, node.lineno, self.qualname])

    def visit_Expr(self, node: ast.Expr) -> None:
        self._mark_root(node.value)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._mark_root(node.body)

    def visit_collection(self, node: ast.Tuple | ast.List | ast.Set) -> None:
        for el in node.elts:
            if not isinstance(el, ast.Starred):
                self._mark_root(el)
        if isinstance(node.ctx if not isinstance(node, ast.Set) else ast.Load(), ast.Load):
            self._dispatch_membership(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if key is not None:
                self._mark_root(value)

    def visit_Compare(self, node: ast.Compare) -> None:
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
        defs = [s for s in self.scopes if s.kind == "def"]
        if not defs:
            return False
        in_enum = any(s.kind == "class" and s.name == self.settings.enum_name for s in self.scopes)
        return defs[-1].name in self.helpers or (in_enum and defs[-1].name.startswith("is_"))

    def _add_site(self, primitive: str, root: ast.AST | None = None) -> None:
        if (root is None and not self._root_stack) or self._in_helper_definition():
            return
        root = root if root is not None else self._root_stack[-1]
        site = self._site_roots.get(id(root))
        if site is None:
            code = self._segment(root)
            if isinstance(root, ast.Tuple) and code.startswith("(") and code.endswith(")"):
                code = code[1:-1]  # outer parentheses are layout, not identity
            site = {
                "scope": self.qualname or "<module>",
                "expr": canonical_expression(code),
                "code": code,
                "primitives": [],
                "line": root.lineno,  # type: ignore[attr-defined]
                "duplicates": [],
            }
            self._site_roots[id(root)] = site
            self.facts["dispatch"].append(site)
        if primitive not in site["primitives"]:
            site["primitives"].append(primitive)
        return None

    def _dispatch_primitive_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in self.helpers and not node.args and not node.keywords:
            self._add_site(f"{func.attr}()")

    def _dispatch_primitive_enum(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id == self.settings.enum_name and node.attr.isupper():
            self._add_site(f"{self.settings.enum_name}.{node.attr}")

    def _algorithm_strings(self, node: ast.AST) -> list[str]:
        value = _string_value(node)
        if value is not None:
            return [value] if value.upper() in self.algo_names and self._is_plain_string(node) else []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [name for el in node.elts for name in self._algorithm_strings(el)]
        return []

    def _is_plain_string(self, node: ast.AST) -> bool:
        """One string literal on one line, not an implicit concatenation of several."""
        if node.lineno != node.end_lineno:  # type: ignore[attr-defined]
            return False
        text = self.blines[node.lineno - 1][node.col_offset:node.end_col_offset]  # type: ignore[attr-defined]
        body = text.lstrip(b"rRuU")
        quote = body[:1]
        return quote in (b"'", b'"') and body.count(quote) in (2, 6)

    def _dispatch_membership(self, node: ast.Tuple | ast.List | ast.Set) -> None:
        """A collection of algorithm names or input-type members (``_RESERVED_NAMES``,
        ``is_verify_input``'s set) is a dispatch site as a whole, anchored at the innermost root
        around the collection; members listed twice are recorded for the gate."""
        if id(node) in self._compared and not any(self._member_attr(el) for el in node.elts):
            return  # string comparisons are sites already
        members = [el for el in node.elts if self._member_attr(el)]
        names = [el for el in node.elts if self._algorithm_strings(el)]
        if not members and len(names) < 2:
            return
        root = self._root_stack[-1] if self._root_stack else None
        if root is None or (root is node and isinstance(self._parents.get(id(node)), (ast.Tuple, ast.List, ast.Set))):
            return
        before = len(self.facts["dispatch"])
        for el in members:
            self._add_site(self._segment(el), root)
        for el in names:
            self._add_site(f'"{_string_value(el)}"', root)
        site = self._site_roots.get(id(root))
        if site is None or len(self.facts["dispatch"]) < before:
            return
        seen: set[str] = set()
        for el in node.elts:
            code = normalise_expression(self._segment(el))
            if code in seen and (el in members or el in names):
                site["duplicates"].append([code, el.lineno])
            seen.add(code)

    def _member_attr(self, node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in self.member_enums and node.attr.isupper())

    # -- family predicates ----------------------------------------------------------------------
    def _record_predicate(self, node: ast.FunctionDef | ast.AsyncFunctionDef, qual: str, cls: str | None) -> None:
        body = [s for s in node.body if not (isinstance(s, ast.Expr) and _string_value(s.value) is not None)]
        expr: list[Any] = ["unknown", "a body other than one return statement"]
        line = node.lineno
        if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
            expr, line = self._predicate(body[0].value), body[0].lineno
        self.facts["predicates"][qual] = {"name": node.name, "class": cls, "expr": expr, "line": line}

    def _members_of(self, node: ast.AST) -> list[str] | None:
        """``E.X`` -> ["X"]; a tuple/list/set (or frozenset/set of one) of them -> their names."""
        if isinstance(node, ast.Call) and dotted(node.func) in ("frozenset", "set", "tuple") and len(node.args) == 1:
            return self._members_of(node.args[0])
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            names = [self._members_of(el) for el in node.elts]
            return None if any(n is None for n in names) else [x for n in names for x in n]  # type: ignore[union-attr]
        enum = self.settings.enum_name
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == enum:
            return [node.attr]
        return None

    def _predicate(self, node: ast.AST) -> list[Any]:
        """A helper's return expression as a small tree the dispatch gate evaluates per member:
        ["in", [members]], ["call", helper], ["or"|"and", a, b, ...], ["not", a], ["const", bool],
        or ["unknown", source]."""
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return ["const", node.value]
        if isinstance(node, ast.BoolOp):
            return ["or" if isinstance(node.op, ast.Or) else "and", *(self._predicate(v) for v in node.values)]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ["not", self._predicate(node.operand)]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and dotted(node.func.value) == "self"
                and not node.args and not node.keywords):
            return ["call", node.func.attr]
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, op, right = node.left, node.ops[0], node.comparators[0]
            if dotted(right) == "self" and isinstance(op, (ast.Eq, ast.Is, ast.NotEq, ast.IsNot)):
                left, right = right, left
            if dotted(left) == "self":
                members = self._members_of(right)
                if members is not None:
                    test = ["in", members]
                    return ["not", test] if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)) else test
        return ["unknown", normalise_expression(self._segment(node))]

    _HANDLERS: ClassVar[dict[type, Any]] = {}


FactCollector._HANDLERS = {
    ast.ClassDef: FactCollector.visit_ClassDef,
    ast.FunctionDef: FactCollector.visit_FunctionDef,
    ast.AsyncFunctionDef: FactCollector.visit_FunctionDef,
    ast.Assign: FactCollector.visit_Assign,
    ast.AnnAssign: FactCollector.visit_AnnAssign,
    ast.AugAssign: FactCollector.visit_AugAssign,
    ast.For: FactCollector.visit_For,
    ast.AsyncFor: FactCollector.visit_For,
    ast.withitem: FactCollector.visit_withitem,
    ast.NamedExpr: FactCollector.visit_NamedExpr,
    ast.Import: FactCollector.visit_Import,
    ast.ImportFrom: FactCollector.visit_ImportFrom,
    ast.Global: FactCollector.visit_Global,
    ast.Nonlocal: FactCollector.visit_Global,
    ast.ExceptHandler: FactCollector.visit_ExceptHandler,
    ast.arg: FactCollector.visit_arg,
    ast.keyword: FactCollector.visit_keyword,
    ast.Name: FactCollector.visit_Name,
    ast.Attribute: FactCollector.visit_Attribute,
    ast.Call: FactCollector.visit_Call,
    ast.If: FactCollector.visit_If,
    ast.While: FactCollector.visit_If,
    ast.IfExp: FactCollector.visit_IfExp,
    ast.Assert: FactCollector.visit_Assert,
    ast.comprehension: FactCollector.visit_comprehension,
    ast.Return: FactCollector.visit_Return,
    ast.Subscript: FactCollector.visit_Subscript,
    ast.Expr: FactCollector.visit_Expr,
    ast.Lambda: FactCollector.visit_Lambda,
    ast.Tuple: FactCollector.visit_collection,
    ast.List: FactCollector.visit_collection,
    ast.Set: FactCollector.visit_collection,
    ast.Dict: FactCollector.visit_Dict,
    ast.Compare: FactCollector.visit_Compare,
}


def extract_facts(data: bytes, modname: str, is_package: bool, settings: IndexSettings) -> dict[str, Any]:
    """The facts of one module's source (raises SyntaxError when it does not parse)."""
    source = data.decode("utf-8", errors="replace")
    tree = ast.parse(source)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # long operator chains nest deeply
    try:
        return FactCollector(source, modname, is_package, settings).collect(tree)
    finally:
        sys.setrecursionlimit(limit)


# ---------------------------------------------------------------------------------------------
# The lines a series adds


def added_lines(root: Path, files: Sequence[str], base: str | None) -> dict[str, frozenset[int]]:
    """Per tree-relative file, the line numbers (1-based, in the working tree) that differ from the
    tree's base (``base``: the context's base commit, the one definition of the base; the tree's root
    commit only when none was found): what the series added or changed. A file the base lacks is
    all added. Rules that judge "the code the set adds" read this, so that the base's own code,
    which the set does not own, never produces a finding."""
    from patchkit.git import Repo  # lazy: only the rules on added code need git

    files = [f for f in files if (root / f).is_file()]
    if not files:
        return {}
    repo = Repo(root)
    base = base or repo.run("rev-list", "--max-parents=0", "HEAD").split()[-1]
    diff = repo.run("diff", "-U0", "--no-renames", "--no-color", "--no-ext-diff", base, "--", *files)
    out: dict[str, set[int]] = {}
    current: str | None = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("@@") and current is not None:
            match = re.match(r"@@ -\S+ \+(\d+)(?:,(\d+))? @@", line)
            if match:
                start, count = int(match.group(1)), int(match.group(2) or 1)
                out.setdefault(current, set()).update(range(start, start + count))
    for rel in files:
        if rel not in out and not repo.ok("cat-file", "-e", f"{base}:{rel}"):
            out[rel] = set(range(1, len((root / rel).read_bytes().splitlines()) + 1))
    return {rel: frozenset(lines) for rel, lines in out.items()}


# ---------------------------------------------------------------------------------------------
# Cache and index


# Facts by (settings key, content hash), shared by every index in this process, so gates that run
# one after another parse a file at most once. Content-addressed, so an edited file is never stale.
_MEMORY: dict[tuple[str, str], dict[str, Any]] = {}


def settings_from_manifest(manifest: Manifest) -> IndexSettings:
    """The index settings the set's ``[verify.xref]`` and ``[verify.dispatch]`` tables ask for."""
    verify = manifest.verify
    xref, dispatch = manifest.verify_table("xref"), manifest.verify_table("dispatch")
    return IndexSettings(
        family=xref.get("family", "DDTREE|DDTree|ddtree"),
        helpers=tuple(dispatch.get("helpers", DEFAULT_HELPERS)),
        algorithm_names=tuple(dispatch.get("algorithm_names", DEFAULT_ALGORITHM_NAMES)),
        enum_name=dispatch.get("enum", DEFAULT_ENUM),
        source_root=verify.get("source_root", "python"),
        member_enums=tuple(dispatch.get("member_enums", ())),
    )


@dataclass
class PyIndex:
    """Facts for a set of files, with a per-file content-hash cache. Not thread-safe."""

    root: Path
    settings: IndexSettings
    cache_dir: Path | None
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # rel path -> facts
    _module_files: dict[str, str | None] = field(default_factory=dict, repr=False)
    parsed: list[str] = field(default_factory=list)  # files parsed in this process (cache misses)
    errors: dict[str, str] = field(default_factory=dict)  # rel path -> parse error

    def _cache_path(self, digest: str) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / "pyindex" / self.settings.key() / digest[:2] / f"{digest}.json"

    def load(self, rel: str) -> dict[str, Any] | None:
        """Facts of one file (parsing it on a cache miss); None if it does not parse."""
        if rel in self.facts:
            return self.facts[rel]
        if rel in self.errors:
            return None
        data = (self.root / rel).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        memo_key = (self.settings.key(), digest)
        facts = _MEMORY.get(memo_key)
        if facts is None:
            facts = self._load_or_extract(rel, data, digest)
            if facts is None:
                return None
            _MEMORY[memo_key] = facts
        facts = {**facts, "path": rel}
        self.facts[rel] = facts
        return facts

    def _load_or_extract(self, rel: str, data: bytes, digest: str) -> dict[str, Any] | None:
        cached = self._cache_path(digest)
        if cached is not None and cached.is_file():
            loaded: dict[str, Any] = json.loads(cached.read_text())
            return loaded
        facts = self._extract(rel, data)
        if facts is not None and cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(facts))
            tmp.replace(cached)
        return facts

    def _extract(self, rel: str, data: bytes) -> dict[str, Any] | None:
        self.parsed.append(rel)
        modname, is_package = module_name(rel, self.settings.source_root)
        try:
            return extract_facts(data, modname, is_package, self.settings)
        except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
            self.errors[rel] = f"{getattr(exc, 'msg', exc)} (line {getattr(exc, 'lineno', None)})"
            return None

    def load_many(self, rels: Iterable[str]) -> None:
        for rel in rels:
            self.load(rel)

    def module_file(self, module: str) -> str | None:
        """Tree-relative file of an importable module, if it exists in the tree (memoised: name
        resolution asks about the same modules thousands of times)."""
        if module in self._module_files:
            return self._module_files[module]
        base = "/".join((self.settings.source_root, *module.split(".")))
        found = None
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if os.path.isfile(os.path.join(self.root, candidate)):
                found = candidate
                break
        self._module_files[module] = found
        return found

    def is_namespace_package(self, module: str) -> bool:
        """A directory without ``__init__.py`` that holds Python files (PEP 420)."""
        path = os.path.join(self.root, self.settings.source_root, *module.split("."))
        return os.path.isdir(path) and not os.path.exists(os.path.join(path, "__init__.py"))

    def module_facts(self, module: str) -> dict[str, Any] | None:
        rel = self.module_file(module)
        return self.load(rel) if rel else None
