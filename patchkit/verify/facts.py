"""A cached, libcst-based index of Python facts for the static gates (xref, dispatch).

Pipeline: a bytes-regex prefilter over the tree picks the files worth parsing; each picked file is
parsed once with libcst and one visitor pass extracts its *facts* (definitions, imports, calls,
attribute references, ``self`` attribute reads and writes, algorithm dispatch sites). Facts are plain
JSON, cached under ``<cache_dir>/pyindex/`` keyed by the file's content hash plus the extraction
settings, so a warm run reads JSON instead of parsing.

Line numbers come from one plain codegen pass that records lines only for the nodes the visitor kept
(:class:`_LineRecorder`). libcst's ``PositionProvider`` records every node and costs about 9x the
codegen (1.3 s vs 0.16 s on ``server_args.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import libcst as cst

if TYPE_CHECKING:
    from patchkit.manifest import Manifest

FACTS_SCHEMA = 7  # bump when the facts layout or extraction logic changes

# Spec-algorithm helpers whose call is a dispatch site (map §2).
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

    def key(self) -> str:
        raw = json.dumps(
            [FACTS_SCHEMA, self.family, self.helpers, self.algorithm_names, self.enum_name, self.source_root]
        )
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


_SCANS: dict[tuple[str, str], tuple[tuple[Any, ...], Scan]] = {}


def scan(root: Path, settings: IndexSettings) -> Scan:
    """Prefilter the tree for both the family and the dispatch patterns with one read per file.

    Memoised per process on the files' (path, size, mtime): xref and dispatch run one after the
    other in one ``patchkit verify``, and the second gate then only stats the tree."""
    files = python_files(root, settings.source_root)
    stamp = tuple((rel, st.st_size, st.st_mtime_ns) for rel in files if (st := (root / rel).stat()))
    memo_key = (str(root.resolve()), settings.key())
    cached = _SCANS.get(memo_key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    family, dispatch = re.compile(settings.family.encode()), re.compile(dispatch_pattern(settings))
    # Literal substrings every dispatch hit contains: `in` on bytes is ~2x cheaper than the regex,
    # which then only runs on the few files that pass.
    literals = ([f"{h}(".encode() for h in settings.helpers] + [f"{settings.enum_name}.".encode()]
                + [n.encode() for n in settings.algorithm_names])
    fam_hits, dis_hits = [], []
    for rel in files:
        data = (root / rel).read_bytes()
        if family.search(data):
            fam_hits.append(rel)
        if any(lit in data for lit in literals) and dispatch.search(data):
            dis_hits.append(rel)
    result = Scan(tuple(files), tuple(fam_hits), tuple(dis_hits))
    _SCANS[memo_key] = (stamp, result)
    return result


def dispatch_pattern(settings: IndexSettings) -> bytes:
    """Bytes regex that every file holding a dispatch site matches."""
    helpers = "|".join(map(re.escape, settings.helpers))
    names = "|".join(map(re.escape, settings.algorithm_names))
    return (rf"\.(?:{helpers})\(|{re.escape(settings.enum_name)}\.|[\"'](?:{names})[\"']").encode()


# ---------------------------------------------------------------------------------------------
# Module naming


def module_name(rel: str, source_root: str) -> tuple[str, bool]:
    """``python/sglang/srt/x.py`` -> ``("sglang.srt.x", False)``; ``__init__.py`` -> package True."""
    path = Path(rel)
    try:
        path = path.relative_to(source_root)
    except ValueError:
        pass
    parts = list(path.with_suffix("").parts)
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
# Line numbers without PositionProvider


class _LineRecorder(cst._nodes.internal.CodegenState):  # type: ignore[name-defined,misc]
    """A codegen state that only counts newlines and notes the line where wanted nodes start."""

    __slots__ = ("wanted", "lines", "line")

    def __init__(self, module: cst.Module, wanted: set[int]):
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.wanted = wanted
        self.lines: dict[int, int] = {}
        self.line = 1

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if "\n" in value:
            self.line += value.count("\n")

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted:
            self.lines.setdefault(id(node), self.line)

    @contextmanager
    def record_syntactic_position(self, node, *, start_node=None, end_node=None) -> Iterator[None]:
        # The syntactic start skips the leading blank lines and comments a statement owns.
        if id(node) in self.wanted:
            self.lines[id(node)] = self.line
        yield


def node_lines(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[int, int]:
    """1-based start line of each node in ``nodes``, keyed by ``id(node)``."""
    recorder = _LineRecorder(module, {id(n) for n in nodes})
    module._codegen(recorder)
    return recorder.lines


# ---------------------------------------------------------------------------------------------
# Fact extraction


def dotted(node: cst.BaseExpression | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr.value}" if inner else None
    return None


def _string_value(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        try:
            value = node.evaluated_value
        except Exception:  # noqa: BLE001 - odd literal: not a name string
            return None
        return value if isinstance(value, str) else None
    return None


_WS = re.compile(r"\s+")
_TIGHT = re.compile(r"\s*([()\[\]{},.:])\s*")
_COMMENT = re.compile(r"#[^\n]*")


def normalise_expression(code: str) -> str:
    """Source text of an expression with comments and layout removed, so line shifts and
    reformatting do not change a dispatch site's identity."""
    text = _WS.sub(" ", _COMMENT.sub("", code)).strip()
    text = _TIGHT.sub(r"\1", text)
    return text.replace(",)", ")").replace(",]", "]")


