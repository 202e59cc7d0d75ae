"""Gate ``imports``: every module the series touches or creates imports, on CPU, from the patched tree.

All modules are imported in ONE subprocess (``python -I``, the tree's ``python/`` first on sys.path,
no bytecode written into the tree) of the ``[verify.env]`` environment; each module's result is
recorded separately. A module that cannot import on CPU for a stated reason is declared::

    [verify.imports]
    static_only = { "sglang.srt.speculative.dflash_worker" = "needs sgl_kernel via managers.scheduler" }

and is reported as an info row "covered statically" (the xref gate reads it); nothing is skipped
silently. A failing import is reported at the deepest traceback frame inside the tree; one that fails
because a touched file does not compile is the compile gate's finding, and said once as skipped.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from patchkit import proc
from patchkit.checks._probe.runner import python_names
from patchkit.checks._uncompiled import Uncompiled, caused_by, skipped, uncompiled
from patchkit.errors import BadInput, location
from patchkit.verify.api import Example, Finding, Severity, VerifyContext
from patchkit.verify.cache import ResultCache, hash_files, key_of, sha256_file
from patchkit.verify.envs import stubs, verify_interpreter

NAME = "imports"
DESCRIPTION = "touched modules import on CPU from the patched tree, in the isolated environment"

SOURCE_ROOT = "python"
DEFAULT_TIMEOUT_S = 900

# Runs in the environment's interpreter. Results are rewritten after every module, so a hard crash
# (segfault, os._exit) still leaves the modules imported before it.
_HARNESS = r"""
import importlib, json, sys, traceback
sys.dont_write_bytecode = True  # a gate never writes into the tree
out_path, src_root, stub_dir = sys.argv[1:4]
sys.path.insert(0, src_root)
if stub_dir:
    sys.path.insert(1, stub_dir)
results = {}

def save():
    with open(out_path, "w") as handle:
        json.dump(results, handle)

for name in sys.argv[4:]:
    results[name] = {"ok": None}  # "started": survives a hard crash inside this import
    save()
    try:
        importlib.import_module(name)
        results[name] = {"ok": True}
    except BaseException as error:
        frames = [[f.filename, f.lineno] for f in traceback.extract_tb(error.__traceback__)]
        if isinstance(error, SyntaxError) and error.filename:
            frames.append([error.filename, error.lineno])
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        results[name] = {"ok": False, "error": "%s: %s" % (type(error).__name__, error),
                         "frames": frames, "traceback": text[-4000:]}
    save()
"""


def module_name(rel: str, source_root: str = SOURCE_ROOT) -> str | None:
    """``python/sglang/srt/x.py`` -> ``sglang.srt.x`` (a package's ``__init__.py`` -> the package)."""
    prefix = source_root.rstrip("/") + "/"
    if not (rel.startswith(prefix) and rel.endswith(".py")):
        return None
    parts = rel[len(prefix) : -3].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


def touched_modules(ctx: VerifyContext, source_root: str) -> dict[str, str]:
    """module -> tree-relative file, for every touched .py file that is a module of the source root."""
    modules = {}
    for rel in ctx.touched:
        name = module_name(rel, source_root)
        if name and (ctx.root / rel).is_file():
            modules[name] = rel
    return dict(sorted(modules.items()))


def static_only_rows(declared: dict[str, str], modules: dict[str, str]) -> list[Finding]:
    """Info rows for declared static-only modules, warnings for declarations that no longer apply."""
    rows = [Finding(gate=NAME, severity=Severity.INFO, file=modules[m], line=None,
                    message=f"{m}: covered statically, not imported: {reason}")
            for m, reason in sorted(declared.items()) if m in modules]
    rows += [Finding(gate=NAME, severity=Severity.WARNING, file="manifest.toml", line=None,
                     message=f"[verify.imports] static_only declares {m}, which the series does not touch",
                     hint="remove the stale declaration") for m in sorted(declared) if m not in modules]
    return rows


def run_harness(python: str, root: Path, source_root: str, stub_dir: Path | None, modules: list[str],
                timeout: float) -> dict[str, Any]:
    """Import ``modules`` in one subprocess; returns {module: result} plus the process's exit status."""
    with tempfile.TemporaryDirectory(prefix="patchkit-imports-") as tmp:
        out = Path(tmp) / "results.json"
        try:
            done = proc.run([python, "-I", "-c", _HARNESS, out, root / source_root, stub_dir or "", *modules],
                            check=False, timeout=timeout, cwd=Path(tmp))
            status = {"returncode": done.returncode, "tail": (done.stdout + done.stderr)[-2000:]}
        except subprocess.TimeoutExpired:
            status = {"returncode": None, "tail": f"timed out after {timeout:.0f} s"}
        results = json.loads(out.read_text()) if out.exists() else {}
    return {"modules": results, "process": status}


def location_of(frames: list[list[Any]], ctx: VerifyContext, fallback: str) -> tuple[str, int | None]:
    """The deepest frame in a touched file, else in the tree, else the module's own file."""
    root = str(ctx.root.resolve()) + "/"
    in_tree = [(f[len(root):], line) for f, line in frames if f and f.startswith(root)]
    touched = [(rel, line) for rel, line in in_tree if rel in ctx.touched]
    return (touched or in_tree or [(fallback, None)])[-1]


def failure(module: str, rel: str, outcome: dict[str, Any], ctx: VerifyContext) -> Finding:
    file, line = location_of(outcome.get("frames", []), ctx, rel)
    error = outcome.get("error", "")
    hint = ("if it cannot import on CPU, declare it under [verify.imports] static_only with the reason; "
            "if a package is missing, pin it in [verify.env] packages") if "No module named" in error else None
    return Finding(gate=NAME, severity=Severity.ERROR, file=file, line=line,
                   message=f"import {module} failed: {error}", hint=hint)


def findings_from(harness: dict[str, Any], modules: dict[str, str], ctx: VerifyContext) -> list[Finding]:
    results, process = harness["modules"], harness["process"]
    findings = []
    broken = uncompiled(ctx)
    not_imported: dict[Uncompiled, list[str]] = {}  # one cause, one finding: the compile gate's
    for module, rel in modules.items():
        outcome = results.get(module)
        if outcome and outcome["ok"]:
            continue
        if outcome and outcome["ok"] is False:
            text = "\n".join([outcome.get("error", ""), outcome.get("traceback", ""),
                              *(str(frame[0]) for frame in outcome.get("frames", []))])
            cause = caused_by(text, broken, ctx.root)
            if cause is not None:
                not_imported.setdefault(cause, []).append(f"import {module}")
            else:
                findings.append(failure(module, rel, outcome, ctx))
            continue
        died = "while importing it" if outcome else "before reaching it"
        findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=rel, line=None,
                                message=f"import {module}: the import process died {died} "
                                f"(exit {process['returncode']}): {process['tail'][-500:]}"))
    return findings + [skipped(NAME, cause, what) for cause, what in not_imported.items()]


