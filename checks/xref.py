"""xref: cross-references of the symbol family (``[verify.xref] family``) resolve and fit.

The index covers the files the series touches plus every file under the source root whose bytes
match the family regex (a prefilter; each hit is parsed once with ``ast``, facts cached by content
hash). Because any file that defines, imports, calls or reads a family name must contain it, the
prefilter cannot miss a use of a family symbol.

Findings (errors):
- an import of a name the target module neither defines nor re-exports (or of a missing module);
- ``X.attr`` where X is a class or module of the index that has no such attribute or enum member;
- a call to a family function or class whose positional count or keyword names do not fit its
  signature (dataclass fields are the constructor; ``*args``/``**kwargs``, defaults and keyword-only
  parameters are honoured; decorated callables other than known signature-preserving ones are skipped);
- ``self.<family attr>`` read in a class (and its indexed bases) that never assigns or defines it;
  a class with ``__getattr__`` is only flagged when no indexed class assigns the attribute either;
- a family class imported but never instantiated or subclassed, a family function never called.

On the lines the series adds, names outside the family are checked too (``checks/_xref/names.py``):
``self.X`` reads resolve in the class, its bases or its declared dynamic source
(``[verify.xref] dynamic``), attributes on values of a known type are fields of that type (or of a
class an earlier ``isinstance`` check narrows the value to), a method without ``@property`` used
as a value is reported at its ``def``, and a ``self`` attribute that only the reading method assigns,
after the read, while construction never sets it (a lazily set attribute whose ``__init__`` line went
missing) is reported at the read (``checks/_xref/selfinit.py``).

A touched file that does not compile has no facts: the compile gate reports it, and this gate says in
one warning at its line what it did not check there, including whether a family name the file
mentions is used (a use there cannot be seen, so the name is not reported as never called).

:func:`symbol_table` returns where each family symbol is defined, imported and used.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from patchkit.checks._uncompiled import mentioning, skipped, uncompiled
from patchkit.checks._xref.model import Model, Ref, bind_problems
from patchkit.checks._xref.names import AddedCodeRules
from patchkit.index import (
    PyIndex,
    added_lines,
    module_name,
    prefilter,
    python_files,
    scan,
    settings_from_manifest,
)
from patchkit.verify.api import Example, Finding, Severity, VerifyContext

NAME = "xref"
DESCRIPTION = "imports, attributes, calls and self attributes of the symbol family resolve and fit"

_NEVER_CALLED_EXEMPT = re.compile(r"^(__\w+__|test_\w+)$")


@dataclass(frozen=True)
class Place:
    file: str
    line: int | None
    scope: str = ""


@dataclass(frozen=True)
class Symbol:
    """One family name: where it is defined, imported and used (the semantic version of a grep)."""

    name: str
    kinds: tuple[str, ...]  # class, function, method, attribute, member, variable
    defined: tuple[Place, ...]
    imported: tuple[Place, ...]
    used: tuple[Place, ...]


@dataclass
class _Run:
    ctx: VerifyContext
    index: PyIndex
    model: Model
    family: re.Pattern[str]
    files: list[str]
    facts: list[dict[str, Any]]
    findings: list[Finding]
    set_facts: list[dict[str, Any]]  # the set's own tests: their uses count, they are not checked
    unjudged: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # uncompiled file -> what it hid

    def add(self, file: str, line: int | None, message: str, hint: str | None = None) -> None:
        self.findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=file, line=line, message=message,
                                     hint=hint))


def _build(ctx: VerifyContext) -> _Run:
    settings = settings_from_manifest(ctx.manifest)
    index = PyIndex(ctx.root, settings, ctx.cache_dir)
    tree_scan = scan(ctx.root, settings, ctx.cache_dir)
    all_files, family_files = tree_scan.files, tree_scan.family
    touched = [t for t in ctx.touched if t.endswith(".py") and (ctx.root / t).is_file()
               and t.startswith(settings.source_root + "/")]
    files = sorted(set(family_files) | set(touched))
    facts = [f for f in (index.load(rel) for rel in files) if f is not None]
    packages = tuple(sorted({module_name(rel, settings.source_root)[0].split(".")[0] for rel in all_files}))
    return _Run(ctx, index, Model(index, packages), settings.family_re(), files, facts, [], _set_test_facts(ctx))


def _set_test_facts(ctx: VerifyContext) -> list[dict[str, Any]]:
    """Facts of the set's test files that mention the family (``[verify.xref] use_paths``, default
    ``["tests"]``, relative to the set directory): a helper only the set's tests call is used."""
    settings = settings_from_manifest(ctx.manifest)
    out = []
    for sub in ctx.gate_config(NAME).get("use_paths", ["tests"]):
        if not (ctx.set_dir / sub).is_dir():
            continue
        sub_settings = dataclasses.replace(settings, source_root=sub)
        index = PyIndex(ctx.set_dir, sub_settings, ctx.cache_dir)
        for rel in prefilter(ctx.set_dir, python_files(ctx.set_dir, sub), settings.family.encode()):
            facts = index.load(rel)
            if facts is not None:
                out.append({**facts, "path": f"@set/{rel}"})
    return out


