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

- **A module-level constant** the set adds (``DDTREE_TREE_MASK_BACKENDS = ("triton", "fa3")``): read by
  the check that let the refused value through, it is the line that changed, not the check. Named
  when it holds a value the case failed on and an added line that ran reads it, at the line of that
  value inside it; the reading line is then no finding of its own (one finding per cause).

- **The condition guarding the refusal a case expects**: a case that expects an error the set raises
  (``expect_error`` found in the message of an added ``raise``) and did not get it ran that raise's
  ``if`` test, which let the case through (``if block_size < 1:`` where ``< 2`` was meant): named at the
  test's line when that test ran and the raise did not.

A touched file that does not parse is the compile gate's finding: the finders read only the sources
:func:`parsed_sources` keeps (and each finder, handed one anyway, finds nothing in it), so no input
makes the gate crash.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from patchkit.checks._tests.coverage import Statements, scope_of

ANY_FIELD = "*"
CONSTANT_CAUSE = "(a constant the set adds)"


def parses(source: str) -> bool:
    """Whether ``source`` is Python this interpreter parses (a file that does not is compile's finding)."""
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a null byte in the source
        return False
    return True


def parsed_sources(sources: Mapping[str, str]) -> dict[str, str]:
    """The sources the cause finders may read: those that parse."""
    return {rel: source for rel, source in sources.items() if parses(source)}


def class_defaults(source: str, added: frozenset[int]) -> list[tuple[str, int, str]]:
    """(field, line, repr of the literal default) of every class-body field on an added line (none
    in a source that does not parse)."""
    out = []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    for node in ast.walk(tree):
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
    every added statement there ran, the origin is at module level, or the source does not parse)."""
    try:
        table = Statements.of(source)
    except (SyntaxError, ValueError):
        return None
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


def _strings(value: Any) -> set[str]:
    """The strings inside a literal (a tuple of names, a dict of them, one string)."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return _strings(list(value)) | _strings(list(value.values()))
    if isinstance(value, (tuple, list, set, frozenset)):
        return {s for item in value for s in _strings(item)}
    return {str(value)}


def module_constants(source: str, added: frozenset[int]) -> list[tuple[str, ast.expr, Any]]:
    """(name, value node, literal) of every module-level constant an added line assigns."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = []
    for stmt in tree.body:
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else (
            stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None)
        value = getattr(stmt, "value", None)
        lines = range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)
        if not isinstance(target, ast.Name) or value is None or not any(n in added for n in lines):
            continue
        try:
            out.append((target.id, value, ast.literal_eval(value)))
        except ValueError:
            continue  # computed: not a constant the set wrote down
    return out


def constant_causes(sources: Mapping[str, str], added: Mapping[str, frozenset[int]], failed: set[tuple[str, str]],
                    read: Sequence[str]) -> list[tuple[str, int, str]]:
    """(file, line, why) of the added module-level constants that hold a value the case failed on and
    that a line of ``read`` (the added lines that ran) reads, at the line of that value."""
    values = {value for _field, value in failed}
    out = []
    for rel, source in sources.items():
        for name, node, literal in module_constants(source, added.get(rel, frozenset())):
            held = sorted(_strings(literal) & values)
            if not held or not any(re.search(rf"\b{re.escape(name)}\b", text) for text in read):
                continue
            at = next((n.lineno for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value == held[0]),
                      node.lineno)
            out.append((rel, at, f"{name} {CONSTANT_CAUSE} holds {held[0]!r}, and the check that ran reads it"))
    return out


def _message_text(node: ast.expr) -> str:
    """The literal text of an error message: string constants, f-strings' literal parts (each value
    a gap), implicit concatenation and ``+`` of them; "" for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "\0"
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _message_text(node.left) + _message_text(node.right)
    return ""


def guard_causes(sources: Mapping[str, str], added: Mapping[str, frozenset[int]], expected: str,
                 executed: Mapping[str, set[int]]) -> list[tuple[str, int, str]]:
    """(file, line, why) of the ``if`` test guarding an added ``raise`` whose message holds ``expected``
    (the refusal a case expects and did not get), when that test ran and the raise did not."""
    out = []
    for rel, source in sources.items():
        lines = added.get(rel, frozenset())
        ran = executed.get(rel, set())
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.If) or node.test.lineno not in ran:
                continue
            for stmt in node.body:
                if (isinstance(stmt, ast.Raise) and stmt.lineno in lines and stmt.lineno not in ran
                        and isinstance(stmt.exc, ast.Call) and stmt.exc.args
                        and expected in _message_text(stmt.exc.args[0])):
                    out.append((rel, node.test.lineno, f"this condition ran and let the case through: the refusal it "
                                f"expects ({expected!r}) is the raise at {rel}:{stmt.lineno}, which did not run"))
    return out
