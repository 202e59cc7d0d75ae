"""The layout's import rules, read off the source with ``ast`` (eager and lazy imports alike).

Every import points down the layers (:data:`LAYERS`, top first): the commands, then what prints, then
the GPU runs and host preparation, the verify runner, the patch-set engine, the gates, the gate API,
the Python index, and the infrastructure at the bottom. A module imports its own package and the layers below it, never
a layer above or a sibling package of its own layer; the rule counts imports under ``if TYPE_CHECKING:``
too (a type needed from above belongs lower down).

And, within that order:

1. only the commands (``patchkit/cli.py``, ``patchkit/commands/``: the composition root) import the
   gates (``checks/``, the package ``patchkit.checks``) or ``patchkit.render``;
2. ``checks`` imports from patchkit only the gate API (``patchkit.verify.{api,envs,cache}``), the index
   and the infrastructure modules;
3. only ``patchkit/render/`` imports rich;
4. ``patchkit/smoke/`` imports nothing of the engine but ``patchkit.patchset.state``;
5. the engine (``patchkit/patchset/``) imports nothing of ``patchkit.verify``, not even the gate API: what
   it needs of a gate (``port``'s dispatch scan) the command hands it, with the gate's own context;

and three that keep the packages apart: ``patchkit.verify.api`` imports nothing else of verify, only
``patchkit/git.py`` imports gitpython, and the modules of patchkit import each other without a cycle
(the cycle rule counts the ``TYPE_CHECKING`` imports too). The other rules read the imports that run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INFRASTRUCTURE = {"patchkit", "patchkit.errors", "patchkit.proc", "patchkit.tomlfile", "patchkit.manifest",
                  "patchkit.results", "patchkit.git"}
GATE_API = {"patchkit.verify.api", "patchkit.verify.envs", "patchkit.verify.cache"}
#: Ratchet: modules still importing gitpython directly, each with the change that removes it.
GITPYTHON_LEFT: dict[str, str] = {}


@dataclass(frozen=True)
class Import:
    source: str  # repo-relative file
    module: str  # absolute module name imported
    lazy: bool  # inside a function
    typing_only: bool = False  # under `if TYPE_CHECKING:` (the cycle rule counts it, the others do not)


def module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[0] == "checks":  # the folder is the package patchkit.checks
        parts.insert(0, "patchkit")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: from . import x / from ..y import z
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    modules = [f"{base}.{alias.name}" for alias in node.names if _is_module(f"{base}.{alias.name}")]
    yield from modules or [base]  # `from patchkit import proc` imports the module patchkit.proc


def _is_module(name: str) -> bool:
    path = REPO / name.replace(".", "/")  # patchkit/checks links to checks/
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path) -> list[Import]:
    return imports_of_text(path.read_text(encoding="utf-8"), path)


def imports_of_text(text: str, path: Path) -> list[Import]:
    tree = ast.parse(text, str(path))
    name = module_of(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for body in child.body:
                    visit(ast.Module(body=[body], type_ignores=[]), lazy, True)
                for orelse in child.orelse:
                    visit(orelse, lazy, typing_only)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                rel = str(path.relative_to(REPO))
                found.extend(Import(rel, target, lazy, typing_only) for target in _targets(child, package))
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, inner, typing_only)

    visit(tree, False, False)
    return found


def all_imports() -> list[Import]:
    linked = (REPO / "patchkit" / "checks", REPO / "patchkit" / "sets")  # read once, through checks/
    own = [p for p in (REPO / "patchkit").rglob("*.py") if not any(p.is_relative_to(link) for link in linked)]
    files = sorted([*own, *(REPO / "checks").rglob("*.py")])
    return [imp for path in files for imp in imports_of(path)]


ALL_IMPORTS = all_imports()
IMPORTS = [imp for imp in ALL_IMPORTS if not imp.typing_only]  # what runs: the layout rules read these


def top(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def offenders(rule: str) -> list[str]:
    return [f"{imp.source} imports {imp.module}" + (" (lazily)" if imp.lazy else "") for imp in IMPORTS
            if _breaks(rule, imp)]


def is_command(source: str) -> bool:
    return source == "patchkit/cli.py" or source.startswith("patchkit/commands/")


def _breaks(rule: str, imp: Import) -> bool:
    src = imp.source
    if rule == "composition root":
        in_render = src.startswith("patchkit/render/")
        wanted = top(imp.module, "checks", "patchkit.checks") or (top(imp.module, "patchkit.render") and not in_render)
        return wanted and src.startswith("patchkit/") and not is_command(src)
    if rule == "checks use the gate API":
        allowed = GATE_API | INFRASTRUCTURE
        sibling = top(imp.module, "patchkit.checks", "patchkit.index")
        return src.startswith("checks/") and top(imp.module, "patchkit") and imp.module not in allowed and not sibling
    if rule == "only render imports rich":
        return top(imp.module, "rich") and not src.startswith("patchkit/render/")
    if rule == "smoke sees only patchset.state":
        return (src.startswith("patchkit/smoke/") and top(imp.module, "patchkit.patchset")
                and imp.module != "patchkit.patchset.state")
    if rule == "the engine sees no verify":
        return src.startswith("patchkit/patchset/") and top(imp.module, "patchkit.verify")
    if rule == "the gate API stands alone":
        return src == "patchkit/verify/api.py" and top(imp.module, "patchkit.verify")
    if rule == "one git wrapper":
        return top(imp.module, "git") and src != "patchkit/git.py" and src not in GITPYTHON_LEFT
    raise AssertionError(rule)


@pytest.mark.parametrize("rule", ["composition root", "checks use the gate API", "only render imports rich",
                                  "smoke sees only patchset.state", "the engine sees no verify",
                                  "the gate API stands alone", "one git wrapper"])
def test_import_rule(rule):
    assert offenders(rule) == []


def test_the_rules_see_a_breach():
    """The reader is not blind: a lazy import of checks from the runner would be caught."""
    breach = Import("patchkit/verify/run.py", "patchkit.checks.registry", lazy=True)
    assert _breaks("composition root", breach)
    assert not _breaks("composition root", Import("patchkit/commands/verify.py", "patchkit.checks.registry",
                                                  lazy=True))
    assert _breaks("checks use the gate API", Import("checks/xref.py", "patchkit.patchset.apply", lazy=False))
    assert _breaks("only render imports rich", Import("patchkit/cli.py", "rich.console", lazy=False))
    assert _breaks("the engine sees no verify", Import("patchkit/patchset/port.py", "patchkit.verify.api", lazy=True))
    assert not _breaks("the engine sees no verify", Import("patchkit/patchset/port.py", "patchkit.index", lazy=True))


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (as a path), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := walk(node)):
            return found
    return None


def import_graph(imports: list[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for imp in imports:
        source = module_of(REPO / imp.source)
        if top(source, "patchkit") and top(imp.module, "patchkit") and imp.module not in ("patchkit", source):
            graph.setdefault(source, set()).add(imp.module)
    return graph


def test_patchkit_modules_import_each_other_without_a_cycle():
    graph = import_graph(ALL_IMPORTS)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_rule_sees_a_type_only_import_back():
    """The two cycles that came back were annotations (``sampling`` needing ``run.Variant``, ``junit``
    needing ``run.GateRun``): an import under ``if TYPE_CHECKING:`` is read, and closes a cycle."""
    back = Import("patchkit/bench/profile.py", "patchkit.bench.run", lazy=False, typing_only=True)
    assert _cycle(import_graph([*ALL_IMPORTS, back])) is not None
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from patchkit.bench import run\n"
    path = REPO / "patchkit" / "bench" / "profile.py"
    read = [imp for imp in imports_of_text(source, path) if imp.module == "patchkit.bench.run"]
    assert read and read[0].typing_only


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_importing_the_cli_loads_only_the_composition_root():
    """Core modules load inside the commands: ``patchkit --help`` imports none of them."""
    code = "import sys, patchkit.cli; print(' '.join(sorted(m for m in sys.modules if m.startswith('patchkit'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    loaded = {name for name in done.stdout.split() if not name.startswith("patchkit.commands.")}
    assert loaded <= {"patchkit", "patchkit.cli", "patchkit.commands", "patchkit.error_handler", "patchkit.errors",
                      "patchkit.render", "patchkit.results"}


#: The layers, top first: each entry names the packages (or modules) of one layer. What no entry names
#: is infrastructure, the bottom layer (errors, proc, git, fsutil, manifest, paths, results, ...).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("patchkit.testing",),  # helpers for tests: they run the CLI
    ("patchkit.__main__|patchkit.cli|patchkit.commands",),  # the commands: the composition root
    ("patchkit.render",),  # every output
    ("patchkit.bench",),  # the GPU bench (runs the smoke test's servers)
    ("patchkit.smoke", "patchkit.hostprep"),  # the GPU smoke test; offline bundles and test models
    ("patchkit.verify",),  # the verify runner: the command hands it the gates
    ("patchkit.patchset",),  # the patch-set engine
    ("patchkit.checks",),  # the gates
    ("patchkit.verify.api|patchkit.verify.envs|patchkit.verify.cache",),  # the gate API
    ("patchkit.index",),  # the Python index every analysis reads
)


def layer_of(module: str) -> tuple[int, str]:
    """The module's layer (0 at the top) and its unit there: the package or module the entry names
    (the longest that holds the module: ``patchkit.verify.api`` is the gate API, not the runner)."""
    found = [(len(prefix), rank, unit) for rank, units in enumerate(LAYERS) for unit in units
             for prefix in unit.split("|") if top(module, prefix)]  # one unit: a|b|c
    if not found:
        return len(LAYERS), "infrastructure"
    _, rank, unit = max(found)
    return rank, unit


def upward(imp: Import) -> bool:
    """An import of a layer above the source's, or of a sibling package in the same layer."""
    source = module_of(REPO / imp.source)
    if not top(imp.module, "patchkit") or imp.module == "patchkit":
        return False
    (from_rank, from_unit), (to_rank, to_unit) = layer_of(source), layer_of(imp.module)
    return to_rank < from_rank or (to_rank == from_rank and to_unit != from_unit)


