"""The DDTree round's fused kernels on a GPU host, in one command: preflight, the set's tests, timings.

    python3 ci/gpu/check_ddtree_kernels.py [--tree DIR] [--set ddtree_patches/v2] [--no-tests]
        [--no-bench] [--no-sweep] [--workers N] [--budget-s S]

Needs torch with CUDA, triton, numpy and pytest (pytest-xdist makes the tests parallel); no
SGLang, no network. The module under test, python/sglang/srt/speculative/ddtree_utils.py, is
read from ``--tree`` (default $PATCHKIT_TARGET), else rebuilt from the set's patches that add and
change it. Every step's log, the benchmark's markdown and JSON and a summary go under $OUT when
set (else a temporary directory, whose path is printed).

1. preflight: versions, the module's sha256, then every fused entry point once on small CUDA
   inputs against the torch path (the module imported again with SGLANG_DDTREE_TRITON=0); a
   kernel that fails to compile or differs is named here, before the tests' noise;
2. the set's tests on CUDA (the integration tests left out: tests/integration and the shared
   ddtree_worker_v2_tests, which import the tree's own sglang), in parallel with pytest-xdist, while
   ``benchmarks/ddtree_hot_path.py --warm-only`` compiles the benchmark's kernel variants;
3. the hot-path benchmark (bs 1/16/64 x B 16/64/128/512 by default; ``--sweep`` unless
   ``--no-sweep``), which prints the goal lines (round < 5% of the roofline verify per cell);
4. a summary; exit 1 if the preflight, a test or a correctness check of the benchmark failed.
   Missing the speed goal is reported, not an error.

Each step has a time limit inside ``--budget-s`` (default 450 s), so the whole run ends well
within 8 minutes; a step cut short says so and the later ones still run if time is left.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SET = REPO / "ddtree_patches" / "v2"
MODULE = "python/sglang/srt/speculative/ddtree_utils.py"
BENCH = REPO / "benchmarks" / "ddtree_hot_path.py"
HERE = Path(__file__).resolve().parent


class CheckError(Exception):
    """A problem with the inputs of the check (one line, shown as is)."""


# ------------------------------------------------------------------------------ the module


def extract_module(set_dir: Path, tree: Path) -> Path:
    """Write the module as the set's series leaves it: the patch that adds it, then every later patch
    that changes it, hunk by hunk at the lines their headers name (no fuzz: a mismatch is an error)."""
    series = set_dir / "series"
    if not series.is_file():
        raise CheckError(f"{series}: no series file; pass --tree DIR holding {MODULE}")
    text: list[str] | None = None
    for line in series.read_text().splitlines():
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        found = module_diff(set_dir / name)
        if found is None:
            continue
        adds, hunks = found
        if adds != (text is None):
            what = "adds it again" if adds else "changes it before any patch adds it"
            raise CheckError(f"{name}: {what} ({MODULE}); pass --tree DIR")
        text = apply_hunks(name, [] if text is None else text, hunks)
    if text is None:
        raise CheckError(f"{set_dir}: no patch of the series adds {MODULE}; pass --tree DIR")
    out = tree / MODULE
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(text))
    return out


_HUNK_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def module_diff(patch: Path) -> tuple[bool, list[tuple[int, int, list[str]]]] | None:
    """(whether the patch adds MODULE, its hunks as (line, header's line number, lines)), or None
    if the patch does not touch it. A patch that deletes or renames it is refused."""
    lines = patch.read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip("\n") == f"+++ b/{MODULE}"), None)
    if start is None:
        if any(line.rstrip("\n") == f"--- a/{MODULE}" for line in lines):
            raise CheckError(f"{patch.name}: deletes or renames {MODULE}; pass --tree DIR")
        return None
    adds = start > 0 and lines[start - 1].rstrip("\n") == "--- /dev/null"
    hunks, i = [], start + 1
    while i < len(lines) and (match := _HUNK_HEADER.match(lines[i])):
        old_count = 1 if match.group(2) is None else int(match.group(2))
        new_count = 1 if match.group(4) is None else int(match.group(4))
        body, header_line, i = [], i + 1, i + 1
        while (old_count or new_count) and i < len(lines):
            kind = lines[i][:1]
            if kind not in " +-\\":
                break
            old_count -= kind in " -"
            new_count -= kind in " +"
            body.append(lines[i])
            i += 1
        if i < len(lines) and lines[i].startswith("\\"):
            body.append(lines[i])
            i += 1
        if old_count or new_count:
            raise CheckError(f"{patch.name}:{header_line}: the hunk of {MODULE} is cut short")
        hunks.append((int(match.group(1)), header_line, body))
    return adds, hunks


def apply_hunks(name: str, old: list[str], hunks: list[tuple[int, int, list[str]]]) -> list[str]:
    """``old`` with the hunks applied exactly where their headers say (they come from git, in order)."""
    out: list[str] = []
    done = 0  # lines of ``old`` consumed
    for old_start, header_line, body in hunks:
        # A hunk that removes nothing names the line after which it inserts.
        at = old_start if not any(line[:1] in " -" for line in body) else old_start - 1
        if at < done or at > len(old):
            raise CheckError(f"{name}:{header_line}: hunk at line {old_start} of {MODULE} is out of order")
        out.extend(old[done:at])
        done = at
        for number, line in enumerate(body, header_line + 1):
            kind, content = line[:1], line[1:]
            if kind == "\\":  # "\ No newline at end of file": the previous line has none
                if out:
                    out[-1] = out[-1].rstrip("\n")
                continue
            if kind in " -":
                if done >= len(old) or old[done].rstrip("\n") != content.rstrip("\n"):
                    raise CheckError(f"{name}:{number}: does not match line {done + 1} of {MODULE} as the "
                                     "earlier patches leave it; pass --tree DIR")
                done += 1
            if kind in " +":
                out.append(content)
    return out + old[done:]


def resolve_module(args, scratch: Path) -> tuple[Path, Path]:
    """(tree, module file) to test."""
    if args.tree is not None:
        path = args.tree / MODULE
        if not path.is_file():
            raise CheckError(f"{path} does not exist: pass --tree DIR (or PATCHKIT_TARGET) holding {MODULE}")
        return args.tree, path
    return scratch, extract_module(args.set, scratch)


def load(path: Path, name: str, triton_on: bool):
    saved = os.environ.get("SGLANG_DDTREE_TRITON")
    os.environ["SGLANG_DDTREE_TRITON"] = "1" if triton_on else "0"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        if saved is None:
            os.environ.pop("SGLANG_DDTREE_TRITON", None)
        else:
            os.environ["SGLANG_DDTREE_TRITON"] = saved


# ------------------------------------------------------------------------------ steps


class Log:
    """Echo to stdout and to a file under the output directory."""

    def __init__(self, path: Path):
        self.path = path
        self.file = path.open("a")

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.file.write(text + "\n")
        self.file.flush()


def environment(log: Log, module_path: Path) -> dict:
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "module": str(module_path),
        "module_sha256": hashlib.sha256(module_path.read_bytes()).hexdigest(),
        "checkout": _git_head(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    for key, value in info.items():
        log(f"{key}: {value}")
    return info


def _git_head() -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True, timeout=10)
        return done.stdout.strip() + (" (with local changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def preflight(log: Log, module_path: Path) -> bool:
    """Each fused entry point once on small CUDA inputs, against the torch path; per-call verdicts."""
    import torch

    fused = load(module_path, "ddtree_utils_preflight_fused", True)
    oracle = load(module_path, "ddtree_utils_preflight_torch", False)
    log(f"triton in the module: {getattr(fused.triton, '__version__', None)}; fused paths enabled: {fused._DDTREE_TRITON_ENABLED}")
    if fused.triton is None or not fused._DDTREE_TRITON_ENABLED:
        log("PREFLIGHT FAILED: the module's Triton paths are off (triton missing or SGLANG_DDTREE_TRITON set)")
        return False
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 15, 151936, generator=gen) * 4).bfloat16().to(device)
    seq_lens = torch.tensor([5, 900, 33], device=device)
    target = torch.randn(3, 65, 5000, generator=gen).to(device)
    temps = torch.tensor([0.0, 0.8, 1.3], device=device)
    seed = torch.tensor([42], device=device)
    shards = [oracle.ddtree_local_topk(logits[..., s * 37984:(s + 1) * 37984], 64, vocab_start=s * 37984) for s in range(4)]
    stacked = [torch.stack(p) for p in zip(*shards, strict=True)]
    checks = {
        "ddtree_topk_from_logits (chunk + merge kernels)": lambda m: m.ddtree_topk_from_logits(logits, 64),
        "ddtree_local_topk (chunk + merge kernels)": lambda m: m.ddtree_local_topk(logits, 64, vocab_start=7, num_valid=150000)[:3],
        "ddtree_merge_topk (shard merge kernel)": lambda m: m.ddtree_merge_topk(*stacked, k=64),
        "build_ddtree_tree_from_topk (heap kernel)": lambda m: _fields(m.build_ddtree_tree_from_topk(*oracle.ddtree_topk_from_logits(logits, 64), 64)),
        "ddtree_verify_inputs (verify-inputs kernel)": lambda m: _fields(m.ddtree_verify_inputs(_tree(oracle, logits), seq_lens, seq_lens_sum=938)),
        "ddtree_follow_verified (walk kernel)": lambda m: m.ddtree_follow_verified(_tree(oracle, logits), target.argmax(-1)),
        "ddtree_sample_target_tokens (arg-max partial + finish)": lambda m: m.ddtree_sample_target_tokens(target, temps, seed=seed),
        "ddtree_verify_round (partials + walk)": lambda m: _fields(m.ddtree_verify_round(_tree(oracle, logits), target, temperatures=temps, seed=seed)),
        "ddtree_draft_round (4 launches)": lambda m: _fields(m.ddtree_draft_round(logits, 64, seq_lens, seq_lens_sum=938).tree),
    }
    ok = True
    for name, call in checks.items():
        t0 = time.perf_counter()
        try:
            got = call(fused)
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
            want = call(oracle)
            bad = _differ(got, want)
            verdict = "OK" if not bad else f"DIFFERS in {bad}"
        except Exception as exc:  # a compile or launch error is a verdict to report
            elapsed = time.perf_counter() - t0
            verdict = f"ERROR {type(exc).__name__}: " + " | ".join(str(exc).strip().splitlines()[-6:])[:1500]
            log(traceback.format_exc()[-3000:])
        ok &= verdict == "OK"
        log(f"  {verdict:8.8s} {name}  (first call incl. compile {elapsed:.1f}s){'' if verdict == 'OK' else ': ' + verdict}")
    return ok


def _tree(oracle, logits):
    return oracle.build_ddtree_tree_from_topk(*oracle.ddtree_topk_from_logits(logits, 64), 64)


def _fields(obj):
    import dataclasses

    return tuple(v for v in (getattr(obj, f.name) for f in dataclasses.fields(obj)) if hasattr(v, "dtype"))


def _differ(got, want) -> list[int]:
    import torch

    bad = []
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if a.dtype != b.dtype or a.shape != b.shape:
            bad.append(i)
        elif a.is_floating_point():
            if not (torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))):
                bad.append(i)
        elif not torch.equal(a, b):
            bad.append(i)
    return bad


def run_step(log: Log, name: str, command: list[str], env: dict, timeout: float, out_dir: Path) -> tuple[int | None, float]:
    """Run a command into OUT/<name>.log; (exit code, or None when cut short at ``timeout``; seconds)."""
    log(f"\n$ {' '.join(command)}   (limit {timeout:.0f}s, output: {name}.log)")
    t0 = time.perf_counter()
    with (out_dir / f"{name}.log").open("w") as step_log:
        proc = subprocess.Popen(command, env=env, cwd=REPO, stdout=step_log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            _kill(proc)
            log(f"STEP {name} CUT SHORT after {time.perf_counter() - t0:.0f}s (limit {timeout:.0f}s)")
            code = None
    return code, time.perf_counter() - t0


def tail(path: Path, lines: int, keep=lambda line: True) -> list[str]:
    if not path.is_file():
        return []
    text = [line.rstrip("\n") for line in path.read_text(errors="replace").splitlines() if keep(line)]
    return text[-lines:]


def _kill(proc: subprocess.Popen) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def shared_tests(set_dir: Path) -> list[Path]:
    """The shared test packages the set's manifest names (``[verify.tests] shared``: the DDTree core
    module's tests, kept once for every set), run with the set's own tests against its tree."""
    import tomllib  # Python 3.11+, as the GPU hosts run

    manifest = tomllib.loads((set_dir / "manifest.toml").read_text()) if (set_dir / "manifest.toml").is_file() else {}
    return [(set_dir / rel).resolve() for rel in manifest.get("verify", {}).get("tests", {}).get("shared", [])]


#: Shared test folders that import the tree's own sglang (integration tests, like a set's tests/integration).
INTEGRATION_SHARED = ("ddtree_worker_v2_tests",)


def test_command(set_dir: Path, workers: int, out_dir: Path) -> tuple[list[str], str]:
    tests = set_dir / "tests"
    shared = [folder for folder in shared_tests(set_dir) if folder.name not in INTEGRATION_SHARED]
    command = [sys.executable, "-m", "pytest", str(tests), *map(str, shared), "-q", "-rs",
               "-p", "no:cacheprovider",
               "--ignore", str(tests / "integration"), "--junitxml", str(out_dir / "tests.xml")]
    note = ""
    if workers > 1 and importlib.util.find_spec("xdist") is not None:
        command += ["-n", str(workers)]
    else:
        note = "pytest-xdist missing: tests run serially" if workers > 1 else ""
    if not (tests / "conftest.py").is_file():
        command += ["-p", "ddtree_fixtures"]
        note += ("; " if note else "") + f"{tests}/conftest.py missing: fixtures from ci/gpu/ddtree_fixtures.py"
    return command, note


def bench_summary(path: Path) -> tuple[bool, list[str]]:
    """(correctness all fine, problem lines) from the benchmark's JSON."""
    if not path.is_file():
        return False, ["benchmark wrote no JSON"]
    problems = []
    for cell in json.loads(path.read_text()):
        where = f"bs={cell['bs']} B={cell['budget']}"
        for key in ("equals_torch_path", "equals_reference", "graph_equals_eager"):
            if cell[key]:
                problems.append(f"{where}: {key} {cell[key]}")
        if cell["host_sync"] != "none" or cell["capture_error"]:
            problems.append(f"{where}: host sync {cell['host_sync']} / capture {cell['capture_error']}")
    return not problems, problems


def report_summary(log: Log, summary: dict, out_dir: Path) -> None:
    """The end of the console output: what failed and the goal lines, the rest is in OUT."""
    log("\n== summary")
    steps = summary["steps"]
    if "preflight" in steps:
        log(f"preflight: {'OK' if steps['preflight']['ok'] else 'FAILED (see check.log)'}")
    if "tests" in steps:
        result = tail(out_dir / "tests.log", 1, lambda line: " passed" in line or " failed" in line or " error" in line)
        log(f"tests: exit {steps['tests']['exit']} in {steps['tests']['s']}s: {result[0] if result else '(no result line)'}")
        for line in tail(out_dir / "tests.log", 40, lambda line: line.startswith(("FAILED", "ERROR"))):
            log(f"  {line[:300]}")
        if steps["tests"]["exit"] not in (0, None):
            log("  last lines of tests.log:")
            for line in tail(out_dir / "tests.log", 60, lambda line: not line.startswith(("SKIPPED", "."))):
                log(f"    {line[:300]}")
    if "warm" in steps:
        done = tail(out_dir / "warm.log", 1, lambda line: line.startswith("warm-up of"))
        log(f"warm-up: exit {steps['warm']['exit']}: {done[0] if done else '(see warm.log)'}")
    if "bench" in steps:
        bench = steps["bench"]
        log(f"bench: exit {bench['exit']} in {bench['s']}s; outputs correct: {'yes' if bench['correct'] else 'NO'}")
        for line in bench["problems"][:20]:
            log(f"  {line}")
        for line in tail(out_dir / "bench.log", 14, lambda line: line.startswith("[cell")):
            log(f"  {line[:400]}")
        if bench["exit"] not in (0, None):
            for line in tail(out_dir / "bench.log", 30):
                log(f"    {line[:300]}")
    for line in summary.get("goals", []):
        log(f"  {line[:600]}")
    log(f"total {summary['total_s']}s; exit {summary['status']}; logs, tables (ddtree_hot_path.md/.json) in {out_dir}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=os.environ.get("PATCHKIT_TARGET") or None,
                        help=f"directory holding {MODULE} (default: $PATCHKIT_TARGET, else the set's patches)")
    parser.add_argument("--set", type=Path, default=DEFAULT_SET, help="the patch set whose tests run")
    parser.add_argument("--no-tests", action="store_true")
    parser.add_argument("--no-bench", action="store_true")
    parser.add_argument("--no-sweep", action="store_true", help="skip the benchmark's tunable sweeps")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), help="pytest-xdist workers")
    parser.add_argument("--budget-s", type=float, default=450.0, help="wall-clock budget of the whole run")
    parser.add_argument("--bench-args", nargs=argparse.REMAINDER, default=[], help="passed on to the benchmark")
    args = parser.parse_args()
    started = time.perf_counter()
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else Path(tempfile.mkdtemp(prefix="ddtree-kernels-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    log = Log(out_dir / "check.log")
    scratch = Path(tempfile.mkdtemp(prefix="ddtree-tree-"))
    try:
        tree, module_path = resolve_module(args, scratch)
    except CheckError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    log(f"output directory: {out_dir}")
    log(f"module under test: {module_path}")
    summary: dict = {"environment": environment(log, module_path), "steps": {}}

    import torch

    if not torch.cuda.is_available():
        log("no CUDA device: preflight, CUDA tests and timings skipped")
        return 1
    status = 0
    env = {**os.environ, "PATCHKIT_TARGET": str(tree), "PYTHONPATH": os.pathsep.join(
        [str(HERE), str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    env.pop("SGLANG_DDTREE_TRITON", None)
    bench_base = [sys.executable, str(BENCH), "--module", str(module_path), "--no-verify"] + ([] if args.no_sweep else ["--sweep"])
    warm = None
    if not args.no_bench:  # compile the benchmark's kernel variants while the preflight and the tests run
        warm_log = (out_dir / "warm.log").open("w")
        warm = subprocess.Popen(bench_base + ["--warm-only", "--jobs", "4", *args.bench_args], env=env, cwd=REPO,
                                stdout=warm_log, stderr=subprocess.STDOUT, start_new_session=True)
        log("(compiling the benchmark's kernel variants in the background: warm.log)")

    log("\n== preflight: every fused entry point once, against the torch path")
    t0 = time.perf_counter()
    try:
        ok = preflight(log, module_path)
    except Exception:
        log(traceback.format_exc())
        ok = False
    summary["steps"]["preflight"] = {"ok": ok, "s": round(time.perf_counter() - t0, 1)}
    status |= 0 if ok else 1

    if not args.no_tests:
        left = args.budget_s - (time.perf_counter() - started)
        command, note = test_command(args.set, args.workers, out_dir)
        if note:
            log(note)
        code, seconds = run_step(log, "tests", command, env, min(300.0, left - 120), out_dir)
        summary["steps"]["tests"] = {"exit": code, "s": round(seconds, 1)}
        status |= 0 if code == 0 else 1
    if warm is not None:
        left = args.budget_s - (time.perf_counter() - started)
        try:
            warm.wait(timeout=max(5.0, min(120.0, left - 100)))
        except subprocess.TimeoutExpired:
            _kill(warm)
            log("warm-up cut short: the benchmark compiles the rest itself")
        summary["steps"]["warm"] = {"exit": warm.returncode}
    if not args.no_bench:
        left = args.budget_s - (time.perf_counter() - started)
        md, js = out_dir / "ddtree_hot_path.md", out_dir / "ddtree_hot_path.json"
        code, seconds = run_step(log, "bench", bench_base + ["--out", str(md), "--json", str(js)] + args.bench_args,
                                 env, max(30.0, left - 10), out_dir)
        correct, problems = bench_summary(js)
        summary["steps"]["bench"] = {"exit": code, "s": round(seconds, 1), "correct": correct, "problems": problems}
        status |= 0 if code == 0 and correct else 1
        if md.is_file():
            goals = md.read_text().split("## Goals", 1)[-1].split("\n## ", 1)[0].strip()
            summary["goals"] = goals.splitlines()
    summary["total_s"] = round(time.perf_counter() - started, 1)
    summary["status"] = status
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    report_summary(log, summary, out_dir)
    shutil.rmtree(scratch, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
