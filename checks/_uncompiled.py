"""One cause, one finding: a touched file that does not compile is the compile gate's finding.

Every other gate meets the same file again (its import fails, its facts are missing, the tests that
import it fail, the backend cases that reach it raise), and reporting each of those is reporting one
cause many times, some of them falsely (a dispatch site "no longer exists", a function is "never
called" by the code that does not parse). So a gate asks :func:`uncompiled` which touched files do not
compile, leaves out what it cannot judge because of them (:func:`caused_by` tells a failure that is
one of theirs), and says so in one warning per file (:func:`skipped`): what it did not check, and why.

"Compiles" is the running interpreter's ``compile``, as the index parses; a file that fails only on
another target version is the compile gate's alone, and the other gates judge it as their interpreter
sees it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from patchkit.verify.api import Finding, Severity, VerifyContext

SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")


@dataclass(frozen=True)
class Uncompiled:
    """A touched file that does not compile: where, and the compiler's words."""

    file: str  # tree-relative
    line: int | None
    error: str  # "IndentationError: unexpected indent"


#: By (file path, content hash): gates run one after another on the same files.
_SEEN: dict[tuple[str, str], Uncompiled | None] = {}


def compile_error(path: Path, rel: str) -> Uncompiled | None:
    """The file's compile error with the running interpreter, or None when it compiles (or is gone)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    key = (str(path), hashlib.sha256(data).hexdigest())
    if key not in _SEEN:
        try:
            compile(data, str(path), "exec", dont_inherit=True)
            _SEEN[key] = None
        except SyntaxError as error:
            _SEEN[key] = Uncompiled(rel, error.lineno, f"{type(error).__name__}: {error.msg}")
        except ValueError as error:  # a null byte in the source
            _SEEN[key] = Uncompiled(rel, None, f"{type(error).__name__}: {error}")
    return _SEEN[key]


def uncompiled(ctx: VerifyContext) -> dict[str, Uncompiled]:
    """The touched Python files of the tree that do not compile, by tree-relative path."""
    found = (compile_error(ctx.root / rel, rel) for rel in sorted(ctx.touched) if rel.endswith(".py"))
    return {problem.file: problem for problem in found if problem is not None}


def caused_by(text: str, broken: Mapping[str, Uncompiled], root: Path) -> Uncompiled | None:
    """The file of ``broken`` whose compile error ``text`` (an error message, a traceback) reports:
    a SyntaxError-family name and the file (its path, or Python's own ``(name.py, line N)``)."""
    if not broken or not any(name in text for name in SYNTAX_ERRORS):
        return None
    for rel, problem in broken.items():
        paths = {str(root / rel), os.path.abspath(root / rel), str((root / rel).resolve())}
        if any(path in text for path in paths) or f"({Path(rel).name}, line {problem.line})" in text:
            return problem
    return None


def skipped(gate: str, problem: Uncompiled, what: Iterable[str] | str) -> Finding:
    """The note a gate gives for what it did not check because ``problem``'s file does not compile."""
    items = [what] if isinstance(what, str) else sorted(set(what))
    shown = ", ".join(items[:8]) + (f" and {len(items) - 8} more" if len(items) > 8 else "")
    where = f"{problem.file}:{problem.line}" if problem.line else problem.file
    return Finding(gate=gate, severity=Severity.WARNING, file=problem.file, line=problem.line,
                   message=f"not checked because {where} does not compile ({problem.error}; the compile gate "
                   f"reports it): {shown}",
                   hint="fix the compile error; this gate then checks it")


def mentioning(ctx: VerifyContext, name: str) -> list[Uncompiled]:
    """The touched files that do not compile and mention ``name``: a rule that judges whether a name
    is used (xref's "never called") cannot see a use there, so it leaves the name unjudged."""
    return [problem for rel, problem in uncompiled(ctx).items() if name.encode() in (ctx.root / rel).read_bytes()]