def test_every_import_points_down_the_layers():
    breaches = [f"{imp.source} imports {imp.module}" + (" (for types)" if imp.typing_only else "")
                for imp in ALL_IMPORTS if upward(imp)]
    assert breaches == []


def test_the_layer_rule_sees_an_upward_or_sideways_import():
    assert upward(Import("patchkit/patchset/drift.py", "patchkit.verify.run", lazy=True))
    assert upward(Import("patchkit/index/walk.py", "patchkit.patchset.state", lazy=False, typing_only=True))
    assert upward(Import("patchkit/fsutil.py", "patchkit.patchset.transaction", lazy=True))
    assert upward(Import("patchkit/smoke/run.py", "patchkit.hostprep.bundle", lazy=False))  # a sibling
    assert upward(Import("checks/xref.py", "patchkit.render.verify", lazy=False))
    assert upward(Import("checks/xref.py", "patchkit.patchset.series", lazy=True))  # the gates sit below the engine
    assert upward(Import("patchkit/verify/envs.py", "patchkit.verify.run", lazy=True))  # the gate API, below the gates
    assert not upward(Import("checks/xref.py", "patchkit.verify.api", lazy=False))
    assert not upward(Import("patchkit/patchset/drift.py", "patchkit.index.pyindex", lazy=True))
    assert not upward(Import("patchkit/commands/port.py", "patchkit.checks.dispatch", lazy=True))
    assert not upward(Import("patchkit/git.py", "patchkit.fsutil", lazy=False))  # within the infrastructure


def test_in_a_checkout_the_gates_import_only_as_patchkit_checks():
    """One name for one module: ``checks/`` imported as a top-level package refuses, with the fix."""
    done = subprocess.run([sys.executable, "-c", "import checks"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode != 0 and "import patchkit.checks" in done.stderr
    ok = subprocess.run([sys.executable, "-c", "import patchkit.checks.registry"], capture_output=True, text=True,
                        cwd=REPO)
    assert ok.returncode == 0, ok.stderr
