"""Gate ``tests``: run the patch set's own tests (``<set>/tests``) against the patched tree, on CPU.

``[verify.tests] shared`` names test packages outside the set (paths relative to the set, e.g.
``["../common/ddtree_utils_tests"]``: the tests of code several sets carry, kept once); they run in the
same pytest run as the set's own tests, against this set's tree. ``path`` narrowed to one file runs
that file alone.

pytest runs in a subprocess with ``PATCHKIT_TARGET=<tree root>`` (the set's tests find the tree
through it), in the ``[verify.env]`` environment when the manifest declares one (it must pin pytest)
or else the running interpreter. ``[verify.tests]`` may set ``interpreter = "current"`` to force the
running interpreter, ``args`` (extra pytest arguments) and ``timeout`` (seconds). Each failing test
is a finding at the test's own failing line; where the error was raised inside the tree is named in
the message. No bytecode or pytest cache is written into the set or the tree.

The same run records which lines of the touched files each test ran (``checks/_tests/coverage.py``):
every added Python statement no set test runs and no ``[verify.tests.unreachable]`` declaration
covers is a warning, per patch (an error with ``[verify.tests] strict_coverage = true``, which
``patchkit verify --strict-coverage`` sets for one run); when tests fail, the added
lines the failing tests ran and the passing ones did not are ranked (Ochiai, the functions with
uncommitted edits first; an added ``if`` at least as high as its branches' statements; of equally
ranked lines, those naming what the failing assertions check, ``commit.commit_lens`` ->
``commit_lens = ...``) and the top candidates are findings at their line, the
reason said in words. A coverage declaration that matches nothing the set adds is an error at the manifest's line
naming the nearest match (never a refusal to start: the other gates run); one whose every statement
a set test ran is a warning. A run with a failing test runs every test (never partly reused), so
the cache changes no finding.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from patchkit import proc
from patchkit.checks._probe.runner import probe_code, python_names
from patchkit.checks._tests.coverage import (
    Declaration,
    Statements,
    declarations,
    executed_statements,
    ochiai,
    suggestions,
    uncovered,
)
from patchkit.checks._tests.impact import Snapshot, SnapshotStore, code_index, rebased
from patchkit.checks._uncompiled import Uncompiled, caused_by, skipped, uncompiled
from patchkit.errors import BadInput, location
from patchkit.index import added_lines
from patchkit.manifest import line_of
from patchkit.verify.api import Example, Finding, Severity, VerifyContext
from patchkit.verify.cache import ResultCache, hash_files, key_of, sha256_file
from patchkit.verify.envs import Interpreter, stubs, verify_interpreter

NAME = "tests"
DESCRIPTION = "the patch set's own tests pass against the patched tree (pytest, CPU)"

DEFAULT_TIMEOUT_S = 900

RUNNER = Path(__file__).parent / "_tests" / "runner.py"


def choose_interpreter(ctx: VerifyContext, config: dict[str, Any]) -> Interpreter:
    if config.get("interpreter", "env") not in ("env", "current"):
        raise BadInput(f"[verify.tests] interpreter = {config['interpreter']!r}", hint='use "env" or "current"',
                       location=location("manifest.toml"))
    if config.get("interpreter") == "current" and not os.environ.get("PATCHKIT_VERIFY_PYTHON"):
        return Interpreter(sys.executable, "ran with the running interpreter ([verify.tests] interpreter = current)",
                           sys.executable)
    return verify_interpreter(ctx)


def display_path(path: Path) -> str:
    """Relative to the working directory when inside it (a repo's set), else absolute (a temp copy)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def shared_dirs(set_dir: Path, config: dict[str, Any]) -> list[Path]:
    """``[verify.tests] shared``: the test packages run with the set's own, each an existing folder."""
    shared = config.get("shared", [])
    where = location(set_dir / "manifest.toml", _config_line(set_dir, "shared"))
    if not isinstance(shared, list) or not all(isinstance(item, str) for item in shared):
        raise BadInput(f"[verify.tests] shared = {shared!r} is not a list of folder paths", location=where,
                       hint='name the folders relative to the set, e.g. shared = ["../common/ddtree_utils_tests"]')
    folders = [resolve(item, set_dir).resolve() for item in shared]
    missing = [item for item, folder in zip(shared, folders, strict=True) if not folder.is_dir()]
    if missing:
        raise BadInput(f"[verify.tests] shared names {missing[0]!r}, which is not a folder next to the set",
                       location=where, hint="fix the path (relative to the set's folder) or remove it")
    return folders


def _config_line(set_dir: Path, key: str) -> int | None:
    manifest = set_dir / "manifest.toml"
    text = manifest.read_text(encoding="utf-8", errors="replace") if manifest.is_file() else ""
    return line_of(text, "verify.tests", key)


def paths_to_run(set_dir: Path, config: dict[str, Any]) -> list[Path]:
    """What the gate runs, in order: the set's own tests (``path``, default ``tests``; absent is fine when
    shared packages are named), then every shared package; ``path`` naming one file runs that file alone."""
    own = set_dir / str(config.get("path", "tests"))
    if own.is_file():
        return [own]
    return [folder for folder in (own, *shared_dirs(set_dir, config)) if folder.is_dir()]


def pytest_ini(set_dir: Path, config: dict[str, Any]) -> str:
    """The run's pytest config: the shared test packages on ``pythonpath``, so a set's conftest loads
    their fixtures as a plugin (``pytest_plugins = ["core_fixtures"]``)."""
    shared = "".join(f"\n    {shlex.quote(str(folder))}" for folder in shared_dirs(set_dir, config))
    return f"[pytest]\npythonpath ={shared}\n" if shared else "[pytest]\n"


def run_pytest(python: str, tests: list[Path], ctx: VerifyContext, stub_dir: Path | None, config: dict[str, Any],
               selection: list[str] | None = None) -> dict[str, Any]:
    """One pytest run in ``python`` over ``tests`` (recording which tree code each test runs);
    ``selection`` limits it to those node ids (relative to the set directory)."""
    env = {"PATCHKIT_TARGET": str(ctx.root), "PATCHKIT_SET": str(ctx.set_dir), "PYTHONDONTWRITEBYTECODE": "1",
           "PATCHKIT_TRACE_DEPS": "1", "PATCHKIT_COVER_FILES": os.pathsep.join(sorted(covered_paths(ctx)))}
    # the shared test packages are importable by name (a set's conftest takes their fixtures), wherever
    # the manifest places them
    shared = [str(path) for path in shared_dirs(ctx.set_dir, config)]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stub_dir) if stub_dir else None, *shared,
                                                      os.environ.get("PYTHONPATH")]))
    timeout = float(config.get("timeout", DEFAULT_TIMEOUT_S))
    with tempfile.TemporaryDirectory(prefix="patchkit-tests-") as tmp:
        out = Path(tmp) / "results.json"
        # a config of our own: a checkout's pyproject.toml above the set (its addopts, testpaths) must not
        # decide how the set's tests run; the shared test packages are importable by their module names
        (Path(tmp) / "pytest.ini").write_text(pytest_ini(ctx.set_dir, config))
        targets = [str(ctx.set_dir / nodeid) for nodeid in selection] if selection is not None else [
            str(path) for path in tests]
        args = [python, str(RUNNER), out, str(ctx.root), *targets, "-q", "--tb=short", "-p", "no:cacheprovider",
                "-c", str(Path(tmp) / "pytest.ini"), f"--rootdir={ctx.set_dir}", *config.get("args", [])]
        try:
            done = proc.stream(args, PytestCounts(ctx.progress), check=False, env=env, cwd=ctx.set_dir,
                               timeout=timeout)
            tail = (done.stdout + done.stderr)[-3000:]
        except subprocess.TimeoutExpired:
            return {"returncode": None, "failures": [], "counts": {}, "tail": f"timed out after {timeout:.0f} s"}
        if not out.exists():
            return {"returncode": done.returncode, "failures": [], "counts": {}, "tail": tail}
        return {**json.loads(out.read_text()), "tail": tail}


