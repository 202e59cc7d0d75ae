"""Benchmark ``patchkit verify``: each gate cold and warm, the whole command warm, and pyright and
mypy on the same touched files; with ``--seeded`` / ``--corpus``, which defects each tool catches.

    python benchmarks/verify.py --set ddtree_patches/v1 --target <patched tree> [--runs 3] [--seeded] [--corpus]

Cold = an empty result cache and fresh in-process memos; warm = the same inputs again. Creating the
isolated environment is timed on its own and excluded from both (it is built once per manifest pin
set). ``--seeded`` uses the DEFECTS table of tests/verify/test_seeded_defects.py, ``--corpus`` the
independent corpus of tests/verify/corpus/ (defects.toml and benign.toml; ``--corpus-file
tests/verify/corpus/sets_corpus.toml`` for the v2/v3 corpus's entries of ``--set``): each entry is
realised in a copy of the target and checked by every gate (tests/verify/corpus/evaluate.py, the
corpus tests' own evaluation), pyright and mypy;
a tool catches an entry when it reports an error the clean tree does not have. Prints markdown
tables; ``--json FILE`` keeps the raw numbers. Goals: warm command <= 2 s, cold static
gates (compile, xref, dispatch) < 5 s on 2 cores, every corpus defect caught, >= 90 % at its own
file, no finding on the benign edits.
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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "verify"))

from patchkit.checks.registry import GATES  # noqa: E402
from patchkit.index import files, pyindex  # noqa: E402
from patchkit.verify.api import Severity, VerifyContext  # noqa: E402
from patchkit.verify.envs import verify_interpreter  # noqa: E402
from patchkit.verify.run import build_context, run_gate  # noqa: E402

STATIC = ("compile", "xref", "dispatch")


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = call()
    return time.perf_counter() - start, value


def cpu_timed(call: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    value = call()
    return time.perf_counter() - wall, time.process_time() - cpu, value


def errors_of(findings: Iterable[Any]) -> int:
    return sum(1 for f in findings if f.severity == Severity.ERROR)


def forget_memos() -> None:
    """A cold run in a fresh process would have no parsed facts and no tree scan in memory."""
    pyindex._MEMORY.clear()
    files._SCANS.clear()


# ---------------------------------------------------------------- gates


def time_gates(ctx: VerifyContext, runs: int, gates: list[str]) -> list[dict[str, Any]]:
    """Per gate: one cold run (fresh cache and memos), then ``runs`` warm runs (median)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-verify-cache-") as tmp:
        cold_ctx = dataclasses.replace(ctx, cache_dir=Path(tmp))
        forget_memos()
        for name in gates:
            cold, cpu, findings = cpu_timed(lambda: GATES[name].run(cold_ctx))
            warm = statistics.median(timed(lambda: GATES[name].run(cold_ctx))[0] for _ in range(runs))
            rows.append({"gate": name, "cold_s": cold, "cold_cpu_s": cpu, "warm_s": warm, "errors": errors_of(findings)})
    return rows


def time_cli(set_dir: Path, target: Path, runs: int) -> dict[str, Any]:
    """Wall time of the whole ``python -m patchkit verify`` (interpreter start included), cold then warm."""
    with tempfile.TemporaryDirectory(prefix="bench-verify-home-") as home:
        pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PATCHKIT_HOME": home, "PYTHONPATH": pythonpath}
        real_envs = Path(os.environ.get("PATCHKIT_HOME", ".patchkit")).resolve() / "envs"
        if real_envs.is_dir():  # reuse the built environment: its creation is excluded
            os.symlink(real_envs, Path(home) / "envs")
        command = [sys.executable, "-m", "patchkit", "verify", "--set", str(set_dir), "--target", str(target), "--json"]
        walls, cpus, code = [], [], None
        for _ in range(runs + 1):
            before = os.times()
            wall, done = timed(lambda: subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env))
            after = os.times()
            walls.append(wall)
            cpus.append((after.children_user - before.children_user) + (after.children_system - before.children_system))
            code = done.returncode
        return {"cold_s": walls[0], "warm_s": statistics.median(walls[1:]), "warm_cpu_s": statistics.median(cpus[1:]),
                "exit_code": code}


# ---------------------------------------------------------------- pyright and mypy


def py_files(ctx: VerifyContext) -> list[str]:
    return [rel for rel in ctx.touched if rel.endswith(".py") and (ctx.root / rel).is_file()]


def run_pyright(ctx: VerifyContext, python: str) -> tuple[float, set[tuple[str, int, str]]] | None:
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


