"""Shift every added function of a set down by two lines, patch by patch, as a maintainer's edit would.

``python -m tests.verify.shift_added_functions SET DEST`` writes DEST: a self-contained copy of SET
(``patchkit sets copy``) whose every patch has a blank line and a comment at the top of each function the
set adds (a function whose qualified name the base's file lacks), then refreshed and locked. Everything
below those lines moves; what a declaration names by function or statement does not. The copy must
verify as SET does (tests/verify/test_declarations_move.py).

Each patch is rebuilt from the applied tree: for every patch's commit, the tree as that patch leaves it,
with the insertions made (a function of the state, so the patches stay consistent with each other),
committed with the patch's own message; ``patchkit refresh`` writes the patches back.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path

COMMENT = "# moved by two lines: a declaration by name must still hold"


def patchkit(*args: object) -> str:
    done = subprocess.run([sys.executable, "-m", "patchkit", *map(str, args)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"patchkit {' '.join(map(str, args))} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def git(tree: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00", "GIT_COMMITTER_NAME": "patchkit test",
           "GIT_COMMITTER_EMAIL": "test@patchkit.invalid"}
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, check=True,
                          env=env).stdout


def qualified_functions(tree: ast.AST) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}.{child.name}" if prefix else child.name
                if not isinstance(child, ast.ClassDef):
                    out[qual] = child
                visit(child, qual)

    visit(tree, "")
    return out


def shifted(source: str, base_source: str | None) -> str:
    """``source`` with a blank line and a comment above the first statement of every function the base lacks."""
    known = set(qualified_functions(ast.parse(base_source))) if base_source is not None else set()
    lines = source.splitlines(keepends=True)
    inserts = []
    for qual, fn in qualified_functions(ast.parse(source)).items():
        first = fn.body[0]
        if qual in known or first.lineno == fn.lineno:
            continue  # the base's function, or a one-line def
        indent = lines[first.lineno - 1][: len(lines[first.lineno - 1]) - len(lines[first.lineno - 1].lstrip())]
        inserts.append((first.lineno - 1, ["\n", f"{indent}{COMMENT}\n"]))
    for index, new in sorted(inserts, reverse=True):
        lines[index:index] = new
    return "".join(lines)


def rewrite_history(tree: Path, patches: int) -> None:
    """Replace the last ``patches`` commits of ``tree`` with their shifted versions, same messages."""
    commits = git(tree, "rev-list", "--reverse", f"HEAD~{patches}..HEAD").split()
    base = git(tree, "rev-parse", f"HEAD~{patches}").strip()
    git(tree, "checkout", "-q", "--detach", base)
    for commit in commits:
        git(tree, "checkout", "-q", commit, "--", ".")
        touched = git(tree, "diff", "--name-only", base, commit).split()
        for rel in (r for r in touched if r.endswith(".py") and (tree / r).is_file()):
            before = subprocess.run(["git", "-C", str(tree), "show", f"{base}:{rel}"], capture_output=True,
                                    text=True, check=False)
            path = tree / rel
            path.write_text(shifted(path.read_text(), before.stdout if before.returncode == 0 else None))
        git(tree, "add", "-A")
        git(tree, "commit", "-q", "--allow-empty", "-C", commit)


def shift_set(set_dir: Path, dest: Path) -> Path:
    patchkit("sets", "copy", set_dir, dest)
    with tempfile.TemporaryDirectory(prefix="shift-") as scratch:
        work = Path(scratch) / "tree"
        patchkit("base", "fetch", "--set", dest, "--dest", work)
        patchkit("apply", "--set", dest, "--target", work)
        series = [ln for ln in (dest / "series").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        rewrite_history(work, len(series))
        patchkit("refresh", "--set", dest, "--target", work, "--accept-context")  # the moved lines are context
    patchkit("lock", "--set", dest)
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m tests.verify.shift_added_functions SET DEST")
    print(shift_set(Path(sys.argv[1]), Path(sys.argv[2])))