def run(ctx: VerifyContext) -> list[Finding]:
    state = _build(ctx)
    # a touched file that does not compile has no facts: the compile gate reports it, this gate says once
    # what it could not check there (and leaves unjudged a name whose only use may be in it)
    broken = {rel: problem for rel, problem in uncompiled(ctx).items() if rel in state.files}
    for rel in broken:
        state.unjudged[rel] = ["its imports, attributes, calls and self attributes"]
    for facts in state.facts:
        _check_imports(state, facts)
        _check_attributes(state, facts)
        _check_calls(state, facts)
        _check_self_reads(state, facts)
    _check_added_code(state)
    # a use path outside the set that is missing was reported when the set was loaded: without its uses,
    # "never called" would be that same cause again
    missing_uses = set(ctx.gate_config(NAME).get("use_paths", [])) & ctx.missing_references
    if ctx.gate_config(NAME).get("check_unused", True) and not missing_uses:
        _check_unused(state)
    elif missing_uses:
        state.findings.append(Finding(gate=NAME, severity=Severity.INFO, file="", line=None,
                                      message=f"unused family names not judged: the uses in {sorted(missing_uses)} are "
                                      "missing (reported when the set was loaded)"))
    for rel, problem in broken.items():
        state.findings.append(skipped(NAME, problem, state.unjudged[rel]))
    symbols = _symbols(state)
    # how warm the fact cache was is progress, not a finding: a finding depends on the tree alone
    ctx.progress(f"{len(state.index.parsed)} file(s) parsed, the rest read from the fact cache")
    state.findings.append(
        Finding(gate=NAME, severity=Severity.INFO, file="", line=None,
                message=f"symbol table: {len(symbols)} family symbols across {len(state.facts)} indexed files")
    )
    return state.findings


def symbol_table(ctx: VerifyContext) -> list[Symbol]:
    """Where each family symbol is defined, imported and used (cheap when the facts are cached)."""
    return _symbols(_build(ctx))


# ---------------------------------------------------------------------------------------------
# Rules


def _check_imports(state: _Run, facts: dict[str, Any]) -> None:
    model = state.model
    for imp in facts["imports"]:
        module, name = imp["module"], imp["name"]
        if not model.in_tree(module):
            continue
        if name is None:
            if not model.module_exists(module):
                state.add(facts["path"], imp["line"], f"`import {module}`: no such module in the tree")
            continue
        if not model.module_exists(module):
            state.add(facts["path"], imp["line"], f"`from {module} import {name}`: no such module in the tree")
            continue
        loaded = model.index.module_file(module) in state.index.facts
        if not (loaded or state.family.search(name)):
            continue  # a non-family name from an unindexed module: the imports gate covers it at run time
        exports = model.exports(module)
        if exports is None or name in exports or model.has_submodule(module, name):
            continue
        state.add(facts["path"], imp["line"],
                  f"`from {module} import {name}`: {module} neither defines nor re-exports {name}",
                  "define the name there, fix its spelling, or import it from where it lives")