def _params(node: cst.Parameters) -> list[list[Any]]:
    """[[name, kind, has_default]] with kind in posonly/pos/varargs/kwonly/varkw."""
    out: list[list[Any]] = []
    for p in node.posonly_params:
        out.append([p.name.value, "posonly", p.default is not None])
    for p in node.params:
        out.append([p.name.value, "pos", p.default is not None])
    if isinstance(node.star_arg, cst.Param):
        out.append([node.star_arg.name.value, "varargs", False])
    for p in node.kwonly_params:
        out.append([p.name.value, "kwonly", p.default is not None])
    if node.star_kwarg is not None:
        out.append([node.star_kwarg.name.value, "varkw", False])
    return out


def _decorator_names(decorators: Sequence[cst.Decorator]) -> list[str]:
    names = []
    for d in decorators:
        expr = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
        names.append(dotted(expr) or "?")
    return names


def _dataclass_options(decorators: Sequence[cst.Decorator]) -> dict[str, Any] | None:
    for d in decorators:
        call = d.decorator if isinstance(d.decorator, cst.Call) else None
        name = dotted(call.func if call else d.decorator) or ""
        if name.split(".")[-1] != "dataclass":
            continue
        options: dict[str, Any] = {}
        for arg in call.args if call else ():
            if arg.keyword and isinstance(arg.value, cst.Name):
                options[arg.keyword.value] = arg.value.value == "True"
        return options
    return None


def _field_call_options(value: cst.BaseExpression | None) -> dict[str, bool]:
    """For ``x: T = field(...)``: whether it is in __init__, has a default, is keyword-only."""
    opts = {"init": True, "default": value is not None, "kw_only": False}
    if isinstance(value, cst.Call) and (dotted(value.func) or "").split(".")[-1] == "field":
        opts["default"] = False
        for arg in value.args:
            key = arg.keyword.value if arg.keyword else None
            if key in ("default", "default_factory"):
                opts["default"] = True
            elif key in ("init", "kw_only") and isinstance(arg.value, cst.Name):
                opts[key] = arg.value.value == "True"
    return opts