_OUTCOMES = {".": "passed", "F": "failed", "E": "errors", "s": "skipped", "x": "xfailed", "X": "xpassed"}


class PytestCounts:
    """pytest's ``-q`` rows (``..s.F  [ 42%]``) as they come, told as running counts: a run of minutes
    is never silent (``patchkit verify`` prints the count, or shows it live in a terminal)."""

    def __init__(self, progress: Callable[[str], None]) -> None:
        self.progress = progress
        self.counts: dict[str, int] = {}

    def __call__(self, line: str) -> None:
        row = re.fullmatch(r"([.FEsxX]+)\s*(\[\s*\d+%\])?", line.strip())
        if not row:
            return
        for mark in row.group(1):
            name = _OUTCOMES[mark]
            self.counts[name] = self.counts.get(name, 0) + 1
        done = ", ".join(f"{n} {name}" for name, n in self.counts.items())
        self.progress(f"set tests: {done} so far" + (f" {row.group(2).replace(' ', '')}" if row.group(2) else ""))


def covered_paths(ctx: VerifyContext) -> dict[str, str]:
    """Absolute path (as the tree is imported, and resolved) -> tree-relative path of each touched .py."""
    out: dict[str, str] = {}
    for rel in ctx.touched:
        if rel.endswith(".py") and (ctx.root / rel).is_file():
            out[os.path.abspath(ctx.root / rel)] = rel
            out[str((ctx.root / rel).resolve())] = rel
    return out


def resolve(path: str, base: Path) -> Path:
    candidate = Path(path)
    return candidate if candidate.is_absolute() else (base / candidate)


def scopes(tests: list[Path]) -> list[Path]:
    """The folders the run's tests live in (a file runs with its folder's conftest and helpers)."""
    return [path if path.is_dir() else path.parent for path in tests]