def _check_attributes(state: _Run, facts: dict[str, Any]) -> None:
    for base, attr, line, _scope in facts["attrs"]:
        if base in ("?", "self", "cls"):
            continue
        if state.family.search(attr):
            with state.model.loading():
                _check_attribute(state, facts, base, attr, line)
        else:
            _check_attribute(state, facts, base, attr, line)


def _check_attribute(state: _Run, facts: dict[str, Any], base: str, attr: str, line: int | None) -> None:
    ref = state.model.resolve_dotted(facts, base)
    if ref is None or ref.kind not in ("class", "module"):
        return
    if ref.kind == "module":
        exports = state.model.exports(ref.module)
        if not (exports is None or attr in exports or state.model.has_submodule(ref.module, attr)):
            state.add(facts["path"], line, f"`{base}.{attr}`: module {ref.module} has no attribute {attr}")
        return
    members = state.model.members(ref)
    if not members.complete or members.has_getattr or attr in members.names:
        return
    what = "enum member" if members.is_enum else "attribute"
    state.add(facts["path"], line, f"`{base}.{attr}`: {ref.qualname} has no {what} {attr}",
              f"add {attr} to {ref.qualname} ({ref.module}) or fix the name")


def _callee_ref(state: _Run, facts: dict[str, Any], call: dict[str, Any]) -> tuple[Ref | None, bool]:
    """The callee and whether it is bound (called through an instance or a class attribute)."""
    callee = call["callee"]
    if callee.startswith("self.") and callee.count(".") == 1 and call["cls"]:
        cls = Ref("class", facts["module"], call["cls"])
        return state.model.member(cls, callee[5:]), True
    ref = state.model.resolve_dotted(facts, callee)
    bound = "." in callee and ref is not None and ref.kind == "function" and "." in ref.qualname
    return ref, bound


def _check_calls(state: _Run, facts: dict[str, Any]) -> None:
    for call in facts["calls"]:
        if not state.family.search(call["callee"]):  # a family callable, or a method reached through one
            continue
        ref, bound = _callee_ref(state, facts, call)
        if ref is None or ref.kind not in ("function", "class"):
            continue
        params = state.model.signature(ref, bound)
        if params is None:
            continue
        for problem in bind_problems(params, call["npos"], call["kw"], call["star"], call["dstar"]):
            keyword = re.search(r"argument '(\w+)'$", problem)  # at the offending keyword's own line
            line = call.get("kw_lines", {}).get(keyword.group(1), call["line"]) if keyword else call["line"]
            state.add(facts["path"], line, f"call to {ref.qualname}(): {problem}",
                      f"compare with the signature of {ref.qualname} in {ref.module}")


def _check_added_code(state: _Run) -> None:
    """The rules for names outside the family, on the lines the series adds (checks/_xref/names.py)."""
    touched = set(state.ctx.touched)
    mine = [facts for facts in state.facts if facts["path"] in touched]
    added = added_lines(state.ctx.root, [facts["path"] for facts in mine], state.ctx.base_commit)
    rules = AddedCodeRules(state.model, state.ctx.gate_config(NAME), state.family.search)
    for facts in mine:
        lines = added.get(facts["path"])
        if lines:
            for problem in rules.check(facts, lines):
                state.add(problem.file, problem.line, problem.message, problem.hint)


def _assigned_anywhere(state: _Run) -> set[str]:
    names: set[str] = set()
    for facts in state.facts:
        for cls in facts["classes"].values():
            names |= set(cls["self_assigned"]) | set(cls["attrs"])
    return names


