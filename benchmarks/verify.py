"""Benchmark ``patchkit verify``: each gate cold and warm, the whole command warm, and pyright and
mypy on the same touched files; with ``--seeded``, which seeded defect classes each tool catches.

    python benchmarks/verify.py --set ddtree_patches/v1 --target <patched tree> [--runs 3] [--seeded]

Cold = an empty result cache; warm = the same inputs again. Creating the isolated environment is
timed on its own and excluded from both (it is built once per manifest pin set). The seeded table
needs the base fetched by ``patchkit base fetch`` (``--base``) and uses the DEFECTS table of
tests/verify/test_seeded_defects.py. Prints markdown tables; ``--json FILE`` keeps the raw numbers.
Goal (issue 4): warm verify within 10 s on 2 cores, faster than pyright, catching every seeded class.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "verify"))

from patchkit.checks.registry import GATES  # noqa: E402
from patchkit.verify.envs import verify_interpreter  # noqa: E402
from patchkit.verify.api import Severity, VerifyContext  # noqa: E402
from patchkit.verify.run import build_context  # noqa: E402


def timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    value = call()
    return time.perf_counter() - start, value


def errors_of(findings) -> int:
    return sum(1 for f in findings if f.severity == Severity.ERROR)


# ---------------------------------------------------------------- gates


def time_gates(ctx: VerifyContext, runs: int) -> list[dict]:
    """Per gate: one cold run (fresh cache), then ``runs`` warm runs (median)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-verify-cache-") as tmp:
        cold_ctx = dataclasses.replace(ctx, cache_dir=Path(tmp))
        for name in GATES:
            cold, findings = timed(lambda: GATES[name].run(cold_ctx))
            warm = statistics.median(timed(lambda: GATES[name].run(cold_ctx))[0] for _ in range(runs))
            rows.append({"gate": name, "cold_s": cold, "warm_s": warm, "errors": errors_of(findings)})
    return rows


def time_cli(set_dir: Path, target: Path, runs: int) -> dict:
    """Wall time of the whole ``python -m patchkit verify`` (interpreter start included), cold then warm."""
    with tempfile.TemporaryDirectory(prefix="bench-verify-home-") as home:
        pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PATCHKIT_HOME": home, "PYTHONPATH": pythonpath}
        real_envs = Path(os.environ.get("PATCHKIT_HOME", ".patchkit")).resolve() / "envs"
        if real_envs.is_dir():  # reuse the built environment: its creation is excluded
            os.symlink(real_envs, Path(home) / "envs")
        command = [sys.executable, "-m", "patchkit", "verify", "--set", str(set_dir), "--target", str(target), "--json"]
        walls = []
        for _ in range(runs + 1):
            wall, done = timed(lambda: subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env))
            walls.append(wall)
        return {"cold_s": walls[0], "warm_s": statistics.median(walls[1:]), "exit_code": done.returncode}


# ---------------------------------------------------------------- pyright and mypy


def py_files(ctx: VerifyContext) -> list[str]:
    return [rel for rel in ctx.touched if rel.endswith(".py") and (ctx.root / rel).is_file()]


