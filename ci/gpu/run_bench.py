#!/usr/bin/env python3
"""The DDTree bench of a GPU host in one command (see ``ci/gpu/run_bench.sh``).

    ci/gpu/run_bench.sh --target TREE                      # default steps: default, tree, sampling
    ci/gpu/run_bench.sh --target TREE --steps default      # one step per call where time is short
    ci/gpu/run_bench.sh --target TREE --steps shape --shape qwen3-8b

On the GPU host with the offline bundle installed (its PYTHONPATH exported) and the patched tree built.
Each step writes under ``--out`` (default ``$OUT`` when set, else ``.patchkit/logs/bench-<time>/``):

* ``default``: ``patchkit testmodels`` (the default pair, into ``--models``), then ``patchkit bench`` of every
  variant of the set's ``[bench]`` profile (baseline, DFLASH, DDTREE at ``--budgets``) at ``--concurrency``
  -> ``default.json`` (the bench's ``--json``), ``default.md`` (report), ``default.png`` (plot), ``default-logs/``;
* ``tree``: the same on ``patchkit testmodels --profile tree`` with ``--expect-tree-gain`` (default 1.3)
  -> ``tree.*``;
* ``sampling``: ``patchkit bench --sampling`` (baseline against DDTREE at ``--sampling-budget``, T = 1,
  ``--samples`` x 4 tokens) on the tree models -> ``sampling.*``;
* ``shape`` (with ``--shape NAME``): ``patchkit testmodels --shape NAME`` (random bf16 weights, into
  ``--models``, never ``--out``), then the bench without the output comparison (random weights flip
  near-ties between batch shapes) and with ``--acceptance`` (default: the paper's table) -> ``shape.*``.

Then: leftover processes (any still carrying the run's tag variable) -> ``ps.txt``; the summary -> stdout
and ``summary.json``. The server arguments for the test models are the ones the H200 smoke used
(``--skip-tokenizer-init --sampling-backend pytorch --grammar-backend none --mem-fraction-static 0.25``)
plus ``--max-running-requests`` = the highest concurrency level. Exit 0 when every step passed, 1 when
one failed, 2 for bad options.

Time: a server starts in about 60 s on the H200 (the first of a host about 140 s: JIT compiles), so
``default`` (5 servers: baseline, DFLASH, DDTREE x 3 budgets) takes about 7 minutes with the test models
and ``tree`` as long; ``sampling`` about 2.5 minutes. With 10 minutes per command, run one step per call.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
STEPS = ("default", "tree", "sampling", "shape")
DEFAULT_STEPS = ("default", "tree", "sampling")
TEST_MODEL_SERVER_ARGS = ("--skip-tokenizer-init", "--sampling-backend", "pytorch", "--grammar-backend", "none",
                          "--mem-fraction-static", "0.25")
#: The real-shape models are big: more memory for the KV pool, CUDA graphs only up to the levels run.
SHAPE_SERVER_ARGS = ("--skip-tokenizer-init", "--sampling-backend", "pytorch", "--grammar-backend", "none",
                     "--mem-fraction-static", "0.8")
PAPER_TABLE = REPO_ROOT / "benchmarks" / "acceptance" / "ddtree-paper-qwen3-8b-math500.toml"
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
RUN_TAG_ENV = "PATCHKIT_BENCH_RUN"


class BadInput(Exception):
    """A wrong option: one line, exit 2."""


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise BadInput(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise BadInput(f"{text!r}: every value must be a positive integer")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="The DDTree bench of a GPU host in one command.",
                                     epilog="Arguments after -- go to every server (after the test-model defaults).")
    parser.add_argument("--steps", default=",".join(DEFAULT_STEPS), help=f"comma-separated, of {', '.join(STEPS)}")
    parser.add_argument("--set", dest="set_dir", type=Path, help="patch set (default: the newest)")
    parser.add_argument("--target", type=Path, help="patched SGLang tree (default: patchkit's default)")
    parser.add_argument("--gpus", type=int, default=1, help="tensor-parallel size (0: CPU stand-in, for tests)")
    parser.add_argument("--budgets", default=None, help="DDTREE budgets (default: the set's [bench] profile)")
    parser.add_argument("--concurrency", default=None, help="levels (default: the set's [bench] profile)")
    parser.add_argument("--repeats", type=int, default=None, help="measured batches per level (default: profile)")
    parser.add_argument("--tree-gain", type=float, default=1.3, help="tree step: DDTREE/DFLASH accept length at least")
    parser.add_argument("--sampling-budget", type=int, default=64, help="sampling step: the DDTREE budget")
    parser.add_argument("--samples", type=int, default=256, help="sampling step: completions per server")
    parser.add_argument("--sampling-concurrency", type=int, default=32, help="sampling step: concurrent requests")
    parser.add_argument("--shape", default=None, help="shape step: testmodels --shape NAME (e.g. qwen3-8b)")
    parser.add_argument("--shape-budgets", default="16,64,256,512", help="shape step: DDTREE budgets")
    parser.add_argument("--shape-concurrency", default="1,8", help="shape step: levels")
    parser.add_argument("--acceptance", type=Path, default=PAPER_TABLE, help="shape step: acceptance table")
    parser.add_argument("--models", type=Path, default=REPO_ROOT / ".patchkit" / "bench-models",
                        help="where test models are written (reused when present); not under --out")
    parser.add_argument("--port", type=int, default=30123)
    parser.add_argument("--out", type=Path, help="where everything is kept (default $OUT, else .patchkit/logs/...)")
    parser.add_argument("--python", default=sys.executable, help="interpreter for patchkit and the servers")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per step")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.server_args = extra
    args.steps = [s for s in args.steps.split(",") if s]
    unknown = [s for s in args.steps if s not in STEPS]
    if unknown or not args.steps:
        raise BadInput(f"--steps: unknown step(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(STEPS)}")
    if "shape" in args.steps and not args.shape:
        raise BadInput("--steps shape needs --shape NAME (e.g. qwen3-8b)")
    for name in ("budgets", "concurrency", "shape_budgets", "shape_concurrency"):
        value = getattr(args, name)
        if value is not None:
            int_list(value)
    if args.gpus < 0:
        raise BadInput(f"--gpus must be 0 or more, got {args.gpus}")
    return args


def run_step(name: str, argv: list[str], out: Path, timeout: float) -> dict:
    """Run one command, stdout to ``<name>.out``, stderr to ``<name>.err``; never raises."""
    env = {**os.environ, **SAFE_ENV, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    stdout, stderr = out / f"{name}.out", out / f"{name}.err"
    print(f"[run_bench] {name}: {' '.join(argv)}", flush=True)
    begun = datetime.datetime.now()
    try:
        with open(stdout, "w") as so, open(stderr, "w") as se:
            code = subprocess.run(argv, cwd=REPO_ROOT, env=env, stdout=so, stderr=se, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        code = None
    seconds = (datetime.datetime.now() - begun).total_seconds()
    print(f"[run_bench] {name}: exit {code} after {seconds:.0f} s", flush=True)
    return {"argv": argv, "exit_code": code, "seconds": round(seconds, 1), "stdout": str(stdout), "stderr": str(stderr)}


def read_json(path: str) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def patchkit(args: argparse.Namespace, *words: str) -> list[str]:
    return [args.python, "-m", "patchkit", *words]


def where(args: argparse.Namespace) -> list[str]:
    return [*(["--set", str(args.set_dir)] if args.set_dir else []),
            *(["--target", str(args.target)] if args.target else [])]


def ensure_models(args: argparse.Namespace, out: Path, name: str, *options: str) -> tuple[dict, Path]:
    """``patchkit testmodels`` into ``--models/<name>`` unless a complete pair is already there."""
    directory = args.models / name
    if all((directory / role / "model.safetensors").is_file() for role in ("target", "draft")):
        return {"reused": str(directory), "exit_code": 0}, directory
    if directory.exists():
        raise_if_partial(directory)
    step = run_step(f"testmodels-{name}", patchkit(args, "testmodels", "--out", str(directory), *options, "--json"),
                    out, args.timeout)
    return step, directory


def raise_if_partial(directory: Path) -> None:
    """A half-written pair (a killed run) is moved aside, not trusted."""
    directory.rename(directory.with_name(directory.name + f".partial-{os.getpid()}"))


def server_args(args: argparse.Namespace, base: tuple[str, ...], levels: str) -> list[str]:
    """The step's defaults, room for the highest level, then the caller's (later flags win in SGLang)."""
    return [*base, "--max-running-requests", str(max(int_list(levels))), *args.server_args]


def bench_step(args: argparse.Namespace, out: Path, name: str, models: Path, options: list[str], base: tuple[str, ...],
               levels: str) -> dict:
    argv = patchkit(args, "bench", *where(args), "--gpus", str(args.gpus), "--model", str(models / "target"),
                    "--draft-model", str(models / "draft"), "--port", str(args.port), "--logs", str(out / f"{name}-logs"),
                    "--report", str(out / f"{name}.md"), "--json", *options)
    if name != "sampling":
        argv += ["--plot", str(out / f"{name}.png")] if plot_available(args) else []
    argv += ["--", *server_args(args, base, levels)]
    step = run_step(name, argv, out, args.timeout)
    doc = read_json(step["stdout"])
    (out / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n") if doc else None
    return {**step, **bench_summary(doc)}


def plot_available(args: argparse.Namespace) -> bool:
    done = subprocess.run([args.python, "-c", "import matplotlib"], capture_output=True)
    return done.returncode == 0


def bench_summary(doc: dict | None) -> dict:
    if doc is None:
        return {"ok": False, "note": "no JSON from patchkit bench"}
    if "error" in doc:
        return {"ok": False, "note": doc["error"].get("message")}
    result = doc["result"]
    rows = []
    for run in result.get("variants", []):
        for level in run["levels"]:
            rows.append({"variant": run["label"], "concurrency": level["concurrency"], "ready_s": run["ready_s"],
                         "aggregate_tok_s": (level["aggregate_tok_s"] or {}).get("mean"),
                         "ms_per_round": (level["ms_per_round"] or {}).get("mean"),
                         "accept_length": level["accept_length"],
                         "vs_dflash": (level["vs_dflash"] or {}).get("mean"),
                         "mismatches": len(level["mismatches"])})
    summary = {"ok": doc["ok"], "failures": result.get("failures", []), "rows": rows}
    if result.get("tree_gain"):
        summary["tree_gain"] = {g["variant"]: round(g["gain"], 3) for g in result["tree_gain"]}
    if result.get("sampling"):
        summary["sampling"] = {v["label"]: min(p["test"]["p_value"] for p in v["positions"])
                               for v in result["sampling"]["variants"]}
    if result.get("projection"):
        summary["projection"] = [{k: r[k] for k in ("variant", "concurrency", "measured_ms_per_round", "projected_tok_s",
                                                    "vs_dflash", "vs_baseline")} for r in result["projection"]["rows"]]
    return summary


def tagged_pids(tag: str) -> list[str]:
    wanted = f"{RUN_TAG_ENV}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            tagged = wanted in (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if tagged and state != "Z":
            found.append(f"{entry.name} {command}")
    return found


def default_out() -> Path:
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"])
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return REPO_ROOT / ".patchkit" / "logs" / f"bench-{stamp}"


def run_all(args: argparse.Namespace) -> dict:
    tag = f"{os.getpid()}-{datetime.datetime.now().strftime('%H%M%S%f')}"
    os.environ.update({**SAFE_ENV, RUN_TAG_ENV: tag})
    out = (args.out or default_out()).resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.models = args.models.resolve()
    summary: dict = {"out": str(out), "steps": {}, "gpus": gpu_listing()}
    (out / "gpus.txt").write_text(summary["gpus"] + "\n")
    levels = ["--budgets", args.budgets] if args.budgets else []
    levels += ["--concurrency", args.concurrency] if args.concurrency else []
    levels += ["--repeats", str(args.repeats)] if args.repeats else []
    for name in args.steps:
        if name == "default":
            made, models = ensure_models(args, out, "default")
            summary["steps"][name] = {"models": made, **bench_step(args, out, name, models, levels,
                                                                   TEST_MODEL_SERVER_ARGS, args.concurrency or "1,8,32")}
        elif name == "tree":
            made, models = ensure_models(args, out, "tree", "--profile", "tree")
            summary["steps"][name] = {"models": made, **bench_step(
                args, out, name, models, [*levels, "--expect-tree-gain", str(args.tree_gain)], TEST_MODEL_SERVER_ARGS,
                args.concurrency or "1,8,32")}
        elif name == "sampling":
            made, models = ensure_models(args, out, "tree", "--profile", "tree")
            options = ["--sampling", "--variants", "baseline,ddtree", "--budgets", str(args.sampling_budget),
                       "--samples", str(args.samples), "--concurrency", str(args.sampling_concurrency)]
            summary["steps"][name] = {"models": made, **bench_step(args, out, name, models, options,
                                                                   TEST_MODEL_SERVER_ARGS, str(args.sampling_concurrency))}
        elif name == "shape":
            made, models = ensure_models(args, out, f"shape-{args.shape}", "--shape", args.shape)
            options = ["--no-check-outputs", "--acceptance", str(args.acceptance), "--budgets", args.shape_budgets,
                       "--concurrency", args.shape_concurrency, *(["--repeats", str(args.repeats)] if args.repeats else [])]
            top = str(max(int_list(args.shape_concurrency)))
            summary["steps"][name] = {"models": made, **bench_step(
                args, out, name, models, options, (*SHAPE_SERVER_ARGS, "--cuda-graph-max-bs", top), args.shape_concurrency)}
    leftovers = tagged_pids(tag)
    (out / "ps.txt").write_text("\n".join(leftovers) + "\n" if leftovers else "none\n")
    summary["leftover_processes"] = leftovers
    summary["ok"] = all(step.get("ok") and step.get("exit_code") == 0 and step["models"].get("exit_code") == 0
                        for step in summary["steps"].values()) and not leftovers
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def gpu_listing() -> str:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.used,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "nvidia-smi not available"
    return (done.stdout or done.stderr).strip()


def render(summary: dict) -> str:
    lines = [f"DDTree bench; everything in {summary['out']}", "GPUs: " + summary["gpus"].replace("\n", "; ")]
    for name, step in summary["steps"].items():
        lines.append(f"== {name}: {'PASS' if step.get('ok') and step.get('exit_code') == 0 else 'FAIL'} "
                     f"(exit {step.get('exit_code')}, {step.get('seconds')} s; report {summary['out']}/{name}.md)")
        if step["models"].get("exit_code") not in (0, None):
            lines.append(f"   testmodels failed: see {step['models'].get('stderr')}")
        for row in step.get("rows", []):
            lines.append(f"   {row['variant']:<14} c={row['concurrency']:<3} ready {fmt(row['ready_s'], '.0f')} s  "
                         f"{fmt(row['aggregate_tok_s'], '.1f')} tok/s  {fmt(row['ms_per_round'], '.2f')} ms/round  "
                         f"accept {fmt(row['accept_length'], '.2f')}  x DFLASH {fmt(row['vs_dflash'], '.2f')}  "
                         f"mismatches {row['mismatches']}")
        for variant, gain in step.get("tree_gain", {}).items():
            lines.append(f"   tree gain {variant}: {gain:.2f}x DFLASH's accept length")
        for label, p in step.get("sampling", {}).items():
            lines.append(f"   sampling {label}: lowest p-value over positions {p:.3g}")
        for row in step.get("projection", []):
            lines.append(f"   projected {row['variant']:<12} c={row['concurrency']}: measured {fmt(row['measured_ms_per_round'], '.2f')} "
                         f"ms/round -> {fmt(row['projected_tok_s'], '.1f')} tok/s, x DFLASH {fmt(row['vs_dflash'], '.2f')}, "
                         f"x baseline {fmt(row['vs_baseline'], '.2f')}")
        lines += [f"   failure: {f}" for f in step.get("failures", [])]
        if step.get("note"):
            lines.append(f"   note: {step['note']}")
        if not (step.get("ok") and step.get("exit_code") == 0):
            lines.append(f"   stderr tail ({step.get('stderr')}):")
            lines += ["     " + line for line in tail(step.get("stderr"), 15)]
    lines.append("leftover processes: " + ("none" if not summary["leftover_processes"]
                                            else "; ".join(summary["leftover_processes"])))
    lines.append(f"verdict: {'PASS' if summary['ok'] else 'FAIL'}")
    return "\n".join(lines)


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def tail(path: str | None, n: int) -> list[str]:
    try:
        return [line for line in Path(path).read_text(errors="replace").splitlines() if line.strip()][-n:]
    except (OSError, TypeError):
        return []


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except BadInput as error:
        print(f"run_bench: error: {error}", file=sys.stderr)
        return 2
    summary = run_all(args)
    print(render(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