def _check_self_reads(state: _Run, facts: dict[str, Any]) -> None:
    anywhere: set[str] | None = None
    for qual, cls in facts["classes"].items():
        if not cls["self_reads"]:
            continue
        members = state.model.members(Ref("class", facts["module"], qual))
        reported: set[str] = set()
        for attr, line, _scope in cls["self_reads"]:
            if attr in members.names or attr in reported:
                continue
            if members.has_getattr:
                anywhere = anywhere if anywhere is not None else _assigned_anywhere(state)
                if attr in anywhere:
                    continue  # __getattr__ may forward to a class that has it
                note = f" ({qual} defines __getattr__, but no indexed class assigns {attr} either)"
            else:
                note = ""
            reported.add(attr)
            state.add(facts["path"], line, f"self.{attr} is read in {qual} but never assigned there{note}",
                      f"assign self.{attr} (e.g. in __init__) or fix the name")


def _hidden_use(state: _Run, name: str) -> bool:
    """Whether a touched file that does not compile mentions ``name``: a use there cannot be seen, so
    whether the name is used is not judged (the file's note says so)."""
    hiding = [problem for problem in mentioning(state.ctx, name) if problem.file in state.unjudged]
    for problem in hiding:
        state.unjudged[problem.file].append(f"whether {name} is used")
    return bool(hiding)


def _check_unused(state: _Run) -> None:
    # [verify.xref] allow_unused = { name = "reason" }: API kept on purpose (e.g. only the set's tests call it)
    allowed = state.ctx.gate_config(NAME).get("allow_unused", {})
    uses = _use_counts(state)
    for facts in state.facts:
        for qual, cls in facts["classes"].items():
            name = cls["name"]
            if not state.family.search(name) or state.model.members(Ref("class", facts["module"], qual)).is_enum:
                continue
            if (uses["instantiate"][name] == 0 and uses["subclass"][name] == 0 and name not in allowed
                    and not _hidden_use(state, name)):
                where = uses["import_places"][name]
                file, line = (where[0].file, where[0].line) if where else (facts["path"], cls["line"])
                verb = "imported" if where else "defined"
                state.add(file, line, f"family class {name} is {verb} but never instantiated or subclassed",
                          "construct it where it is meant to be used, or remove it")
        for qual, fn in facts["functions"].items():
            name = fn["name"]
            if (not state.family.search(name) or fn["nested"] or _NEVER_CALLED_EXEMPT.match(name)
                    or any(d not in ("staticmethod", "classmethod") for d in fn["decorators"])):
                continue
            if uses["reference"][name] <= 0 and name not in allowed and not _hidden_use(state, name):
                state.add(facts["path"], fn["line"], f"family function {qual} is never called",
                          "call it where it is meant to be used, or remove it")


def _use_counts(state: _Run) -> dict[str, Any]:
    """Per name: instantiations, subclassings, references (calls/reads minus defs and imports)."""
    counts: dict[str, Any] = {k: defaultdict(int) for k in ("instantiate", "subclass", "reference")}
    counts["import_places"] = defaultdict(list)
    for facts in state.facts + state.set_facts:
        for call in facts["calls"]:
            parts = call["callee"].split(".")
            counts["instantiate"][parts[-1]] += 1
            if len(parts) > 1:
                counts["instantiate"][parts[-2]] += 1  # Cls.factory(...) builds one too
        for cls in facts["classes"].values():
            for base in cls["bases"]:
                counts["subclass"][base.split(".")[-1]] += 1
            for attr, _line, _scope in cls["self_reads"]:
                counts["reference"][attr] += 1
        for name, _line, _scope in facts["names"]:
            counts["reference"][name] += 1
        for _base, attr, _line, _scope in facts["attrs"]:
            counts["reference"][attr] += 1
        for fn in facts["functions"].values():
            counts["reference"][fn["name"]] -= 1  # the def's own name node
        for cls in facts["classes"].values():
            counts["reference"][cls["name"]] -= 1
        for imp in facts["imports"]:
            if imp["name"] is not None:
                counts["reference"][imp["asname"]] -= 1
                if not facts["path"].startswith("@set/"):
                    counts["import_places"][imp["name"]].append(Place(facts["path"], imp["line"], imp["scope"]))
    return counts


# ---------------------------------------------------------------------------------------------
# Symbol table


