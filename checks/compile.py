"""Gate ``compile``: every Python file the series touches or creates compiles on each target Python.

Target versions come from ``[verify.compile] python`` or else the manifest's ``[set] python``
(default: the running interpreter's version). The running version compiles in memory; any other
version compiles in one subprocess of that interpreter (``python3.X`` on PATH, a pyenv install, or
``$PATCHKIT_PYTHON_3_X``). A version with no interpreter is a warning naming how to install it, never
a silent skip. Results are cached per (file content hash, version).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from patchkit import proc
from patchkit.errors import BadInput, location
from patchkit.verify.api import Example, Finding, Severity, VerifyContext
from patchkit.verify.cache import ResultCache, key_of, sha256_bytes
from patchkit.verify.envs import find_interpreter

NAME = "compile"
DESCRIPTION = "touched .py files compile on every target Python version"

RUNNING = f"{sys.version_info.major}.{sys.version_info.minor}"

# Runs inside the target interpreter: compile each file in memory and write {path: null | [line, msg]}.
_COMPILER = """
import json, sys, warnings
warnings.simplefilter("ignore")
out = {}
for path in sys.argv[2:]:
    try:
        with open(path, "rb") as handle:
            compile(handle.read(), path, "exec", dont_inherit=True)
        out[path] = None
    except SyntaxError as error:
        out[path] = [error.lineno, "%s: %s" % (type(error).__name__, error.msg)]
    except ValueError as error:
        out[path] = [None, "%s: %s" % (type(error).__name__, error)]
with open(sys.argv[1], "w") as handle:
    json.dump(out, handle)
"""


def target_versions(ctx: VerifyContext) -> list[str]:
    versions = ctx.gate_config(NAME).get("python") or list(ctx.manifest.set.python) or [RUNNING]
    if not isinstance(versions, list) or not all(re.fullmatch(r"3\.\d+", str(v)) for v in versions):
        raise BadInput(f"Python versions must be a list like [\"3.10\", \"3.11\"], not {versions!r}",
                       hint="fix [set] python (or [verify.compile] python)", location=location("manifest.toml"))
    return [str(v) for v in versions]


def compile_in_memory(path: Path) -> list[Any] | None:
    try:
        compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except SyntaxError as error:
        return [error.lineno, f"{type(error).__name__}: {error.msg}"]
    except ValueError as error:
        return [None, f"{type(error).__name__}: {error}"]
    return None


def compile_with(interpreter: str, paths: list[Path]) -> dict[str, list[Any] | None]:
    """Compile ``paths`` in one subprocess of ``interpreter``."""
    with tempfile.TemporaryDirectory(prefix="patchkit-compile-") as tmp:
        out = Path(tmp) / "out.json"
        proc.run([interpreter, "-c", _COMPILER, out, *paths], timeout=600)
        outcome: dict[str, list[Any] | None] = json.loads(out.read_text())
        return outcome


def missing_interpreter(version: str, count: int) -> Finding:
    return Finding(gate=NAME, severity=Severity.WARNING, file="manifest.toml", line=None,
                   message=f"Python {version} is not installed here: {count} touched file(s) were NOT compiled for it",
                   hint=f"install it (apt-get install python{version}, pyenv install {version}, or uv python install "
                   f"{version}) and put python{version} on PATH, or set PATCHKIT_PYTHON_{version.replace('.', '_')}")


def outcomes_for(version: str, files: dict[str, Path], cache: ResultCache) -> dict[str, list[Any] | None] | None:
    """Per tree-relative file: None when it compiles, [line, message] when it does not.

    Cached per (version, content hash); the interpreter is looked up only on a miss, so a warm run
    starts no process. Returns None when files need compiling and no interpreter is installed.
    """
    keys = {rel: key_of(NAME, version, sha256_bytes(path.read_bytes())) for rel, path in files.items()}
    outcomes = {rel: cache.get(key) for rel, key in keys.items()}
    todo = {rel: files[rel] for rel, value in outcomes.items() if value is None}
    if todo:
        interpreter = find_interpreter(version)
        if interpreter is None:
            return None
        if version == RUNNING:
            fresh = {rel: compile_in_memory(path) for rel, path in todo.items()}
        else:
            by_path = compile_with(interpreter, list(todo.values()))
            fresh = {rel: by_path[str(path)] for rel, path in todo.items()}
        for rel, value in fresh.items():
            cache.put(keys[rel], {"error": value})
            outcomes[rel] = {"error": value}
    return {rel: value["error"] if value is not None else None for rel, value in outcomes.items()}


def run(ctx: VerifyContext) -> list[Finding]:
    files = {rel: ctx.root / rel for rel in ctx.touched if rel.endswith(".py") and (ctx.root / rel).is_file()}
    cache = ResultCache(ctx.cache_dir, NAME)
    findings: list[Finding] = []
    # one finding per cause: the same error on several versions is one finding naming them all
    errors: dict[tuple[str, int | None, str], list[str]] = {}
    for version in target_versions(ctx):
        outcomes = outcomes_for(version, files, cache)
        if outcomes is None:
            findings.append(missing_interpreter(version, len(files)))
            continue
        for rel, error in sorted(outcomes.items()):
            if error is not None:
                errors.setdefault((rel, error[0], error[1]), []).append(version)
    for (rel, line, message), versions in sorted(errors.items(), key=lambda e: (e[0][0], e[0][1] or 0, e[0][2])):
        findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=rel, line=line,
                                message=f"does not compile on Python {', '.join(versions)}: {message}",
                                hint="the other gates skip what they cannot check because of it (their warnings "
                                "say what)"))
    return findings


EXAMPLES = (
    Example(name="valid module", files={"python/pkg/ok.py": "def f(x):\n    return x + 1\n"}, passes=True),
    Example(name="untouched files are not compiled", files={"@base/python/pkg/old.py": "def broken(:\n",
                                                 "python/pkg/new.py": "X = 1\n"}, passes=True),
    Example(name="syntax error", files={"python/pkg/bad.py": "def f(x):\n    if x\n        return 1\n"}, passes=False,
            expect="does not compile on Python"),
    Example(name="malformed version list is refused", files={"python/pkg/ok.py": "X = 1\n"}, passes=False,
            expect="Python versions must be a list", config={"python": "3.11"}),
    Example(name="missing interpreter is a warning, not a skip", files={"python/pkg/ok.py": "X = 1\n"}, passes=False,
            expect="Python 3.99 is not installed", config={"python": ["3.99"]}),
)