def run_mypy(ctx: VerifyContext, cache_dir: Path) -> tuple[float, set[tuple[str, int, str]]] | None:
    try:
        import mypy  # noqa: F401
    except ImportError:
        return None
    files = [str(Path("python") / Path(f).relative_to("python")) for f in py_files(ctx) if f.startswith("python/")]
    command = [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent", "--check-untyped-defs",
               "--explicit-package-bases", "--no-error-summary", "--show-error-codes", "--cache-dir", str(cache_dir),
               "--config-file", os.devnull, *files]
    env = {**os.environ, "MYPYPATH": str(ctx.root / "python")}
    wall, done = timed(lambda: subprocess.run(command, capture_output=True, text=True, cwd=ctx.root, env=env))
    found = set()
    for line in done.stdout.splitlines():
        parts = line.split(":", 3)
        if len(parts) == 4 and parts[2].strip() == "error":
            found.add((parts[0], int(parts[1]), parts[3].strip()))
    return wall, found


def time_type_checkers(ctx: VerifyContext, python: str) -> list[dict[str, Any]]:
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


# ---------------------------------------------------------------- seeded defects and the corpus


def catch_table(set_dir: Path, target: Path, python: str, edits: list[Any], gates: list[str], tools: list[str],
                benign: bool = False) -> list[dict[str, Any]]:
    """For each edit: which gates, pyright and mypy report an error (with ``benign``, a gate's warning
    too) the clean tree does not have, and whether a gate names the edited file (and line). The edit is
    realised in a scratch clone and the gates run by the corpus tests' helper (tests/verify/corpus/evaluate.py)."""
    from tests.verify.corpus.evaluate import Entry, realised, run_gates

    severities = ("error", "warning") if benign else ("error",)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-catch-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "clone", "-q", str(target), str(tree)], check=True)
        clean = build_context(set_dir, tree)
        # mypy's cache is keyed by file contents: one cache for every entry is correct and much faster
        baseline = {"pyright": (run_pyright(clean, python) or (0, set()))[1] if "pyright" in tools else set(),
                    "mypy": (run_mypy(clean, Path(tmp) / "mypy") or (0, set()))[1] if "mypy" in tools else set()}
        for edit in edits:
            entry = Entry(set_dir, edit)
            with realised(entry, tree) as (seed, ctx):
                outcome = run_gates(seed, ctx, entry, gates)
                caught = {gate: outcome.flagged(gate, severities) for gate in gates}
                if "pyright" in tools:
                    caught["pyright"] = bool((run_pyright(ctx, python) or (0, set()))[1] - baseline["pyright"])
                if "mypy" in tools:
                    caught["mypy"] = bool((run_mypy(ctx, Path(tmp) / "mypy") or (0, set()))[1] - baseline["mypy"])
            rows.append({"entry": edit.name, "kind": edit.kind, "file": outcome.file, "line": outcome.line,
                         "caught": caught, "own_file": bool(outcome.at_file), "own_line": bool(outcome.at_line),
                         "where": outcome.where})
            print(f"  {edit.name}: {outcome.where:7} {[g for g, c in caught.items() if c]}", file=sys.stderr, flush=True)
    return rows


def seeded_edits() -> list[Any]:
    from tests.verify import test_seeded_defects as seeded

    return [d.edit for d in seeded.DEFECTS]


def corpus_edits(table: str, set_dir: Path, corpus: Path | None = None) -> list[Any]:
    """The corpus entries that edit ``set_dir``: the v1 corpus (defects.toml, benign.toml) by default, or
    a corpus file naming each entry's set (``--corpus-file tests/verify/corpus/sets_corpus.toml``)."""
    from tests.verify.corpus.evaluate import load_entries

    here = REPO / "tests" / "verify" / "corpus"
    path = corpus or here / ("defects.toml" if table == "defect" else "benign.toml")
    return [e.edit for e in load_entries(path, table, set_dir) if e.set_dir.resolve() == set_dir.resolve()]


# ---------------------------------------------------------------- report


def fmt(value: Any) -> str:
    return "–" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def markdown(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows])


