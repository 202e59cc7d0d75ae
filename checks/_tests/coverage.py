"""Added-line coverage and the spectrum-based locator of the tests gate.

The runner records, per test (and for collection and wide fixtures), which lines of the touched files
ran (``PATCHKIT_COVER_FILES``). A line counts by its *statement*: Python reports a multi-line
statement at one of its lines, so an added line is executed when any line its innermost statement
owns ran (its own lines, not those of the statements nested in it); comments, blank lines and
docstrings are not code.

**Declarations.** Lines that cannot run on CPU are declared in the manifest, above the lock marker::

    [verify.tests.unreachable]
    "python/pkg/mod.py:Worker.capture_graphs" = "CUDA graph capture: needs a GPU"   # a function or class
    "python/pkg/mod.py:120-131" = "the Triton launch: CUDA only"                      # lines (or one line)
    [verify.tests.untested]                  # known gaps: a CPU test could run them, none does yet
    "python/pkg/mod.py:Worker.refuse" = "the refusal of a mamba target: no toy mamba backend yet"

Both silence the warning; the coverage row counts them apart, so a known gap stays visible.
A declaration that names a file the series does not touch, a function that has no added line, a
line the set does not add, or an empty reason is bad input naming the manifest's file and line.

**Locator.** When set tests fail, each added statement's Ochiai score is
``failed(s) / sqrt(total_failed * (failed(s) + passed(s)))``, where failed(s) and passed(s) count the
failing and passing tests that ran it; the top candidates (score > 0) are findings at their line.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.errors import BadInput, location
from patchkit.manifest import human_part

TABLE = "unreachable"  # lines no CPU test can run (CUDA kernels, GPU-only branches)
GAPS = "untested"  # known gaps: lines a CPU test could run but none does yet, each with its reason
_SPEC = re.compile(r"^(?P<file>[^:]+):(?:(?P<first>\d+)(?:-(?P<last>\d+))?|(?P<qual>[A-Za-z_][\w.]*))$")


@dataclass(frozen=True)
class Statements:
    """Per line of a file, the first line of the innermost statement that owns it (code lines only),
    and the line span of every function and class (by qualified name)."""

    owner: dict[int, int]
    spans: dict[str, tuple[int, int]]

    @classmethod
    def of(cls, source: str) -> Statements:
        tree = ast.parse(source)
        owner: dict[int, int] = {}
        spans: dict[str, tuple[int, int]] = {}

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    statement(child, prefix)
                else:
                    visit(child, prefix)

        def statement(node: ast.stmt, prefix: str) -> None:
            if _is_docstring(node):
                for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                    owner.pop(line, None)  # not code, though its function owns the lines around it
                docstrings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
                return
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            qual = prefix
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}.{node.name}" if prefix else node.name
                spans[qual] = (first, node.end_lineno or node.lineno)
            for line in range(first, (node.end_lineno or node.lineno) + 1):
                owner[line] = first  # nested statements overwrite their own lines below
            visit(node, qual)

        docstrings: set[int] = set()
        visit(tree, "")
        text = source.splitlines()
        for line in list(owner):  # blank and comment-only lines inside a statement are not code either
            stripped = text[line - 1].strip() if line <= len(text) else ""
            if line in docstrings or not stripped or stripped.startswith("#"):
                del owner[line]
        return cls(owner, spans)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def executed_statements(lines: Iterable[int], statements: Statements) -> set[int]:
    """The statements (by first line) any of ``lines`` belongs to."""
    return {statements.owner[n] for n in lines if n in statements.owner}


@dataclass(frozen=True)
class Declaration:
    file: str
    lines: frozenset[int]  # the added code lines it covers
    reason: str
    manifest_line: int | None
    table: str = TABLE


def declarations(manifest_path: Path, table: dict[str, Any], added: Mapping[str, frozenset[int]],
                 statements: Mapping[str, Statements]) -> list[Declaration]:
    """The manifest's ``[verify.tests.unreachable]``, each checked against the lines the set adds."""
    text = human_part(manifest_path.read_text(encoding="utf-8"))
    out = []
    entries = [(name, spec, reason) for name in (TABLE, GAPS) for spec, reason in table.get(name, {}).items()]
    for name, spec, reason in entries:
        where = location(manifest_path, _line_of(text, spec))
        match = _SPEC.match(spec)
        if not isinstance(reason, str) or not reason.strip():
            raise BadInput(f"coverage declaration {spec!r} has no reason", location=where,
                           hint="say why the lines cannot run on CPU (e.g. \"CUDA graph capture: needs a GPU\")")
        if match is None:
            raise BadInput(f"coverage declaration {spec!r} is not FILE:FUNCTION or FILE:LINE[-LINE]", location=where,
                           hint='write e.g. "python/pkg/mod.py:Worker.capture" or "python/pkg/mod.py:120-131"')
        file = match["file"]
        if file not in added or file not in statements:
            raise BadInput(f"coverage declaration {spec!r}: the set adds no Python line to {file}", location=where,
                           hint="name a file the series touches, or remove the declaration")
        if match["qual"]:
            span = statements[file].spans.get(match["qual"])
            if span is None:
                raise BadInput(f"coverage declaration {spec!r}: {file} defines no {match['qual']}", location=where,
                               hint="use the function's qualified name (Class.method), or remove the declaration")
            wanted = set(range(span[0], span[1] + 1))
        else:
            first = int(match["first"])
            wanted = set(range(first, int(match["last"] or first) + 1))
        lines = frozenset(wanted & added[file])
        code = wanted & set(statements[file].owner)  # blank, comment and docstring lines are not code
        if not lines & code or (not match["qual"] and code - added[file]):
            raise BadInput(f"coverage declaration {spec!r} names line(s) the set does not add to {file}",
                           location=where, hint="declare only added lines; regenerate the declarations "
                           "from `patchkit verify --gate tests --verbose`")
        out.append(Declaration(file, lines, reason.strip(), where.line, name))
    return out


