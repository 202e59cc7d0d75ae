"""Added-line coverage and the spectrum-based locator of the tests gate.

The runner records, per test (and for collection and wide fixtures), which lines of the touched files
ran (``PATCHKIT_COVER_FILES``). A line counts by its *statement*: Python reports a multi-line
statement at one of its lines, so an added line is executed when any line its innermost statement
owns ran (its own lines, not those of the statements nested in it); comments, blank lines and
docstrings are not code.

**Declarations.** Added lines no CPU can run are declared in the manifest, above the lock marker, by
name, so that they move with the code (an edit above them changes nothing)::

    [verify.tests.unreachable]
    "python/pkg/mod.py:Worker.capture_graphs" = "CUDA graph capture: needs a GPU"     # a function or class
    "python/pkg/mod.py:topk:return _topk_triton(x, k)" = "the Triton path: CUDA only" # statements of one
    "python/pkg/mod.py::if TYPE_CHECKING:" = "read by type checkers only"             # ... at module level
    [verify.tests.untested]                  # known gaps: a CPU test could run them, none does yet
    "python/pkg/mod.py:Worker.refuse" = "the refusal of a mamba target: no toy mamba backend yet"

``FILE:FUNCTION:STATEMENT`` covers every statement the set adds inside FUNCTION (at any depth) whose
first line, whitespace collapsed, starts with STATEMENT, with everything nested in it. Both tables
silence the warning; the coverage row counts them apart, so a known gap stays visible. A declaration
that matches nothing the set adds (a file the series does not touch, a function the file lacks, a
statement no longer there), one by line number, or one without a reason is a finding of the tests gate
at the manifest's line, naming the nearest match: the other gates still run.

**Locator.** When set tests fail, each added statement's Ochiai score is
``failed(s) / sqrt(total_failed * (failed(s) + passed(s)))``, where failed(s) and passed(s) count the
failing and passing tests that ran it; the top candidates (score > 0) are findings at their line.
"""

from __future__ import annotations

import ast
import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchkit.manifest import human_part

TABLE = "unreachable"  # lines no CPU test can run (CUDA kernels, GPU-only branches)
GAPS = "untested"  # known gaps: lines a CPU test could run but none does yet, each with its reason


@dataclass(frozen=True)
class Statements:
    """Per line of a file, the first line of the innermost statement that owns it (code lines only);
    the line span of every function and class (by qualified name) and of every statement (by its first
    line); and the source lines, so a declaration can name a statement by its text."""

    owner: dict[int, int]
    spans: dict[str, tuple[int, int]]
    ends: dict[int, int] = field(default_factory=dict)  # statement's first line -> its last line
    text: tuple[str, ...] = ()

    @classmethod
    def of(cls, source: str) -> Statements:
        tree = ast.parse(source)
        owner: dict[int, int] = {}
        spans: dict[str, tuple[int, int]] = {}
        ends: dict[int, int] = {}

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
            ends[first] = node.end_lineno or node.lineno
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
        return cls(owner, spans, ends, tuple(text))

    def first_line_text(self, line: int) -> str:
        """A statement's first line, its whitespace collapsed (what a declaration's TEXT is matched with)."""
        return " ".join(self.text[line - 1].split()) if 0 < line <= len(self.text) else ""


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
    spec: str = ""  # as the manifest writes it


@dataclass(frozen=True)
class Problem:
    """A declaration that names nothing the set adds (or is malformed): a finding at the manifest's line."""

    spec: str
    manifest_line: int | None
    message: str
    hint: str


def declarations(manifest_path: Path, table: dict[str, Any], added: Mapping[str, frozenset[int]],
                 statements: Mapping[str, Statements]) -> tuple[list[Declaration], list[Problem]]:
    """The manifest's ``[verify.tests.unreachable]`` and ``[verify.tests.untested]``, each matched with
    the lines the set adds; the ones that match nothing are problems, with the nearest name. A file in
    ``added`` without a statement table does not parse: its declarations wait for the compile gate's fix."""
    text = human_part(manifest_path.read_text(encoding="utf-8"))
    out: list[Declaration] = []
    problems: list[Problem] = []
    for name in (TABLE, GAPS):
        entries = table.get(name, {})
        if not isinstance(entries, dict):
            problems.append(Problem(name, _line_of(text, f"[verify.tests.{name}]"), f"[verify.tests.{name}] is not a "
                                    "table", f'write [verify.tests.{name}] with lines "FILE:FUNCTION" = "reason"'))
            continue
        for spec, reason in entries.items():
            where = _line_of(text, _toml_key(str(spec)), f"'{spec}'")
            found = _declaration(str(spec), reason, name, where, added, statements)
            if isinstance(found, Problem):
                problems.append(found)
            elif found is not None:
                out.append(found)
    return out, problems