def _assigned_names(target: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """Every elementary target of an assignment (unpacks tuples, lists, starred)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for el in target.elements:
            yield from _assigned_names(el.value)
    elif isinstance(target, cst.StarredElement):
        yield from _assigned_names(target.value)
    else:
        yield target


_ASSIGNS = (cst.Assign, cst.AnnAssign, cst.AugAssign)


class _Scope:
    __slots__ = ("kind", "name", "qualname", "cls")

    def __init__(self, kind: str, name: str, qualname: str, cls: str | None):
        self.kind, self.name, self.qualname, self.cls = kind, name, qualname, cls


class FactCollector(cst.CSTVisitor):
    """One pass over a module; see the module docstring for what is collected."""

    def __init__(self, module: cst.Module, modname: str, is_package: bool, settings: IndexSettings):
        self.module = module
        self.modname = modname
        self.is_package = is_package
        self.settings = settings
        self.family = settings.family_re()
        self.helpers = set(settings.helpers)
        self.algo_names = set(settings.algorithm_names)
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
            "dispatch": [],
        }
        self._pending: list[tuple[dict[str, Any] | list[Any], Any, cst.CSTNode]] = []
        self._roots: dict[int, cst.CSTNode] = {}  # expression roots where a dispatch site is anchored
        self._root_stack: list[cst.CSTNode] = []
        self._site_roots: dict[int, dict[str, Any]] = {}

    # -- helpers ------------------------------------------------------------------------------
    def _line_later(self, record: dict[str, Any] | list[Any], key: Any, node: cst.CSTNode) -> None:
        self._pending.append((record, key, node))

    def finish(self) -> dict[str, Any]:
        lines = node_lines(self.module, [n for _, _, n in self._pending])
        for record, key, node in self._pending:
            record[key] = lines.get(id(node))
        for cls in self.facts["classes"].values():
            cls["self_assigned"] = sorted(set(cls["self_assigned"]))
            cls["attrs"] = sorted(set(cls["attrs"]))
        return self.facts

    @property
    def qualname(self) -> str:
        return self.scopes[-1].qualname if self.scopes else ""

    @property
    def current_class(self) -> str | None:
        return self.scopes[-1].cls if self.scopes else None

    def _in_module_scope(self) -> bool:
        return not any(s.kind in ("def", "class") for s in self.scopes)

    def _bind_toplevel(self, name: str, kind: str, node: cst.CSTNode, target: str | None = None) -> None:
        if self._in_module_scope():
            entry = {"kind": kind, "line": None, "target": target}
            self.facts["toplevel"].setdefault(name, entry)
            if self.facts["toplevel"][name] is entry:
                self._line_later(entry, "line", node)

    def _class_facts(self) -> dict[str, Any] | None:
        # Only the class body itself (not a method) binds class attributes.
        if self.scopes and self.scopes[-1].kind == "class":
            return self.facts["classes"][self.scopes[-1].qualname]
        return None

    # -- scopes ---------------------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        name = node.name.value
        qual = f"{self.qualname}.{name}" if self.qualname else name
        owner = self._class_facts()
        if owner is not None:
            owner["attrs"].append(name)
        self._bind_toplevel(name, "class", node)
        bases = [dotted(a.value) or "?" for a in node.bases if a.keyword is None]
        keywords = [a.keyword.value for a in node.bases if a.keyword is not None]
        entry = {
            "name": name,
            "line": None,
            "bases": bases,
            "keywords": keywords,
            "decorators": _decorator_names(node.decorators),
            "dataclass": _dataclass_options(node.decorators),
            "fields": [],
            "attrs": [],
            "self_assigned": [],
            "self_assigned_at": [],  # [attr, line, scope] for family attributes
            "self_reads": [],
            "has_getattr": False,
        }
        self._line_later(entry, "line", node)
        self.facts["classes"][qual] = entry
        self.scopes.append(_Scope("class", name, qual, qual))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scopes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        name = node.name.value
        qual = f"{self.qualname}.{name}" if self.qualname else name
        owner = self._class_facts()
        if owner is not None:
            owner["attrs"].append(name)
            if name in ("__getattr__", "__getattribute__"):
                owner["has_getattr"] = True
        elif self._in_module_scope() and name == "__getattr__":
            self.facts["module_getattr"] = True
        self._bind_toplevel(name, "function", node)
        entry = {
            "name": name,
            "line": None,
            "params": _params(node.params),
            "decorators": _decorator_names(node.decorators),
            "class": owner is not None and self.scopes[-1].qualname or None,
            "nested": not self._in_module_scope() and owner is None,
        }
        self._line_later(entry, "line", node)
        self.facts["functions"].setdefault(qual, entry)
        self.scopes.append(_Scope("def", name, qual, self.current_class))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    # -- bindings -------------------------------------------------------------------------------
    def _record_target(self, target: cst.BaseExpression, value: cst.BaseExpression | None, annotated: bool) -> None:
        for t in _assigned_names(target):
            if isinstance(t, cst.Name):
                self._bind_toplevel(t.value, "assign", t)
                owner = self._class_facts()
                if owner is not None:
                    owner["attrs"].append(t.value)
            elif isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                cls = self.current_class
                if cls is not None:
                    self.facts["classes"][cls]["self_assigned"].append(t.attr.value)
                    if self.family.search(t.attr.value):
                        rec = [t.attr.value, None, self.qualname]
                        self._line_later(rec, 1, t)
                        self.facts["classes"][cls]["self_assigned_at"].append(rec)

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._record_target(t.target, node.value, False)
            if self._in_module_scope() and isinstance(t.target, cst.Name) and t.target.value == "__all__":
                self.facts["all"] = [
                    s for el in getattr(node.value, "elements", []) if (s := _string_value(el.value))
                ]

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._record_target(node.target, node.value, True)
        owner = self._class_facts()
        if owner is not None and isinstance(node.target, cst.Name):
            annotation = cst.Module([]).code_for_node(node.annotation.annotation)
            if "ClassVar" not in annotation:
                entry = {"name": node.target.value, **_field_call_options(node.value)}
                entry["kw_sentinel"] = annotation.endswith("KW_ONLY")
                owner["fields"].append(entry)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._record_target(node.target, None, False)

    def visit_For(self, node: cst.For) -> None:
        self._record_target(node.target, None, False)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._record_target(node.asname.name, None, False)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._record_target(node.target, None, False)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name) or ""
            bound = alias.asname.name.value if alias.asname else full.split(".")[0]  # type: ignore[union-attr]
            target = full if alias.asname else full.split(".")[0]
            self._bind_toplevel(bound, "module", node, target)
            rec = {"module": full, "name": None, "asname": bound, "line": None, "scope": self.qualname}
            self._line_later(rec, "line", alias)
            self.facts["imports"].append(rec)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        level = len(node.relative)
        target = dotted(node.module) if node.module else None
        module = resolve_relative(self.modname, self.is_package, level, target)
        if isinstance(node.names, cst.ImportStar):
            if self._in_module_scope():
                self.facts["star_imports"].append(module)
            return
        for alias in node.names:
            name = alias.name.value if isinstance(alias.name, cst.Name) else dotted(alias.name) or "?"
            bound = alias.asname.name.value if alias.asname else name  # type: ignore[union-attr]
            self._bind_toplevel(bound, "import", node, f"{module}.{name}")
            owner = self._class_facts()
            if owner is not None:
                owner["attrs"].append(bound)
            rec = {"module": module, "name": name, "asname": bound, "line": None, "scope": self.qualname}
            self._line_later(rec, "line", alias)
            self.facts["imports"].append(rec)

    # -- references -----------------------------------------------------------------------------
    def visit_Name(self, node: cst.Name) -> None:
        if self.family.search(node.value):
            rec = [node.value, None, self.qualname]
            self._line_later(rec, 1, node)
            self.facts["names"].append(rec)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        attr = node.attr.value
        base = dotted(node.value)
        if base is None:
            if self.family.search(attr):
                rec = ["?", attr, None, self.qualname]
                self._line_later(rec, 2, node)
                self.facts["attrs"].append(rec)
            return
        if base in ("self", "cls"):
            cls = self.current_class
            if cls is not None and base == "self" and self.family.search(attr):
                rec = [attr, None, self.qualname]
                self._line_later(rec, 1, node)
                self.facts["classes"][cls]["self_reads"].append(rec)
            if not self.family.search(attr):
                return
        rec = [base, attr, None, self.qualname]
        self._line_later(rec, 2, node)
        self.facts["attrs"].append(rec)

    def visit_Call(self, node: cst.Call) -> None:
        self._dispatch_primitive_call(node)
        callee = dotted(node.func)
        if callee is None or not self.family.search(callee):
            return
        npos, star, dstar, kws = 0, False, False, []
        for arg in node.args:
            if arg.star == "*":
                star = True
            elif arg.star == "**":
                dstar = True
            elif arg.keyword is not None:
                kws.append(arg.keyword.value)
            else:
                npos += 1
        rec = {
            "callee": callee,
            "npos": npos,
            "star": star,
            "dstar": dstar,
            "kw": kws,
            "line": None,
            "scope": self.qualname,
            "cls": self.current_class,
        }
        self._line_later(rec, "line", node)
        self.facts["calls"].append(rec)

    # -- dispatch sites -------------------------------------------------------------------------
    def _mark_root(self, node: cst.CSTNode | None) -> None:
        if node is not None:
            self._roots[id(node)] = node

    def visit_If(self, node: cst.If) -> None:
        self._mark_root(node.test)

    def visit_While(self, node: cst.While) -> None:
        self._mark_root(node.test)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._mark_root(node.test)

    def visit_Assert(self, node: cst.Assert) -> None:
        self._mark_root(node.test)

    def visit_CompIf(self, node: cst.CompIf) -> None:
        self._mark_root(node.test)

    def visit_Arg(self, node: cst.Arg) -> None:
        self._mark_root(node.value)

    def visit_Return(self, node: cst.Return) -> None:
        self._mark_root(node.value)

    def visit_Expr(self, node: cst.Expr) -> None:
        self._mark_root(node.value)

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._mark_root(node.body)

    def visit_Element(self, node: cst.Element) -> None:
        self._mark_root(node.value)

    def visit_DictElement(self, node: cst.DictElement) -> None:
        self._mark_root(node.value)

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = type(node)  # exact type checks: isinstance on libcst's ABC-based nodes is slow
        if kind in _ASSIGNS and node.value is not None:  # type: ignore[attr-defined]
            self._mark_root(node.value)  # type: ignore[attr-defined]
        if id(node) in self._roots:
            self._root_stack.append(node)
        if kind is cst.Comparison:
            self._dispatch_primitive_comparison(node)  # type: ignore[arg-type]
        elif kind is cst.Attribute:
            self._dispatch_primitive_enum(node)  # type: ignore[arg-type]
        visit = getattr(self, f"visit_{kind.__name__}", None)
        return True if visit is None else visit(node) is not False

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass  # no per-attribute hooks here; skipping libcst's getattr per child saves ~10%

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass

    def on_leave(self, original_node: cst.CSTNode) -> None:
        leave = getattr(self, f"leave_{type(original_node).__name__}", None)
        if leave is not None:
            leave(original_node)
        if self._root_stack and self._root_stack[-1] is original_node:
            self._root_stack.pop()

    def _in_helper_definition(self) -> bool:
        # The helpers' own bodies (``return self == SpeculativeAlgorithm.DFLASH``) define, not branch.
        # The same goes for the enum's other predicates (is_none, is_speculative).
        defs = [s for s in self.scopes if s.kind == "def"]
        if not defs:
            return False
        in_enum = any(s.kind == "class" and s.name == self.settings.enum_name for s in self.scopes)
        return defs[-1].name in self.helpers or (in_enum and defs[-1].name.startswith("is_"))

    def _add_site(self, primitive: str) -> None:
        if not self._root_stack or self._in_helper_definition():
            return
        root = self._root_stack[-1]
        site = self._site_roots.get(id(root))
        if site is None:
            # Outer parentheses are layout (black adds them when a condition wraps), not identity.
            bare = root.with_changes(lpar=[], rpar=[]) if getattr(root, "lpar", None) else root
            code = self.module.code_for_node(bare)
            site = {
                "scope": self.qualname or "<module>",
                "expr": normalise_expression(code),
                "primitives": [],
                "line": None,
            }
            self._line_later(site, "line", root)
            self._site_roots[id(root)] = site
            self.facts["dispatch"].append(site)
        if primitive not in site["primitives"]:
            site["primitives"].append(primitive)

    def _dispatch_primitive_call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in self.helpers and not node.args:
            self._add_site(f"{node.func.attr.value}()")

    def _dispatch_primitive_enum(self, node: cst.Attribute) -> None:
        if (
            isinstance(node.value, cst.Name)
            and node.value.value == self.settings.enum_name
            and node.attr.value.isupper()
        ):
            self._add_site(f"{self.settings.enum_name}.{node.attr.value}")

    def _algorithm_strings(self, node: cst.BaseExpression) -> list[str]:
        value = _string_value(node)
        if value is not None:
            return [value] if value.upper() in self.algo_names else []
        if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
            found = []
            for el in node.elements:
                found.extend(self._algorithm_strings(el.value))
            return found
        return []

    def _dispatch_primitive_comparison(self, node: cst.Comparison) -> None:
        operands = [node.left] + [c.comparator for c in node.comparisons]
        ops = (cst.Equal, cst.NotEqual, cst.In, cst.NotIn, cst.Is, cst.IsNot)
        if not all(isinstance(c.operator, ops) for c in node.comparisons):
            return
        for operand in operands:
            for name in self._algorithm_strings(operand):
                self._add_site(f'"{name}"')


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
    )


@dataclass
class PyIndex:
    """Facts for a set of files, with a per-file content-hash cache. Not thread-safe."""

    root: Path
    settings: IndexSettings
    cache_dir: Path | None
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # rel path -> facts
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
            return json.loads(cached.read_text())
        facts = self._extract(rel, data)
        if facts is not None and cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(facts))
            tmp.replace(cached)
        return facts

    def _extract(self, rel: str, data: bytes) -> dict[str, Any] | None:
        self.parsed.append(rel)
        try:
            module = cst.parse_module(data)
        except cst.ParserSyntaxError as exc:
            self.errors[rel] = f"{exc.message} (line {exc.raw_line})"
            return None
        modname, is_package = module_name(rel, self.settings.source_root)
        collector = FactCollector(module, modname, is_package, self.settings)
        module.visit(collector)
        return collector.finish()

    def load_many(self, rels: Iterable[str]) -> None:
        for rel in rels:
            self.load(rel)

    def module_file(self, module: str) -> str | None:
        """Tree-relative file of an importable module, if it exists in the tree."""
        base = Path(self.settings.source_root, *module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if (self.root / candidate).is_file():
                return candidate.as_posix()
        return None

    def is_namespace_package(self, module: str) -> bool:
        """A directory without ``__init__.py`` that holds Python files (PEP 420)."""
        path = self.root / self.settings.source_root / Path(*module.split("."))
        return path.is_dir() and not (path / "__init__.py").exists()

    def module_facts(self, module: str) -> dict[str, Any] | None:
        rel = self.module_file(module)
        return self.load(rel) if rel else None