def test_line(failure: dict[str, Any], tests: list[Path], set_dir: Path) -> tuple[str, int | None]:
    """The failing line inside the tests run: the last traceback entry there, else the test's own line."""
    prefixes = tuple(str(scope.resolve()) + "/" for scope in scopes(tests))
    frames = [(resolve(p, set_dir).resolve(), line) for p, line in failure["entries"]]
    inside = [(p, line) for p, line in frames if str(p).startswith(prefixes)]
    if inside:
        return display_path(inside[-1][0]), inside[-1][1]
    if failure["location"]:
        path, line0 = failure["location"][0], failure["location"][1]
        return display_path(resolve(path, set_dir)), (line0 + 1 if line0 is not None else None)
    return display_path(tests[0]), None


def raised_in_tree(failure: dict[str, Any], root: Path) -> str:
    crash = failure.get("crash")
    prefix = str(root.resolve()) + "/"
    if crash and str(crash[0]).startswith(prefix):
        return f" (raised at {str(crash[0])[len(prefix):]}:{crash[1]})"
    return ""


def failure_finding(failure: dict[str, Any], tests: list[Path], ctx: VerifyContext) -> Finding:
    file, line = test_line(failure, tests, ctx.set_dir)
    crash = failure.get("crash")
    text = failure["text"].strip()
    what = crash[2].splitlines()[0] if crash and crash[2] else (text.splitlines()[-1] if text else "")
    verb = "could not be collected" if failure["when"] == "collect" else f"failed ({failure['when']})"
    return Finding(gate=NAME, severity=Severity.ERROR, file=file, line=line,
                   message=f"{failure['nodeid']} {verb}: {what}{raised_in_tree(failure, ctx.root)}")


def traced_finding(failure: dict[str, Any], ctx: VerifyContext, added: dict[str, frozenset[int]]) -> Finding | None:
    """The deepest frame of a failure's traceback that is a line the series added, as its own finding:
    the symptom is the test, the cause is most likely there."""
    frames = [(resolve(p, ctx.set_dir).resolve(), line) for p, line in failure.get("entries", [])]
    crash = failure.get("crash")
    if crash:
        frames.append((resolve(str(crash[0]), ctx.set_dir).resolve(), crash[1]))
    prefix = str(ctx.root.resolve()) + "/"
    inside = [(str(p)[len(prefix):], line) for p, line in frames if str(p).startswith(prefix)]
    hits = [(rel, line) for rel, line in inside if line in added.get(rel, frozenset())]
    if not hits:
        return None
    rel, line = hits[-1]
    what = crash[2].splitlines()[0] if crash and crash[2] else ""
    return Finding(gate=NAME, severity=Severity.ERROR, file=rel, line=line,
                   message=f"set test {failure['nodeid']} fails through this added line: {what}",
                   hint="the test's own finding shows its assertion; the error passed through here")


def failure_text(failure: dict[str, Any]) -> str:
    crash = failure.get("crash") or []
    return "\n".join([failure.get("text", ""), *(str(part) for part in crash)])


def findings_from(outcome: dict[str, Any], tests: list[Path], ctx: VerifyContext,
                  added: dict[str, frozenset[int]] | None = None) -> list[Finding]:
    code = outcome["returncode"]
    # a test that fails because a touched file does not compile is the compile gate's finding
    broken = uncompiled(ctx)
    unrun: dict[Uncompiled, list[str]] = {}
    failures = []
    for failure in outcome["failures"]:
        cause = caused_by(failure_text(failure), broken, ctx.root)
        if cause is None:
            failures.append(failure)
        else:
            unrun.setdefault(cause, []).append(failure["nodeid"])
    findings = [failure_finding(f, tests, ctx) for f in failures]
    if added:
        traced = (traced_finding(f, ctx, added) for f in failures)
        findings += list({(f.file, f.line): f for f in traced if f is not None}.values())
        explained = {nodeid for nodeids in unrun.values() for nodeid in nodeids}
        findings += located(outcome, ctx, added, {(f.file, f.line) for f in findings}, explained,
                            checked_names(failures, tests, ctx.set_dir))
    findings += [skipped(NAME, cause, nodeids) for cause, nodeids in unrun.items()]
    shown = display_path(tests[0])
    if code == 5:
        findings.append(Finding(gate=NAME, severity=Severity.WARNING, file=shown, line=None,
                                message="pytest collected no tests",
                                hint="add tests or remove the folder"))
    elif code not in (0, 1) and not findings:
        findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=shown, line=None,
                                message=f"pytest did not complete (exit {code}): {outcome['tail'][-800:]}"))
    elif code == 1 and not findings:
        findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=shown, line=None,
                                message=f"pytest failed without a test report: {outcome['tail'][-800:]}"))
    counts = outcome.get("counts") or {}
    if counts:
        reuse = (f" ({outcome['rerun']} rerun, {outcome['reused']} reused: they ran no code that changed)"
                 if "reused" in outcome else "")
        findings.append(Finding(gate=NAME, severity=Severity.INFO, file=shown, line=None,
                                message=f"{counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed, "
                                f"{counts.get('skipped', 0)} skipped{reuse}"))
    return findings