def print_catches(title: str, rows: list[dict[str, Any]], gates: list[str], checkers: list[str],
                  benign: bool = False) -> None:
    tools = [*gates, *checkers]
    body = [[r["entry"], r["kind"], *("✔" if r["caught"].get(t) else "✗" for t in tools)]
            + ([] if benign else ["✔" if r["own_file"] else "✗", "✔" if r["own_line"] else "✗"]) for r in rows]
    headers = ["entry", "class", *tools] + ([] if benign else ["own file", "own line"])
    print(f"\n{title}\n\n" + markdown(headers, body))
    if not benign:
        caught = sum(any(r["caught"].get(g) for g in gates) for r in rows)
        own = sum(r["own_file"] for r in rows)
        line = sum(r["own_line"] for r in rows)
        for tool in checkers:
            print(f"{tool}: {sum(r['caught'].get(tool, False) for r in rows)}/{len(rows)} caught")
        print(f"gates: {caught}/{len(rows)} caught, {own}/{len(rows)} with an error at the edited file, "
              f"{line}/{len(rows)} at the edited line")
    else:
        noisy = [r["entry"] for r in rows if any(r["caught"].get(g) for g in gates)]
        print(f"gates: findings on {len(noisy)} of {len(rows)} benign edits {noisy}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=Path, required=True, dest="set_dir")
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seeded", action="store_true", help="also build the seeded-defect catch table")
    parser.add_argument("--corpus", action="store_true", help="also build the corpus catch tables")
    parser.add_argument("--corpus-file", type=Path, help="a corpus naming each entry's set (sets_corpus.toml); "
                        "its entries for --set are evaluated (default: the v1 corpus, defects.toml and benign.toml)")
    parser.add_argument("--no-timing", action="store_true", help="skip the timing tables")
    parser.add_argument("--json", type=Path, help="write the raw numbers here")
    parser.add_argument("--gates", default=",".join(GATES), help="comma-separated gates to time and to catch with")
    parser.add_argument("--tools", default="pyright,mypy", help="comma-separated type checkers to compare ('' for none)")
    parser.add_argument("--no-cli", action="store_true", help="skip timing the whole command")
    args = parser.parse_args()
    gates = [g for g in args.gates.split(",") if g]
    tools = [t for t in args.tools.split(",") if t]

    ctx = build_context(args.set_dir, args.target)
    env_s, interpreter = timed(lambda: verify_interpreter(ctx))
    report: dict[str, Any] = {"touched_py": len(py_files(ctx)), "env_s": env_s, "cpus": os.cpu_count(),
                              "load": os.getloadavg()}
    if not args.no_timing:
        report |= {"gates": time_gates(ctx, args.runs, gates),
                   "cli": None if args.no_cli else time_cli(ctx.set_dir, ctx.root, args.runs),
                   "type_checkers": time_type_checkers(ctx, interpreter.python) if tools else []}
        print(f"touched .py files: {report['touched_py']}; environment ready in {env_s:.1f} s (excluded); "
              f"{os.cpu_count()} CPUs; load average {report['load'][0]:.1f}\n")
        rows = [[r["gate"], r["cold_s"], r["cold_cpu_s"], r["warm_s"], r["errors"]] for r in report["gates"]]
        static = [r for r in report["gates"] if r["gate"] in STATIC]
        rows.append(["**static gates (compile, xref, dispatch)**", sum(r["cold_s"] for r in static),
                     sum(r["cold_cpu_s"] for r in static), sum(r["warm_s"] for r in static), ""])
        rows.append(["**sum of gates (in process)**", sum(r["cold_s"] for r in report["gates"]),
                     sum(r["cold_cpu_s"] for r in report["gates"]), sum(r["warm_s"] for r in report["gates"]), ""])
        cli = report["cli"]
        if cli:
            rows.append(["**`patchkit verify` wall**", cli["cold_s"], None, cli["warm_s"],
                         f"exit {cli['exit_code']}; warm CPU {cli['warm_cpu_s']:.2f} s"])
        rows += [[r["tool"], r["cold_s"], None, r["warm_s"], r["errors"]] for r in report["type_checkers"]]
        print(markdown(["gate / tool", "cold s", "cold CPU s", "warm s", "errors"], rows))
    if args.seeded:
        report["seeded"] = catch_table(ctx.set_dir, ctx.root, interpreter.python, seeded_edits(), gates, tools)
        print_catches("Seeded defects", report["seeded"], gates, tools)
    if args.corpus:
        defects = corpus_edits("defect", ctx.set_dir, args.corpus_file)
        report["corpus"] = catch_table(ctx.set_dir, ctx.root, interpreter.python, defects, gates, tools)
        print_catches("Corpus defects", report["corpus"], gates, tools)
        benign = corpus_edits("benign", ctx.set_dir, args.corpus_file)
        report["benign"] = catch_table(ctx.set_dir, ctx.root, interpreter.python, benign, gates, tools, benign=True)
        print_catches("Corpus benign edits", report["benign"], gates, tools, benign=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