def _line_of(text: str, spec: str) -> int | None:
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith((f'"{spec}"', f"'{spec}'")):
            return number
    return None


@dataclass(frozen=True)
class Uncovered:
    file: str
    lines: tuple[int, ...]  # first lines of the unexecuted added statements
    scope: str  # the innermost function or class around the first one ("" at module level)


@dataclass(frozen=True)
class Counts:
    total: int  # added statements
    done: int  # executed or declared
    gaps: int  # not executed, declared a known gap only ([verify.tests.untested])


def uncovered(added: Mapping[str, frozenset[int]], ran: Mapping[str, set[int]],
              statements: Mapping[str, Statements], declared: list[Declaration]) -> tuple[list[Uncovered], Counts]:
    """The added statements no test ran and no declaration covers, grouped by file and scope; and the
    counts."""
    skip: dict[tuple[str, int], set[str]] = {}
    for d in declared:
        for n in d.lines:
            skip.setdefault((d.file, n), set()).add(d.table)
    groups: dict[tuple[str, str], list[int]] = {}
    total = done = gaps = 0
    for file, lines in sorted(added.items()):
        table = statements.get(file)
        if table is None:
            continue
        by_statement: dict[int, set[int]] = {}
        for n in lines:
            if n in table.owner:
                by_statement.setdefault(table.owner[n], set()).add(n)
        executed = executed_statements(ran.get(file, set()), table)
        for first, stmt_lines in sorted(by_statement.items()):
            total += 1
            kinds = set().union(*(skip.get((file, n), set()) for n in stmt_lines))
            if first in executed or kinds:
                done += 1
                gaps += first not in executed and TABLE not in kinds
                continue
            groups.setdefault((file, scope_of(table, first)), []).append(first)
    return [Uncovered(f, tuple(ls), s) for (f, s), ls in groups.items()], Counts(total, done, gaps)


def scope_of(table: Statements, line: int) -> str:
    inside = [(end - start, qual) for qual, (start, end) in table.spans.items() if start <= line <= end]
    return min(inside)[1] if inside else ""


def ochiai(buckets: Mapping[str, Mapping[str, Iterable[int]]], failed: set[str], passed: set[str],
           added: Mapping[str, frozenset[int]], statements: Mapping[str, Statements]) -> list[tuple[float, str, int]]:
    """(score, file, statement line) for every added statement a failing test ran, best first."""
    fails: dict[tuple[str, int], int] = {}
    passes: dict[tuple[str, int], int] = {}
    for bucket, files in buckets.items():
        tally = fails if bucket in failed else passes if bucket in passed else None
        if tally is None:
            continue
        for file, lines in files.items():
            table = statements.get(file)
            if table is None:
                continue
            mine = {table.owner[n] for n in added.get(file, frozenset()) if n in table.owner}
            for first in executed_statements(lines, table) & mine:
                tally[(file, first)] = tally.get((file, first), 0) + 1
    scores = [(f / math.sqrt(len(failed) * (f + passes.get(key, 0))), key[0], key[1])
              for key, f in fails.items() if f]
    return sorted(scores, key=lambda s: (-s[0], s[1], s[2]))