def _symbols(state: _Run) -> list[Symbol]:
    kinds: dict[str, set[str]] = defaultdict(set)
    defined: dict[str, list[Place]] = defaultdict(list)
    imported: dict[str, list[Place]] = defaultdict(list)
    used: dict[str, list[Place]] = defaultdict(list)
    fam = state.family.search
    for facts in state.facts:
        path = facts["path"]
        _definitions(facts, fam, kinds, defined)
        def_lines = {(p.file, p.line) for places in defined.values() for p in places}
        for imp in facts["imports"]:
            if imp["name"] and fam(imp["name"]):
                imported[imp["name"]].append(Place(path, imp["line"], imp["scope"]))
        import_lines = {(path, imp["line"]) for imp in facts["imports"]}
        refs = [(n, line, s) for n, line, s in facts["names"]]
        refs += [(a, line, s) for _b, a, line, s in facts["attrs"]]
        refs += [(a, line, s) for cls in facts["classes"].values() for a, line, s in cls["self_reads"]]
        for name, line, scope in refs:
            if fam(name) and (path, line) not in def_lines and (path, line) not in import_lines:
                used[name].append(Place(path, line, scope))
    names = sorted(set(defined) | set(imported) | set(used))
    return [
        Symbol(n, tuple(sorted(kinds[n])) or ("unresolved",), tuple(defined[n]), tuple(imported[n]),
               tuple(sorted(set(used[n]), key=lambda p: (p.file, p.line or 0))))
        for n in names
    ]


def _definitions(facts: dict[str, Any], fam: Any, kinds: dict[str, set[str]], defined: dict[str, list[Place]]) -> None:
    path = facts["path"]
    for qual, cls in facts["classes"].items():
        if fam(cls["name"]):
            kinds[cls["name"]].add("class")
            defined[cls["name"]].append(Place(path, cls["line"], qual))
        for attr, line, scope in cls["self_assigned_at"]:
            kinds[attr].add("attribute")
            defined[attr].append(Place(path, line, scope))
        enum_like = any(b.split(".")[-1].endswith("Enum") for b in cls["bases"])
        for f in cls["fields"]:
            if fam(f["name"]):
                kinds[f["name"]].add("field")
                defined[f["name"]].append(Place(path, None, qual))
        if enum_like:
            for attr in cls["attrs"]:
                if fam(attr) and attr.isupper():
                    kinds[attr].add("member")
                    defined[attr].append(Place(path, None, qual))
    for qual, fn in facts["functions"].items():
        if fam(fn["name"]):
            kinds[fn["name"]].add("method" if fn["class"] else "function")
            defined[fn["name"]].append(Place(path, fn["line"], qual))
    for name, entry in facts["toplevel"].items():
        if fam(name) and entry["kind"] == "assign":
            kinds[name].add("variable")
            defined[name].append(Place(path, entry["line"], "<module>"))