def _declaration(spec: str, reason: object, table: str, line: int | None, added: Mapping[str, frozenset[int]],
                 statements: Mapping[str, Statements]) -> Declaration | Problem | None:
    def problem(message: str, hint: str) -> Problem:
        return Problem(spec, line, f"coverage declaration {spec!r} {message}", hint)

    if not isinstance(reason, str) or not reason.strip():
        return problem("has no reason", 'say why no CPU can run it (e.g. "a Triton kernel: CUDA only")')
    file, _, rest = spec.partition(":")
    qual, _, wanted_text = rest.partition(":")
    if file not in added:
        near = _nearest(file, added)
        return problem("names a file the set adds no Python line to",
                       f"the nearest file the set touches is {near}" if near else "remove the declaration")
    table_of = statements.get(file)
    if table_of is None:
        return None  # the file does not parse: the compile gate reports it, nothing can be matched yet
    if _LINES.fullmatch(rest):
        first, _, last = rest.partition("-")
        lines = set(range(int(first), int(last or first) + 1))
        named = suggestions(file, table_of, added[file], lines)
        return problem("names lines by number, which move with every edit above them",
                       "declare by name: " + (", ".join(named) if named else '"FILE:FUNCTION"'))
    if (qual and not _QUAL.fullmatch(qual)) or (not qual and not wanted_text):
        return problem("is not FILE:FUNCTION or FILE:FUNCTION:STATEMENT",
                       'write e.g. "python/pkg/mod.py:Worker.capture" or '
                       '"python/pkg/mod.py:Worker.capture:return _launch(grid)"')
    if qual and qual not in table_of.spans:
        near = _nearest(qual, table_of.spans)
        return problem(f"names no function or class of {file}",
                       f"the nearest name is {file}:{near}" if near else "remove the declaration")
    mine = _added_statements(table_of, added[file], qual)
    if not mine:
        return problem(f"names code the set does not add to {file}", "remove the declaration")
    if not wanted_text:
        return Declaration(file, frozenset(_span_lines(table_of, qual) & added[file]), reason.strip(), line, table,
                           spec)
    wanted = " ".join(wanted_text.split())
    hits = [first for first in mine if table_of.first_line_text(first).startswith(wanted)]
    if not hits:
        near = _nearest(wanted, [table_of.first_line_text(first) for first in mine])
        return problem(f"matches no statement the set adds to {qual or 'the module level'}",
                       f"the nearest added statement there is {near!r}" if near else "remove the declaration")
    covered = frozenset(n for first in hits for n in range(first, table_of.ends[first] + 1) if n in added[file])
    return Declaration(file, covered, reason.strip(), line, table, spec)


_QUAL = re.compile(r"[A-Za-z_][\w.]*")
_LINES = re.compile(r"\d+(?:-\d+)?")


def _span_lines(table: Statements, qual: str) -> set[int]:
    if not qual:
        return set(range(1, len(table.text) + 1))
    start, end = table.spans[qual]
    return set(range(start, end + 1))


def _added_statements(table: Statements, added: frozenset[int], qual: str) -> list[int]:
    """First lines of the statements the set adds (or changes a line of) inside ``qual`` (any depth; "" is the
    module level only)."""
    span = _span_lines(table, qual)
    firsts = {table.owner[n] for n in added & span if n in table.owner}  # a statement with an added line of its own
    return sorted(first for first in firsts if first in span and (qual or _top_level(table, first)))


def _top_level(table: Statements, first: int) -> bool:
    """Whether the statement starting at ``first`` is at module level (a def's own span starts at it)."""
    return not any(start < first <= end for start, end in table.spans.values())


def _nearest(word: str, choices: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.0)
    return found[0] if found else None


def suggestions(file: str, table: Statements, added: frozenset[int], lines: Iterable[int]) -> list[str]:
    """Declarations by name for the added statements among ``lines``: a whole function where all its
    added statements are among them, else each statement by its text; as TOML keys."""
    firsts = sorted({table.owner[n] for n in set(lines) & added if n in table.owner})
    out: list[str] = []
    chosen: list[int] = []
    for first in firsts:
        if any(c < first <= table.ends[c] for c in chosen):
            continue  # nested in a statement already named, which covers it
        chosen.append(first)
        scope = scope_of(table, first)
        body = {table.owner[n] for n in _span_lines(table, scope) & added if n in table.owner} - {table.spans.get(scope,
                                                                                                       (0, 0))[0]}
        whole = scope and body <= set(firsts)  # its def line runs at import: a whole body is the function
        spec = f"{file}:{scope}" if whole else f"{file}:{scope}:{table.first_line_text(first)}"
        if _toml_key(spec) not in out:
            out.append(_toml_key(spec))
    return out


def _toml_key(spec: str) -> str:
    return '"' + spec.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _line_of(text: str, *keys: str) -> int | None:
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith(keys):
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