def run_pyright(ctx: VerifyContext, python: str) -> tuple[float, set] | None:
    """pyright basic on the touched files (its config wants relative includes: a linked project dir)."""
    exe = shutil.which("pyright") or str(Path(sys.executable).parent / "pyright")
    if not Path(exe).exists():
        return None
    with tempfile.TemporaryDirectory(prefix="bench-pyright-") as tmp:
        (Path(tmp) / "python").symlink_to(ctx.root / "python")
        config = Path(tmp) / "pyrightconfig.json"
        config.write_text(json.dumps({"typeCheckingMode": "basic", "pythonVersion": "3.11", "extraPaths": ["python"],
                                      "include": [f for f in py_files(ctx) if f.startswith("python/")]}))
        env = {**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"}
        wall, done = timed(lambda: subprocess.run([exe, "--outputjson", "--pythonpath", python, "-p", str(config)],
                                                  capture_output=True, text=True, env=env, cwd=tmp))
        prefixes = (str(ctx.root.resolve()) + "/", tmp + "/")
    try:
        diagnostics = json.loads(done.stdout)["generalDiagnostics"]
    except (ValueError, KeyError):
        return wall, {("pyright-failed", 0, done.stderr[-200:])}

    def rel(path: str) -> str:
        return next((path[len(p):] for p in prefixes if path.startswith(p)), path)

    return wall, {(rel(d["file"]), d["range"]["start"]["line"] + 1, d.get("rule", "") + " " + d["message"])
                  for d in diagnostics if d["severity"] == "error"}


def run_mypy(ctx: VerifyContext, cache_dir: Path) -> tuple[float, set] | None:
    try:
        import mypy  # noqa: F401
    except ImportError:
        return None
    files = [str(Path("python") / Path(f).relative_to("python")) for f in py_files(ctx) if f.startswith("python/")]
    command = [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent", "--check-untyped-defs",
               "--explicit-package-bases", "--no-error-summary", "--show-error-codes", "--cache-dir", str(cache_dir), *files]
    env = {**os.environ, "MYPYPATH": str(ctx.root / "python")}
    wall, done = timed(lambda: subprocess.run(command, capture_output=True, text=True, cwd=ctx.root, env=env))
    found = set()
    for line in done.stdout.splitlines():
        parts = line.split(":", 3)
        if len(parts) == 4 and parts[2].strip() == "error":
            found.add((parts[0], int(parts[1]), parts[3].strip()))
    return wall, found


def time_type_checkers(ctx: VerifyContext, python: str) -> list[dict]:
    rows = []
    pyright = run_pyright(ctx, python)
    rows.append({"tool": "pyright basic", "cold_s": pyright[0] if pyright else None, "warm_s": None,
                 "errors": len(pyright[1]) if pyright else None})
    with tempfile.TemporaryDirectory(prefix="bench-mypy-") as tmp:
        cold = run_mypy(ctx, Path(tmp))
        warm = run_mypy(ctx, Path(tmp)) if cold else None
    rows.append({"tool": "mypy --check-untyped-defs", "cold_s": cold[0] if cold else None,
                 "warm_s": warm[0] if warm else None, "errors": len(cold[1]) if cold else None})
    return rows


# ---------------------------------------------------------------- seeded defects


def seeded_catches(set_dir: Path, base: Path, python: str) -> list[dict]:
    """For each ready DEFECTS row: which gates, pyright and mypy report something new on the seeded tree."""
    import test_seeded_defects as seeded
    from test_seeded_defects import fresh_tree, seeded_set

    home = Path(os.environ.get("PATCHKIT_HOME", ".patchkit")).resolve()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-seeded-") as tmp:
        clean_tree = fresh_tree(base, Path(tmp) / "clean")
        seeded.apply(set_dir, clean_tree, home)
        clean_ctx = build_context(set_dir, clean_tree)
        baseline = {"pyright": (run_pyright(clean_ctx, python) or (0, set()))[1],
                    "mypy": (run_mypy(clean_ctx, Path(tmp) / "mypy-clean") or (0, set()))[1]}
        for n, defect in enumerate(d for d in seeded.DEFECTS if d.ready):
            copy, _, _ = seeded_set(defect, Path(tmp) / f"set{n}")
            seeded.lock(copy, home, base)
            tree = fresh_tree(base, Path(tmp) / f"tree{n}")
            seeded.apply(copy, tree, home)
            _, doc = seeded.verify(copy, tree, home)
            ctx = build_context(copy, tree)
            caught = {g["gate"]: any(f["severity"] == "error" for f in g["findings"]) for g in doc["result"]["gates"]}
            caught["pyright"] = bool((run_pyright(ctx, python) or (0, set()))[1] - baseline["pyright"])
            caught["mypy"] = bool((run_mypy(ctx, Path(tmp) / f"mypy{n}") or (0, set()))[1] - baseline["mypy"])
            rows.append({"defect": defect.name, "expected_gate": defect.gate, "caught": caught})
    return rows


# ---------------------------------------------------------------- report


def fmt(value) -> str:
    return "–" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def markdown(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=Path, required=True, dest="set_dir")
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seeded", action="store_true", help="also build the seeded-defect catch table")
    parser.add_argument("--base", type=Path, help="pristine base tree for --seeded (from patchkit base fetch)")
    parser.add_argument("--json", type=Path, help="write the raw numbers here")
    args = parser.parse_args()

    ctx = build_context(args.set_dir, args.target)
    env_s, interpreter = timed(lambda: verify_interpreter(ctx))
    report = {"touched_py": len(py_files(ctx)), "env_s": env_s, "cpus": os.cpu_count(),
              "gates": time_gates(ctx, args.runs), "cli": time_cli(ctx.set_dir, ctx.root, args.runs),
              "type_checkers": time_type_checkers(ctx, interpreter.python)}
    print(f"touched .py files: {report['touched_py']}; environment ready in {env_s:.1f} s (excluded); {os.cpu_count()} CPUs\n")
    gate_rows = [[r["gate"], r["cold_s"], r["warm_s"], r["errors"]] for r in report["gates"]]
    gate_rows.append(["**sum of gates**", sum(r["cold_s"] for r in report["gates"]), sum(r["warm_s"] for r in report["gates"]), ""])
    gate_rows.append(["**`patchkit verify` wall**", report["cli"]["cold_s"], report["cli"]["warm_s"], f"exit {report['cli']['exit_code']}"])
    gate_rows += [[r["tool"], r["cold_s"], r["warm_s"], r["errors"]] for r in report["type_checkers"]]
    print(markdown(["gate / tool", "cold s", "warm s", "errors"], gate_rows))
    if args.seeded:
        if not args.base:
            parser.error("--seeded needs --base")
        report["seeded"] = seeded_catches(ctx.set_dir, args.base, interpreter.python)
        tools = list(GATES) + ["pyright", "mypy"]
        rows = [[r["defect"], r["expected_gate"]] + ["✔" if r["caught"].get(t) else "✗" for t in tools] for r in report["seeded"]]
        print("\n" + markdown(["seeded defect", "expected gate", *tools], rows))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
