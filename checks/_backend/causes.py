"""The changed line behind a failing backend case when no run-time assignment of the set made the
refused value: the probe's trace-back follows values assigned while a case resolves, so two
kinds of cause stay invisible to it.

- **A class-level default** the set adds (``speculative_ddtree_topk_cap: Optional[int] = 1``): the
  class body ran at import, no assignment during the case made the value. Named when the case never
  assigned the field and failed on it, on its value (a family field), or on a value computed by a
  line that reads it.
- **An added branch that never ran** in the function that produced the refused value (a DDTREE branch
  moved below a ``return`` of the base): the value's origin is base code, so the trace-back names
  nothing of the set. Named: the first added statement of that function the case did not run.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from patchkit.checks._tests.coverage import Statements, scope_of

ANY_FIELD = "*"


def class_defaults(source: str, added: frozenset[int]) -> list[tuple[str, int, str]]:
    """(field, line, repr of the literal default) of every class-body field on an added line."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            target = stmt.target if isinstance(stmt, ast.AnnAssign) else (
                stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None)
            value = getattr(stmt, "value", None)
            if not isinstance(target, ast.Name) or value is None or stmt.lineno not in added:
                continue
            try:
                literal = ast.literal_eval(value)
            except ValueError:
                continue  # field(default_factory=...), a call: not a plain default
            out.append((target.id, stmt.lineno, str(literal)))
    return out


def default_causes(sources: Mapping[str, str], added: Mapping[str, frozenset[int]], failed: set[tuple[str, str]],
                   assigned: Iterable[str], family: Callable[[str], Any],
                   origin_texts: Sequence[str] = ()) -> list[tuple[str, int, str]]:
    """(file, line, "field = default") of the added class-level defaults the failed values point at:
    the failed field itself, a family field holding the failed value, or a field the line that
    produced a failed value reads."""
    ran = set(assigned)
    out = []
    for rel, source in sources.items():
        for name, line, literal in class_defaults(source, added.get(rel, frozenset())):
            if name in ran:
                continue  # assigned while the case resolved: the trace-back follows that assignment
            about_field = any(field == name for field, _value in failed)
            about_value = bool(family(name)) and any(value == literal for _field, value in failed)
            read = any(re.search(rf"\b{re.escape(name)}\b", text) for text in origin_texts)
            if about_field or about_value or read:
                out.append((rel, line, f"{name} = {literal} (a class-level default)"))
    return out


def unrun_branch(source: str, added: frozenset[int], origin_line: int,
                 executed: Iterable[int]) -> int | None:
    """The first added statement of the function around ``origin_line`` that did not run (None when
    every added statement there ran, or the origin is at module level)."""
    table = Statements.of(source)
    qual = scope_of(table, origin_line)
    if not qual:
        return None
    first, last = table.spans[qual]
    nested = [span for name, span in table.spans.items() if name.startswith(qual + ".")]
    ran = {table.owner[n] for n in executed if n in table.owner}
    candidates = sorted({table.owner[n] for n in added if first <= n <= last and n in table.owner
                         and not any(a <= n <= b for a, b in nested)} - ran - {table.owner.get(origin_line)})
    return candidates[0] if candidates else None


def branch_causes(sources: Mapping[str, str], added: Mapping[str, frozenset[int]],
                  origins: Sequence[tuple[str, int, str]],
                  executed: Mapping[str, set[int]]) -> list[tuple[str, int, str]]:
    """(file, line, why) of the never-run added branch in each function that produced a refused value."""
    out = []
    for rel, line, assignment in origins:
        if rel not in sources:
            continue
        branch = unrun_branch(sources[rel], added.get(rel, frozenset()), line, executed.get(rel, set()))
        if branch is not None:
            out.append((rel, branch, f"this added branch never ran, and {assignment} came from {rel}:{line} "
                        "in the same function"))
    return out