LOCATED = 3  # the top candidates of the spectrum-based locator


def relative_lines(outcome: dict[str, Any], ctx: VerifyContext) -> dict[str, dict[str, set[int]]]:
    """The runner's per-bucket lines, keyed by tree-relative path."""
    paths = covered_paths(ctx)
    out: dict[str, dict[str, set[int]]] = {}
    for bucket, files in (outcome.get("lines") or {}).items():
        for path, lines in files.items():
            if path in paths:
                out.setdefault(bucket, {}).setdefault(paths[path], set()).update(lines)
    return out


def statement_tables(ctx: VerifyContext, added: dict[str, frozenset[int]]) -> dict[str, Statements]:
    out = {}
    for rel in added:
        try:
            out[rel] = Statements.of((ctx.root / rel).read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue  # the compile gate reports it
    return out


def uncommitted_spans(ctx: VerifyContext, files: Iterable[str]) -> dict[str, list[tuple[int, int]]]:
    """Per touched file, the (first, last) lines of each function the work tree edits over the tree's
    last commit (uncommitted edits: ``--allow-drift`` on a tree being worked on; a file git does not
    track is all new). A fact of the tree, not of an earlier run, so the cache changes nothing."""
    from patchkit.git import Repo  # lazy: only a failing run ranks lines

    files = sorted(files)
    if not files:
        return {}
    repo = Repo(ctx.root)
    untracked = set(repo.untracked())
    edited: dict[str, set[int]] = {rel: {0} for rel in files if rel in untracked}  # 0: the whole file
    current = None
    for line in repo.run("diff", "-U0", "--no-color", "--no-ext-diff", "HEAD", "--", *files).splitlines():
        if line.startswith("+++ "):
            current = line[4:].removeprefix("b/") if line[4:] != "/dev/null" else None
        elif line.startswith("@@") and current is not None and (hunk := _HUNK.match(line)):
            start, count = int(hunk.group(1)), int(hunk.group(2) or 1)
            # a pure deletion (count 0) sits between its line and the next
            edited.setdefault(current, set()).update(range(start, start + count) if count else (start, start + 1))
    out: dict[str, list[tuple[int, int]]] = {}
    for rel, lines in edited.items():
        try:
            spans = code_index((ctx.root / rel).read_text(encoding="utf-8", errors="replace")).spans
        except (OSError, SyntaxError, ValueError):
            continue
        out[rel] = [(a, b) for a, b, _qual in spans if 0 in lines or any(a <= n <= b for n in lines)]
    return out


_HUNK = re.compile(r"@@ -\S+ \+(\d+)(?:,(\d+))? @@")


def in_words(ran_failed: int, failed: int, ran_passed: int, passed: int) -> str:
    """Why a line is suspect, the way a maintainer would say it (the score only orders the lines)."""
    failing = ("every failing test runs this added line" if ran_failed == failed
               else f"{ran_failed} of the {failed} failing tests run this added line")
    if not ran_passed:
        return failing + (" and no passing test does" if passed else "")
    return failing + f", and {ran_passed} of the {passed} passing tests do too"


_BUILTIN_NAMES = frozenset(dir(builtins))


def checked_names(failures: Iterable[dict[str, Any]], tests: list[Path], set_dir: Path) -> dict[str, int]:
    """The names the failing tests' failing statements check, each with the number of failing tests
    that check it: each statement's attributes read (not called) and the plain names it reads that the
    test file does not import (``commit.commit_lens``, ``commit_lens.tolist()`` -> ``commit_lens``), and
    an ``AssertionError``'s own message words. What the locator breaks ties with: of equally suspect
    added lines, those that mention what most failing tests check."""
    prefixes = tuple(str(scope.resolve()) + "/" for scope in scopes(tests))
    counts: dict[str, int] = {}
    parsed: dict[Path, ast.Module | None] = {}
    for failure in failures:
        names: set[str] = set()
        _checked_by(failure, prefixes, set_dir, parsed, names)
        for name in names:
            if name not in _BUILTIN_NAMES and len(name) > 2:
                counts[name] = counts.get(name, 0) + 1
    return counts


def _checked_by(failure: dict[str, Any], prefixes: tuple[str, ...], set_dir: Path,
                parsed: dict[Path, ast.Module | None], names: set[str]) -> None:
    frames = [(resolve(p, set_dir).resolve(), line) for p, line in failure.get("entries", [])]
    inside = [(p, line) for p, line in frames if str(p).startswith(prefixes)]
    crash = failure.get("crash")
    if crash and crash[2] and crash[2].startswith("AssertionError: "):
        names.update(w for w in _WORD.findall(crash[2].splitlines()[0][len("AssertionError: "):]))
    if inside:
        path, line = inside[-1]
        if path not in parsed:
            try:
                parsed[path] = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
            except (OSError, SyntaxError, ValueError):
                parsed[path] = None
        tree = parsed[path]
        if tree is None:
            return
        imported = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        statement = next((n for n in ast.walk(tree) if isinstance(n, ast.stmt) and not hasattr(n, "body")
                          and n.lineno <= line <= (n.end_lineno or n.lineno)), None)
        if statement is None:
            return
        called = {id(n.func) for n in ast.walk(statement) if isinstance(n, ast.Call)}
        for node in ast.walk(statement):
            if isinstance(node, ast.Attribute) and id(node) not in called:
                names.add(node.attr)
            elif isinstance(node, ast.Name) and id(node) not in called and node.id not in imported:
                names.add(node.id)


_WORD = re.compile(r"[A-Za-z_]\w*")


def _mentions(table: Statements, line: int, names: Mapping[str, int]) -> int:
    """How many failing tests check a name the added statement at ``line`` (the lines it owns itself)
    mentions, summed over those names."""
    if not names:
        return 0
    own = [n for n in range(line, table.ends.get(line, line) + 1) if table.owner.get(n) == line]
    text = " ".join(table.text[n - 1] for n in own if 0 < n <= len(table.text))
    return sum(names.get(word, 0) for word in set(_WORD.findall(text)))


def _with_conditions(ranked: list[tuple[float, str, int]], ctx: VerifyContext, tables: dict[str, Statements],
                     ) -> tuple[list[tuple[float, str, int]], dict[tuple[str, int], int]]:
    """The ranking with each added ``if`` ranked at least as high as the statements of its branches: a
    branch the failing tests take more than the passing ones points at the condition that sent them
    there (``if b >= budget - 1:`` where ``==`` was meant), which every test runs alike. Returns the
    ranking and, per raised condition, the line of the branch statement it was raised for."""
    scores = {(file, line): score for score, file, line in ranked}
    deciding: dict[tuple[str, int], int] = {}
    for file in {file for _score, file, _line in ranked}:
        try:
            tree = ast.parse((ctx.root / file).read_text(encoding="utf-8", errors="replace"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.If) or (file, node.lineno) not in scores:
                continue
            branch = [(scores[(file, s.lineno)], s.lineno) for s in (*node.body, *node.orelse)
                      if (file, s.lineno) in scores and not isinstance(s, ast.If)]
            if branch and max(branch)[0] > scores[(file, node.lineno)]:
                score, line = max(branch)
                scores[(file, node.lineno)] = score
                deciding[(file, node.lineno)] = line
    return [(scores[(file, line)], file, line) for _score, file, line in ranked], deciding


def located(outcome: dict[str, Any], ctx: VerifyContext, added: dict[str, frozenset[int]],
            already: set[tuple[str, int | None]], explained: Collection[str] = (),
            names: Mapping[str, int] | None = None) -> list[Finding]:
    """The added statements most likely at fault when set tests fail, ranked by the spectrum of which
    tests run them (Ochiai over per-test lines: every test's, a failing run is never partly reused);
    of equally ranked ones, those naming what the failing assertions check (``names``) first.
    The ``explained`` failures (a file that does not compile) are left out: they rank nothing."""
    tests = {n: t for n, t in (outcome.get("tests") or {}).items() if n not in explained}
    failed = {n for n, t in tests.items() if t.get("outcome") == "failed"}
    passed = {n for n, t in tests.items() if t.get("outcome") == "passed"}
    buckets = relative_lines(outcome, ctx)
    if not failed or not buckets:
        return []
    tables = statement_tables(ctx, added)
    ranked = ochiai(buckets, failed, passed, added, tables)
    # lines of functions with uncommitted edits come first: a test that fails now most likely fails
    # through what was just edited (the spectrum alone ranks a line every test runs low)
    changed = uncommitted_spans(ctx, tables)

    def is_changed(file: str, line: int) -> bool:
        return any(a <= line <= b for a, b in changed.get(file, []))

    # a def or class line "runs" at every call and import: it is never the changed behaviour itself
    headers = {(file, span[0]) for file, table in tables.items() for span in table.spans.values()}
    ranked = [r for r in ranked if (r[1], r[2]) not in headers]
    ranked, deciding = _with_conditions(ranked, ctx, tables)
    ranked.sort(key=lambda r: (-round(r[0], 12), -_mentions(tables[r[1]], r[2], names or {}), r[1], r[2]))
    ranked.sort(key=lambda r: not is_changed(r[1], r[2]))
    out = []
    for _score, file, line in ranked[:LOCATED]:
        if (file, line) in already:
            continue
        table = tables[file]
        ran = [n for n in (*failed, *passed) if table.owner.get(line) in
               {table.owner.get(x) for x in buckets.get(n, {}).get(file, set())}]
        ran_failed = sum(1 for n in ran if n in failed)
        edited = "; its function has uncommitted edits" if is_changed(file, line) else ""
        branch = (f"; it decides whether the branch at line {deciding[(file, line)]} runs, which the failing "
                  "tests run more than the passing ones" if (file, line) in deciding else "")
        out.append(Finding(gate=NAME, severity=Severity.ERROR, file=file, line=line,
                           message=f"likely cause of the failing set tests: "
                           f"{in_words(ran_failed, len(failed), len(ran) - ran_failed, len(passed))}{branch}{edited}",
                           hint="of the added lines, the failing tests run this one the most and the passing "
                           "ones the least (an Ochiai ranking): read it first"))
    return out


def declaration_findings(ctx: VerifyContext, added: dict[str, frozenset[int]],
                         tables: dict[str, Statements]) -> list[Finding]:
    """An error at the manifest's line for each coverage declaration that matches nothing the set adds."""
    _, problems = declarations(ctx.manifest.path, ctx.gate_config(NAME), added, tables)
    shown = display_path(ctx.manifest.path)
    return [Finding(gate=NAME, severity=Severity.ERROR, file=shown, line=p.manifest_line, message=p.message,
                    hint=p.hint) for p in problems]


def strict_coverage(ctx: VerifyContext) -> bool:
    return bool(ctx.gate_config(NAME).get("strict_coverage"))


def coverage_findings(outcome: dict[str, Any], ctx: VerifyContext, added: dict[str, frozenset[int]]) -> list[Finding]:
    """Per patch, the added statements no set test ran and no declaration covers."""
    if outcome.get("returncode") not in (0, 1) or "lines" not in outcome:
        return []
    broken = uncompiled(ctx)
    if broken:  # the tests could not run what imports it: what they did not run says nothing
        return [skipped(NAME, problem, "the added-line coverage") for problem in broken.values()]
    tables = statement_tables(ctx, added)
    declared, _ = declarations(ctx.manifest.path, ctx.gate_config(NAME), added, tables)
    if outcome.get("reused"):
        return [Finding(gate=NAME, severity=Severity.INFO, file="", line=None,
                        message=f"added-line coverage not measured: {outcome['reused']} test(s) were reused from an "
                        "earlier run (--strict-coverage runs every test)")]
    ran: dict[str, set[int]] = {}
    for files in relative_lines(outcome, ctx).values():
        for rel, lines in files.items():
            ran.setdefault(rel, set()).update(lines)
    groups, counts = uncovered(added, ran, tables, declared)
    total, done = counts.total, counts.done
    severity = Severity.ERROR if strict_coverage(ctx) else Severity.WARNING
    findings = stale_declarations(ctx, declared, ran, tables)
    patches = patch_names(ctx, [(g.file, g.lines[0]) for g in groups])
    for group, patch in zip(groups, patches, strict=True):
        shown = ", ".join(map(str, group.lines[:12])) + (" ..." if len(group.lines) > 12 else "")
        where = group.scope or "module level"
        named = suggestions(group.file, tables[group.file], added[group.file], group.lines)
        findings.append(Finding(
            gate=NAME, severity=severity, file=group.file, line=group.lines[0],
            message=f"{len(group.lines)} added statement(s) in {where} run in no set test ({patch}): line(s) {shown}",
            hint="test it on CPU, or, if no CPU can run it, declare it in the manifest's [verify.tests.unreachable]: "
            + "; ".join(f'{key} = "<why no CPU can run it>"' for key in named)))
    percent = 100.0 * done / total if total else 100.0
    unreachable = sum(1 for d in declared if d.table == "unreachable")
    findings.append(Finding(gate=NAME, severity=Severity.INFO, file="", line=None,
                            message=f"added-line coverage: {done} of {total} added statements executed or declared "
                            f"({percent:.1f}%; {unreachable} unreachable declaration(s), "
                            f"{len(declared) - unreachable} known gap(s) over {counts.gaps} statement(s); "
                            f"{100.0 * (done - counts.gaps) / total if total else 100.0:.1f}% without the known gaps)"))
    return findings


def stale_declarations(ctx: VerifyContext, declared: list[Declaration], ran: dict[str, set[int]],
                       tables: dict[str, Statements]) -> list[Finding]:
    """A declaration whose every statement a set test ran says something false (no CPU runs it, or no
    test does): a warning at its manifest line, so that a new test retires it."""
    out = []
    for declaration in declared:
        table = tables[declaration.file]
        covered = {table.owner[n] for n in declaration.lines if n in table.owner}
        if covered and covered <= executed_statements(ran.get(declaration.file, set()), table):
            out.append(Finding(gate=NAME, severity=Severity.WARNING, file=display_path(ctx.manifest.path),
                               line=declaration.manifest_line,
                               message=f"coverage declaration {declaration.spec!r} ([verify.tests."
                               f"{declaration.table}]) covers only code the set tests ran",
                               hint="remove the declaration: a test runs what it names"))
    return out


def patch_names(ctx: VerifyContext, places: list[tuple[str, int]]) -> list[str]:
    """The patch of the series that added each line (by the tree's commit per patch), else "uncommitted"."""
    from patchkit.git import Repo  # lazy: only a coverage report needs blame

    if not places:
        return []
    repo = Repo(ctx.root)
    commits = repo.run("rev-list", "--reverse", f"{ctx.base_commit}..HEAD").split()
    series_file = ctx.set_dir / "series"
    series = [ln.strip() for ln in series_file.read_text().splitlines()
              if ln.strip() and not ln.startswith("#")] if series_file.is_file() else []
    by_commit = dict(zip(commits, series, strict=False)) if len(commits) == len(series) else {}
    out = []
    for file, line in places:
        blame = repo.run("blame", "--porcelain", "-L", f"{line},{line}", "--", file)
        commit = blame.split()[0] if blame else ""
        out.append(by_commit.get(commit) or ("uncommitted" if set(commit) <= {"0"} else f"commit {commit[:12]}"))
    return out


def run(ctx: VerifyContext) -> list[Finding]:
    config = ctx.gate_config(NAME)
    shared = config.get("shared", [])
    missing = sorted(set(shared if isinstance(shared, list) else []) & ctx.missing_references)
    if missing:  # the set's own tests need the shared ones' fixtures too: a run would report the same cause
        return [Finding(gate=NAME, severity=Severity.INFO, file=display_path(ctx.manifest.path), line=None,
                        message=f"set tests not run: the shared tests {missing} are missing (reported when the set "
                        "was loaded)")]
    # `path` is the tests folder, or one test file of it (a narrowed run, as the seeded-defect rows use)
    tests_dir = ctx.set_dir / str(config.get("path", "tests"))
    tests = paths_to_run(ctx.set_dir, config)
    if not tests:
        return [Finding(gate=NAME, severity=Severity.WARNING, file=display_path(tests_dir), line=None,
                        message="the patch set has no tests folder: nothing was run",
                        hint="add the set's tests under tests/")]
    if strict_coverage(ctx):
        config = {**config, "impact": False}  # every test runs, so every line it runs is seen
    interpreter = choose_interpreter(ctx, config)
    stub_dir, stub_rows = stubs(ctx, NAME)
    # the coverage declarations change what is reported, not what runs: not part of the run's key
    run_config = {k: v for k, v in config.items() if k not in ("unreachable", "untested")}
    suite = key_of(NAME, interpreter.spec_key, run_config, probe_code(RUNNER),
                   [hash_files((p for p in scope.rglob("*") if p.is_file() and "__pycache__" not in p.parts), scope)
                    for scope in scopes(tests)],
                   hash_files(stub_dir.rglob("*.py")) if stub_dir else None,
                   python_names(ctx.root, str(ctx.manifest.verify.get("source_root", "python"))))
    key = key_of(suite, ctx.base_commit, {rel: sha256_file(ctx.root / rel) for rel in ctx.touched})
    cache = ResultCache(ctx.cache_dir, NAME)
    outcome = cache.get(key, tree=ctx.root)  # the key names no path: kept tree-relative
    if outcome is None:
        store = SnapshotStore(ctx.cache_dir, suite)
        outcome = _run_with_impact(interpreter.python, tests, ctx, stub_dir, config, store)
        if outcome["returncode"] in (0, 1, 5):
            slim = {n: {"outcome": t.get("outcome")} for n, t in (outcome.get("tests") or {}).items()}
            cache.put(key, {**{k: v for k, v in outcome.items() if k not in ("deps", "tests")}, "tests": slim},
                      tree=ctx.root)
    note = Finding(gate=NAME, severity=Severity.INFO, file=display_path(tests[0]), line=None,
                   message=f"set tests {interpreter.note}" + _shared_note([p for p in tests if p != tests_dir]))
    added = added_lines(ctx.root, [t for t in ctx.touched if t.endswith(".py")], ctx.base_commit)
    stale = declaration_findings(ctx, added, statement_tables(ctx, added))
    return [note, *stub_rows, *findings_from(outcome, tests, ctx, added), *stale,
            *coverage_findings(outcome, ctx, added)]


def _shared_note(shared: list[Path]) -> str:
    return f", with the shared tests in {', '.join(display_path(p) for p in shared)}" if shared else ""


def _run_with_impact(python: str, tests: list[Path], ctx: VerifyContext, stub_dir: Path | None,
                     config: dict[str, Any], store: SnapshotStore) -> dict[str, Any]:
    """Rerun only the tests that ran changed code since a recorded run of the same suite (all of them
    when nothing is recorded, or module-level code changed), and merge the rest from the record.

    A run with a failing test is never partly reused: every test runs again, so what the gate reports
    (the failures, the lines the locator ranks from every test's spectrum) is what a run without the
    cache reports. Only passing runs are assembled from a record."""

    def everything() -> dict[str, Any]:
        outcome = run_pytest(python, tests, ctx, stub_dir, config)
        snapshot = Snapshot.record(ctx.root, outcome) if outcome.get("returncode") in (0, 1) else None
        if snapshot is not None:
            store.add(snapshot)
        return outcome

    found = store.best(ctx.root) if config.get("impact", True) else None
    if found is None:
        return everything()
    previous, affected = found
    if not affected:
        merged = previous.merged({"tests": {}}, ctx.root)
        return everything() if merged["counts"]["failed"] else merged
    fresh = run_pytest(python, tests, ctx, stub_dir, config, affected)
    if fresh.get("returncode") not in (0, 1) or not fresh.get("tests"):
        return everything()  # something odd: run everything
    merged = previous.merged(fresh, ctx.root)
    if merged["counts"]["failed"]:
        return everything()
    recorded = Snapshot.record(ctx.root, fresh)
    if recorded is not None:
        store.add(rebased(ctx.root, previous, recorded))
    return merged


_FIND_TREE = "import os, sys\nsys.path.insert(0, os.path.join(os.environ['PATCHKIT_TARGET'], 'python'))\n"
_TEST_ADD = _FIND_TREE + "from pkg.algo import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
_TEST_FIRST = _FIND_TREE + "from pkg.algo import first\n\n\ndef test_first():\n    assert first([7]) == 7\n"

EXAMPLES = (
    Example(name="set tests pass",
            files={"python/pkg/__init__.py": "", "python/pkg/algo.py": "def add(a, b):\n    return a + b\n",
                               "@set/tests/test_algo.py": _TEST_ADD},
            passes=True, expect="1 passed, 0 failed"),
    Example(name="an algorithm bug only the tests see",
            files={"python/pkg/__init__.py": "", "python/pkg/algo.py": "def add(a, b):\n    return a - b\n",
             "@set/tests/test_algo.py": _TEST_ADD},
            passes=False, expect="test_algo.py::test_add failed (call)"),
    Example(name="an error raised in the tree is located",
            files={"python/pkg/__init__.py": "", "python/pkg/algo.py": "def first(xs):\n    return xs[1]\n",
             "@set/tests/test_algo.py": _TEST_FIRST},
            passes=False, expect="raised at python/pkg/algo.py:2"),
    Example(name="a test module that cannot be collected",
            files={"python/pkg/__init__.py": "", "@set/tests/test_algo.py": _FIND_TREE + "from pkg.nothing import x\n"},
            passes=False, expect="could not be collected"),
    Example(name="an added function no set test runs",
            files={"python/pkg/__init__.py": "",
                   "python/pkg/algo.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
                   "@set/tests/test_algo.py": _TEST_ADD},
            passes=False, expect="1 added statement(s) in sub run in no set test"),
    Example(name="a declared CPU-unreachable function is covered",
            files={"python/pkg/__init__.py": "",
                   "python/pkg/algo.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
                   "@set/tests/test_algo.py": _TEST_ADD},
            config={"unreachable": {"python/pkg/algo.py:sub": "only a GPU runs it"}}, passes=True,
            expect="4 of 4 added statements executed or declared"),
    Example(name="the locator names the added line the failing test runs",
            files={"python/pkg/__init__.py": "",
                   "python/pkg/algo.py": "def add(a, b):\n    return a + b\n\n\ndef first(xs):\n"
                                         "    ys = list(xs)\n    return ys[-1]\n",
                   "@set/tests/test_algo.py": _TEST_ADD + "\n\ndef test_first():\n    from pkg.algo import first\n"
                                              "    assert first([7, 8]) == 7\n"},
            passes=False,
            expect="likely cause of the failing set tests: every failing test runs this added line and no passing"),
    Example(name="a set without tests is reported", files={"python/pkg/__init__.py": ""}, passes=False,
            expect="no tests folder"),
    Example(name="the shared tests run with the set's own, against its tree",
            files={"python/pkg/__init__.py": "",
                   "python/pkg/algo.py": "def add(a, b):\n    return a + b\n\n\ndef first(xs):\n    return xs[0]\n",
                   "@set/tests/test_algo.py": _TEST_ADD, "@set/../shared/test_core.py": _TEST_FIRST},
            config={"shared": ["../shared"]}, passes=True, expect="2 passed, 0 failed"),
    Example(name="a bug only the shared tests see",
            files={"python/pkg/__init__.py": "",
                   "python/pkg/algo.py": "def add(a, b):\n    return a + b\n\n\ndef first(xs):\n    return xs[-1]\n",
                   "@set/tests/test_algo.py": _TEST_ADD,
                   "@set/../shared/test_core.py": _TEST_FIRST.replace("[7]", "[7, 8]")},
            config={"shared": ["../shared"]}, passes=False, expect="test_core.py::test_first failed (call)"),
    Example(name="a shared package that is not there",
            files={"python/pkg/__init__.py": "", "@set/tests/test_algo.py": _TEST_ADD},
            config={"shared": ["../nowhere"]}, passes=False, expect="names '../nowhere', which is not a folder"),
)