def run(ctx: VerifyContext) -> list[Finding]:
    config = ctx.gate_config(NAME)
    source_root = str(config.get("source_root", SOURCE_ROOT))
    declared = config.get("static_only", {})
    if not isinstance(declared, dict) or not all(isinstance(r, str) and r.strip() for r in declared.values()):
        raise BadInput("[verify.imports] static_only must map module names to non-empty reasons",
                       hint='static_only = { "pkg.mod" = "needs sgl_kernel" }', location=location("manifest.toml"))
    modules = touched_modules(ctx, source_root)
    rows = static_only_rows(declared, modules)
    to_import = {m: rel for m, rel in modules.items() if m not in declared}
    if not to_import:
        return rows
    interpreter = verify_interpreter(ctx)
    stub_dir, stub_rows = stubs(ctx, NAME)
    rows.append(Finding(gate=NAME, severity=Severity.INFO, file="manifest.toml", line=None,
                        message=f"{len(to_import)} module(s) imported: {interpreter.note}"))
    # what an import can read: the base's files (by its commit) but for those the tree changed (by
    # content), and which modules exist at all (a deleted base file is no touched file)
    key = key_of(NAME, interpreter.spec_key, ctx.base_commit, sorted(to_import),
                 {rel: sha256_file(ctx.root / rel) for rel in ctx.touched},
                 hash_files(stub_dir.rglob("*.py")) if stub_dir else None,
                 python_names(ctx.root, source_root))
    cache = ResultCache(ctx.cache_dir, NAME)
    harness = cache.get(key, tree=ctx.root)  # the key names no path: kept tree-relative
    if harness is None:
        harness = run_harness(interpreter.python, ctx.root, source_root, stub_dir, list(to_import),
                              float(config.get("timeout", DEFAULT_TIMEOUT_S)))
        if harness["process"]["returncode"] == 0:  # only complete runs are worth keeping
            cache.put(key, harness, tree=ctx.root)
    return rows + stub_rows + findings_from(harness, to_import, ctx)


EXAMPLES = (
    Example(name="modules import", files={"python/pkg/__init__.py": "", "python/pkg/mod.py": "import os\nX = os.sep\n"},
            passes=True, expect="module(s) imported"),
    Example(name="a new module may import an untouched base module",
            files={"@base/python/pkg/__init__.py": "", "@base/python/pkg/base.py": "Y = 2\n",
             "python/pkg/new.py": "from pkg.base import Y\nZ = Y + 1\n"}, passes=True),
    Example(name="runtime error at import names file and line",
            files={"python/pkg/__init__.py": "", "python/pkg/mod.py": "import os\n\nX = os.no_such_attribute\n"},
            passes=False, expect="AttributeError"),
    Example(name="phantom module import",
            files={"python/pkg/__init__.py": "", "python/pkg/mod.py": "from pkg.ddtree_missing import thing\n"},
            passes=False, expect="No module named 'pkg.ddtree_missing'"),
    Example(name="a module that cannot import on CPU is declared and covered statically",
            files={"python/pkg/__init__.py": "", "python/pkg/gpu_only.py": "import sgl_kernel_not_here\n"},
            passes=True, expect="covered statically", config={"static_only": {"pkg.gpu_only": "needs sgl_kernel"}}),
    Example(name="an undeclared module that cannot import fails",
            files={"python/pkg/__init__.py": "", "python/pkg/gpu_only.py": "import sgl_kernel_not_here\n"},
            passes=False, expect="No module named 'sgl_kernel_not_here'"),
    Example(name="a module that kills the interpreter is reported, not lost",
            files={"python/pkg/__init__.py": "", "python/pkg/a_ok.py": "X = 1\n",
             "python/pkg/b_dies.py": "import os\nos._exit(3)\n"},
            passes=False, expect="the import process died while importing it"),
    Example(name="a static_only entry without a reason is refused", files={"python/pkg/__init__.py": ""}, passes=False,
            expect="non-empty reasons", config={"static_only": {"pkg": ""}}),
    Example(name="a stale static_only declaration is a warning",
            files={"python/pkg/__init__.py": ""}, passes=False, expect="does not touch",
            config={"static_only": {"pkg.gone": "was GPU only"}}),
)