def format_symbol_table(symbols: list[Symbol], limit: int = 6) -> str:
    """Plain-text rendering (one block per symbol) for people and logs."""
    lines = []
    for s in symbols:
        lines.append(f"{s.name} [{', '.join(s.kinds)}]")
        for label, places in (("defined", s.defined), ("imported", s.imported), ("used", s.used)):
            if places:
                shown = ", ".join(f"{p.file}:{p.line}" if p.line else p.file for p in places[:limit])
                more = f" (+{len(places) - limit} more)" if len(places) > limit else ""
                lines.append(f"  {label:8} {len(places):3}  {shown}{more}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Examples

_PKG = "python/pkg/__init__.py"
_ENUM = "python/pkg/algo.py"
_ENUM_SRC = '''\
from enum import Enum, auto


class Algo(Enum):
    DFLASH = auto()
    DDTREE = auto()
'''
_UTIL = "python/pkg/ddtree_utils.py"
_UTIL_SRC = '''\
from dataclasses import dataclass, field


def build_ddtree(budget, topk=4, *, depth_bonus=0.0):
    return budget + topk + depth_bonus


@dataclass
class DDTreeInput:
    tokens: list
    budget: int = 8
    mask: list = field(default_factory=list)
'''
_USER = "python/pkg/worker.py"
_USER_SRC = '''\
from pkg.algo import Algo
from pkg.ddtree_utils import DDTreeInput, build_ddtree


class Worker:
    def __init__(self, algo):
        self.is_ddtree = algo == Algo.DDTREE
        self.ddtree_budget = 8

    def step(self):
        if self.is_ddtree:
            tree = build_ddtree(self.ddtree_budget, topk=2, depth_bonus=0.5)
            return DDTreeInput([tree], budget=self.ddtree_budget)
'''


def _example(name: str, user: str, expect: str | None = None) -> Example:
    files = {_PKG: "", _ENUM: _ENUM_SRC, _UTIL: _UTIL_SRC, _USER: user}
    return Example(name=name, files=files, passes=expect is None, expect=expect)


_FAMILY_EXAMPLES: tuple[Example, ...] = (
    _example("consistent family", _USER_SRC),
    _example("phantom import", _USER_SRC.replace("DDTreeInput, build_ddtree", "DDTreeInput, build_ddtree, DDTreeGone")
             .replace("tree = build", "DDTreeGone\n            tree = build"), "neither defines nor re-exports"),
    _example("missing enum member", _USER_SRC.replace("Algo.DDTREE", "Algo.DDTREE_V2"), "has no enum member"),
    _example("wrong keyword", _USER_SRC.replace("depth_bonus=0.5", "depth_bonsu=0.5"), "unexpected keyword"),
    _example("too many positionals to a dataclass",
             _USER_SRC.replace("budget=self.ddtree_budget", "self.ddtree_budget, [], 1"),
             "positional"),
    _example("unassigned self attribute", _USER_SRC.replace("(self.ddtree_budget, topk", "(self.ddtree_budgt, topk"),
             "never assigned"),
    _example("class never instantiated", _USER_SRC.replace("return DDTreeInput([tree], budget=self.ddtree_budget)",
                                                           "return [tree]"), "never instantiated"),
    _example("function never called", _USER_SRC.replace("build_ddtree(self.ddtree_budget, topk=2, depth_bonus=0.5)",
                                                        "self.ddtree_budget"), "never called"),
)


# Field classes (checks/_xref/fields.py): the base's record, the set's worker that reads and sets it.
_ARGS = "python/pkg/server_args.py"
_ARGS_SRC = '''\
import dataclasses

from pkg.spec_fields import Spec

_NAMESPACES = [Spec]


@dataclasses.dataclass
class ServerArgs:
    page_size: int = 1
    speculative_num_draft_tokens: int = 8

    def override(self, source, **fields):
        for name, value in fields.items():
            setattr(self, name, value)
'''
_SPEC = "python/pkg/spec_fields.py"
_SPEC_SRC = "class Spec:\n    speculative_ddtree_budget: int = 7\n"
_WORKER = "python/pkg/tree_worker.py"
_WORKER_SRC = '''\
import dataclasses
from copy import deepcopy

from pkg.server_args import ServerArgs


def resolve_widths(server_args: ServerArgs) -> dict:
    budget = int(server_args.speculative_ddtree_budget)
    if budget < 1:
        return dict(budget=1, verify_width=2)
    return dict(budget=budget, verify_width=budget + server_args.page_size)


def draft_args(server_args: ServerArgs):
    widths = resolve_widths(server_args)
    view = deepcopy(server_args)
    view.override("draft", speculative_num_draft_tokens=widths["budget"])
    return dataclasses.replace(view, page_size=1), ServerArgs(page_size=widths["verify_width"])
'''
_FIELDS_CONFIG = {"fields": {"classes": ["pkg.server_args.ServerArgs"], "setters": ["override"],
                             "namespaces": {"pkg.server_args.ServerArgs": "_NAMESPACES"}}}


def _fields_example(name: str, worker: str, expect: str | None = None) -> Example:
    files = {"@base/python/pkg/__init__.py": "", f"@base/{_ARGS}": _ARGS_SRC, f"@base/{_SPEC}": _SPEC_SRC,
             _WORKER: worker}
    return Example(name=name, files=files, passes=expect is None, expect=expect, config=_FIELDS_CONFIG)


# A self attribute set lazily (checks/_xref/selfinit.py): issue 37's DDTreeWorkerV2._kv_rows.
_KV = "python/pkg/kv_worker.py"
_KV_SRC = '''\
from typing import Optional


class Base:
    def __init__(self):
        self.pool = [4, 8]


class KVWorker(Base):
    scale = 2

    def __init__(self):
        super().__init__()
        self._kv_rows: Optional[int] = None
        self._setup()

    def _setup(self):
        self.width = 3

    def kv_row_bytes(self):
        if self._kv_rows is None:
            self._kv_rows = max(self.pool) * self.scale * self.width
        return self._kv_rows

    def total(self):
        count = len(self.pool)
        self.last = count
        return self.last + count
'''
_KV_INIT = "        self._kv_rows: Optional[int] = None\n"


def _init_example(name: str, source: str, expect: str | None = None) -> Example:
    return Example(name=name, files={_PKG: "", _KV: source}, passes=expect is None, expect=expect)


_INIT_EXAMPLES: tuple[Example, ...] = (
    _init_example("lazily set attribute initialised in __init__", _KV_SRC),
    _init_example("lazily set attribute __init__ never initialises", _KV_SRC.replace(_KV_INIT, ""),
                  "`self._kv_rows` is read here, but no method of KVWorker assigns it before this read and "
                  "__init__ never sets it"),
    _init_example("lazily set attribute initialised by the base class",
                  _KV_SRC.replace(_KV_INIT, "").replace("        self.pool = [4, 8]\n",
                                                        "        self.pool = [4, 8]\n        self._kv_rows = None\n")),
    _init_example("lazily set attribute with a class-level default",
                  _KV_SRC.replace(_KV_INIT, "").replace("    scale = 2\n", "    scale = 2\n    _kv_rows = None\n")),
    _init_example("lazily set attribute initialised by a method __init__ calls",
                  _KV_SRC.replace(_KV_INIT, "").replace("        self.width = 3\n",
                                                        "        self.width = 3\n        self._kv_rows = None\n")),
    _init_example("lazily set attribute guarded by hasattr",
                  _KV_SRC.replace(_KV_INIT, "").replace("if self._kv_rows is None:",
                                                        'if not hasattr(self, "_kv_rows"):')),
)


EXAMPLES: tuple[Example, ...] = (
    *_FAMILY_EXAMPLES,
    *_INIT_EXAMPLES,
    _fields_example("server args fields, setters and dict keys that exist", _WORKER_SRC),
    _fields_example("a misspelt field read on server_args",
                    _WORKER_SRC.replace("server_args.page_size)", "server_args.page_sise)"),
                    "reads page_sise, which ServerArgs"),
    _fields_example("a misspelt namespace field read on server_args",
                    _WORKER_SRC.replace(".speculative_ddtree_budget)", ".speculative_ddtree_budgett)"),
                    "reads speculative_ddtree_budgett"),
    _fields_example("a misspelt keyword in a setter call",
                    _WORKER_SRC.replace("speculative_num_draft_tokens=", "speculative_num_draft_token="),
                    "sets speculative_num_draft_token, which is not a field of ServerArgs"),
    _fields_example("a misspelt keyword in dataclasses.replace",
                    _WORKER_SRC.replace("page_size=1)", "pagesize=1)"), "sets pagesize"),
    _fields_example("a misspelt keyword in the record's constructor",
                    _WORKER_SRC.replace("ServerArgs(page_size=", "ServerArgs(page_sizes="), "sets page_sizes"),
    _fields_example("a key the building function never writes",
                    _WORKER_SRC.replace('widths["budget"]', 'widths["budgets"]'),
                    "returns a dict with keys budget, verify_width only"),
)


def symbols(ctx: VerifyContext) -> list[Symbol]:
    """The runner's hook for the symbol table (same as :func:`symbol_table`)."""
    return symbol_table(ctx)
