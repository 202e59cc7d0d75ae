#!/usr/bin/env python3
"""The tensor-parallel smoke of an N-GPU host in one command (see ``ci/gpu/run_tp.sh``).

    python3 ci/gpu/run_tp.py 8 --target TREE            # on the GPU host, offline bundle installed

Steps, each kept under ``--out`` (default ``.patchkit/logs/tp<N>-<time>/``):

1. preflight: ``nvidia-smi`` GPU list (``preflight.txt``); the models must split over N ranks
   (attention heads divisible by N; KV heads dividing or divisible by N), else the smoke is not run;
2. ``patchkit testmodels --heads H`` (unless ``--model``/``--draft-model`` are given) -> ``testmodels/``,
   H = 4, or the least common multiple of 4 and N where 4 heads cannot split over N ranks (8 for tp 8);
3. ``patchkit smoke --gpus N --json`` with the set's profile -> ``smoke.out``, ``smoke-logs/``; then
   (N > 1, unless ``--no-tp1``) the same at ``--gpus 1`` -> ``smoke-tp1.out``: per-prompt accept lengths of
   tp 1 and tp N side by side, as information;
4. ``ci/gpu/tp_trees.py --world-size N``: vocab-parallel trees over N ranks equal tp = 1 -> ``trees.json``;
5. leftover processes: any still carrying the run's tag variable, listed by ``ps`` -> ``ps.txt``;
6. the summary -> stdout and ``summary.json``.

Exit 0 when every step that ran passed and none was skipped for a reason other than ``--skip-smoke``
or ``--device cpu``; 1 otherwise; 2 for bad options. NCCL_NVLS_ENABLE=0 is exported to every step.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: What the proven 1-GPU H200 run gave both servers beyond the set's server_args: the test models
#: have no tokenizer, and nothing may probe flashinfer or xgrammar at run time.
TEST_MODEL_SERVER_ARGS = ("--skip-tokenizer-init", "--sampling-backend", "pytorch", "--grammar-backend", "none",
                          "--mem-fraction-static", "0.25", "--max-running-requests", "4")
#: NVLink multicast off in NCCL, PyTorch and NVSHMEM: using it can take a shared host's GPUs out of service.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
#: Every process a run starts inherits this variable with the run's own value; any still alive at the
#: end is a leftover.
RUN_TAG_ENV = "PATCHKIT_TP_RUN"


class BadInput(Exception):
    """A wrong option: one line, exit 2."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Tensor-parallel smoke of an N-GPU host in one command.",
        epilog="Arguments after -- go to both smoke servers (instead of the test-model defaults).")
    parser.add_argument("gpus", help="GPUs = tensor-parallel size N")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: tree check with gloo ranks, no smoke (for machines without GPUs)")
    parser.add_argument("--set", dest="set_dir", type=Path, help="patch set (default: the newest)")
    parser.add_argument("--target", type=Path, help="patched SGLang tree (default: smoke's default)")
    parser.add_argument("--ddtree-utils", type=Path, help="ddtree_utils.py for the tree check")
    parser.add_argument("--model", type=Path, help="target model (default: patchkit testmodels)")
    parser.add_argument("--draft-model", type=Path, help="DFlash draft model (with --model)")
    parser.add_argument("--port", type=int, default=30111)
    parser.add_argument("--out", type=Path, help="where everything is kept")
    parser.add_argument("--python", default=sys.executable, help="interpreter for patchkit and the checks")
    parser.add_argument("--smoke-gpus", type=int,
                        help="--gpus given to smoke (default N; with --device cpu the smoke runs only if given)")
    parser.add_argument("--skip-smoke", action="store_true", help="run everything but the server smoke")
    parser.add_argument("--no-tp1", action="store_true",
                        help="skip the second smoke at tp 1 (per-prompt accept lengths compared, not gated)")
    parser.add_argument("--vocab", type=int, default=151936, help="vocabulary of the tree check")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per step")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else None
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.server_args = extra
    if not args.gpus.isdigit() or int(args.gpus) < 1:
        raise BadInput(f"N must be a positive number of GPUs, got {args.gpus!r}")
    args.gpus = int(args.gpus)
    if (args.model is None) != (args.draft_model is None):
        raise BadInput("--model and --draft-model go together")
    if args.smoke_gpus is None and args.device == "cpu":
        args.skip_smoke_reason = "--device cpu: no server smoke"
    elif args.skip_smoke:
        args.skip_smoke_reason = "--skip-smoke"
    else:
        args.skip_smoke_reason = None
    if args.smoke_gpus is None:
        args.smoke_gpus = args.gpus
    return args


# ---------------------------------------------------------------------------------------- steps


def run_step(name: str, argv: list[str], out: Path, timeout: float, cwd: Path = REPO_ROOT) -> dict:
    """Run one step, stdout to ``<name>.out``, stderr to ``<name>.err``; never raises."""
    env = {**os.environ, **SAFE_ENV, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    stdout, stderr = out / f"{name}.out", out / f"{name}.err"
    try:
        with open(stdout, "w") as so, open(stderr, "w") as se:
            done = subprocess.run(argv, cwd=cwd, env=env, stdout=so, stderr=se, timeout=timeout)
        code = done.returncode
    except subprocess.TimeoutExpired:
        code = None
    except OSError as error:
        stderr.write_text(f"{error}\n")
        code = None
    return {"argv": argv, "exit_code": code, "stdout": str(stdout), "stderr": str(stderr)}


def read_json(path: str) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def gpu_listing() -> str:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found"
    done = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.used,memory.total",
                           "--format=csv,noheader"], capture_output=True, text=True, timeout=60)
    return (done.stdout or done.stderr).strip()


def tp_misfits(config: dict, tp: int) -> list[str]:
    """Why SGLang's Qwen3 / DFlash attention cannot split this model over ``tp`` ranks (empty: it can)."""
    problems = []
    heads = config.get("num_attention_heads")
    kv = config.get("num_key_value_heads", heads)
    if heads and heads % tp:
        problems.append(f"num_attention_heads {heads} is not divisible by tp {tp}")
    if kv and (kv % tp if kv >= tp else tp % kv):
        problems.append(f"num_key_value_heads {kv} neither divides nor is divisible by tp {tp}")
    return problems


def test_model_heads(tp: int) -> int:
    """Attention heads for ``patchkit testmodels`` at tp N: the default 4 where it splits, else lcm(4, N)."""
    return 4 if 4 % tp == 0 else math.lcm(4, tp)


def model_misfits(models: dict[str, Path], tp: int) -> list[str]:
    problems = []
    for role, path in models.items():
        config = read_json(str(path / "config.json"))
        if config is None:
            problems.append(f"{role}: {path / 'config.json'} is missing or not JSON")
            continue
        problems += [f"{role} ({path}): {p}" for p in tp_misfits(config, tp)]
    return problems


def tagged_pids(tag: str) -> set[int]:
    """Live processes whose environment carries this run's tag (Linux ``/proc``), zombies excluded."""
    wanted = f"{RUN_TAG_ENV}={tag}".encode()
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            tagged = wanted in (entry / "environ").read_bytes().split(b"\0")
            zombie = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if tagged and not zombie:
            pids.add(int(entry.name))
    return pids


def leftover_processes(tag: str) -> list[str]:
    """``ps`` lines of every process this run started (they inherit its tag) that is still alive.

    The tag, not a name, decides: other work on the host (another ``sglang`` server, a pip command
    naming ``sglang-kernel``) is not ours, and a calling shell whose command line names the tree is not
    a leftover either.
    """
    pids = tagged_pids(tag)
    if not pids:
        return []
    done = subprocess.run(["ps", "-o", "pid,ppid,stat,args", "-p", ",".join(map(str, sorted(pids)))],
                          capture_output=True, text=True)
    return [line.strip() for line in done.stdout.splitlines()[1:] if line.strip()]


def smoke_summary(doc: dict | None) -> dict:
    """The verdict of ``patchkit smoke --json``: lossless, accept length, tokens/s, GPUs, teardown."""
    if doc is None:
        return {"ran": False, "lossless": None, "note": "no JSON from patchkit smoke"}
    if "error" in doc:
        return {"ran": True, "lossless": False, "note": doc["error"].get("message")}
    result = doc.get("result", {})
    servers = {s["role"]: s for s in result.get("servers", [])}
    prompts = result.get("prompts", [])
    stats = {role: s.get("stats", {}) for role, s in servers.items()}
    return {
        "ran": True,
        "lossless": bool(prompts) and result.get("mismatches") == 0 and all(p["matched"] for p in prompts),
        "ok": doc.get("ok"),
        "prompts_matched": f"{sum(p['matched'] for p in prompts)}/{len(prompts)}",
        "gpus": [f"{g['index']}: {g['name']}" for g in result.get("preflight", {}).get("gpus", [])],
        "accept_length": stats.get("ddtree", {}).get("accept_length"),
        "per_prompt_accept": {p["prompt_id"]: p.get("accept_length") for p in prompts},
        "tokens_per_s": {role: s.get("tokens_per_s") for role, s in stats.items()},
        "ready_s": {role: s.get("ready_s") for role, s in servers.items()},
        "teardown_clean": all(not s["teardown"]["leftover_pids"] for s in servers.values()) if servers else None,
        "failures": [f"{r}: {s['failure']}" for r, s in servers.items() if s.get("failure")],
        "logs": result.get("logs"),
    }


# ----------------------------------------------------------------------------------------- main


def default_out(gpus: int) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(os.environ.get("PATCHKIT_HOME", REPO_ROOT / ".patchkit")) / "logs" / f"tp{gpus}-{stamp}"


def patchkit(args: argparse.Namespace, *words: str) -> list[str]:
    return [args.python, "-m", "patchkit", *words]


def run_all(args: argparse.Namespace) -> dict:
    tag = f"{os.getpid()}-{datetime.datetime.now().strftime('%H%M%S%f')}"
    os.environ.update({**SAFE_ENV, RUN_TAG_ENV: tag})
    out = (args.out or default_out(args.gpus)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"gpus": args.gpus, "device": args.device, "out": str(out)}
    summary["preflight"] = gpu_listing() if args.device == "cuda" else "cpu run: no GPU preflight"
    (out / "preflight.txt").write_text(summary["preflight"] + "\n")
    set_args = ["--set", str(args.set_dir)] if args.set_dir else []
    target_args = ["--target", str(args.target)] if args.target else []

    if args.model:
        models = {"target": args.model, "draft": args.draft_model}
        server_args = args.server_args or []
    else:
        step = run_step("testmodels", patchkit(args, "testmodels", "--out", str(out / "testmodels"), "--heads",
                                               str(test_model_heads(args.gpus)), "--json"), out, args.timeout)
        summary["testmodels"] = step["exit_code"]
        models = {"target": out / "testmodels" / "target", "draft": out / "testmodels" / "draft"}
        server_args = args.server_args if args.server_args is not None else list(TEST_MODEL_SERVER_ARGS)

    misfits = model_misfits(models, args.gpus)
    if args.skip_smoke_reason:
        summary["smoke"] = {"ran": False, "lossless": None, "note": args.skip_smoke_reason}
    elif misfits:
        summary["smoke"] = {"ran": False, "lossless": False,
                            "note": f"models cannot run at tp {args.gpus}: " + "; ".join(misfits)}
    else:
        smoke = functools.partial(run_smoke, args, out, models, [*set_args, *target_args], server_args)
        summary["smoke"] = smoke("smoke", args.smoke_gpus)
        if args.gpus > 1 and not args.no_tp1 and summary["smoke"]["ran"]:
            # Same prompts at tp 1: per-prompt accept lengths side by side (information only: tp N
            # reduces in another order, so bf16 logits, and with them trees, may legitimately differ).
            summary["tp1"] = smoke("smoke-tp1", min(args.smoke_gpus, 1))
            summary["tp1"]["same_accept_lengths"] = same_accept_lengths(summary["smoke"], summary["tp1"])
    summary["model_misfits"] = misfits

    utils_args = (["--ddtree-utils", str(args.ddtree_utils)] if args.ddtree_utils else target_args)
    step = run_step("trees", [args.python, str(HERE / "tp_trees.py"), "--world-size", str(args.gpus),
                              "--device", args.device, "--vocab", str(args.vocab), "--workdir",
                              str(out / "trees"), "--json", *set_args, *utils_args], out, args.timeout)
    trees = read_json(step["stdout"])
    summary["trees"] = {"equal": bool(trees and trees["equal"]), "exit_code": step["exit_code"],
                        **({k: trees[k] for k in ("backend", "vocab", "cases", "seconds", "problems")}
                           if trees else {"note": f"no JSON; see {step['stderr']}"})}

    leftovers = leftover_processes(tag)
    (out / "ps.txt").write_text("\n".join(leftovers) + "\n" if leftovers else "none\n")
    summary["leftover_processes"] = leftovers
    summary["ok"] = passed(summary, args)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def run_smoke(args: argparse.Namespace, out: Path, models: dict, where: list[str], server_args: list[str],
              name: str, gpus: int) -> dict:
    """``patchkit smoke --gpus <gpus> --json``, its JSON in ``<name>.out``, its server logs in ``<name>-logs/``."""
    step = run_step(name, patchkit(
        args, "smoke", *where, "--gpus", str(gpus), "--model", str(models["target"]), "--draft-model",
        str(models["draft"]), "--port", str(args.port), "--logs", str(out / f"{name}-logs"), "--json", "--",
        *server_args), out, args.timeout)
    return {**smoke_summary(read_json(step["stdout"])), "exit_code": step["exit_code"]}


def same_accept_lengths(tp_n: dict, tp_1: dict) -> str | None:
    """"k/n": prompts whose DDTREE accept length is the same at tp N and at tp 1."""
    a, b = tp_n.get("per_prompt_accept", {}), tp_1.get("per_prompt_accept", {})
    if not a or set(a) != set(b):
        return None
    return f"{sum(a[k] == b[k] for k in a)}/{len(a)}"


def passed(summary: dict, args: argparse.Namespace) -> bool:
    smoke = summary["smoke"]
    smoke_ok = smoke.get("ok") is True if smoke["ran"] else bool(args.skip_smoke_reason)
    return smoke_ok and summary["trees"]["equal"] and not summary["leftover_processes"]


def render(summary: dict) -> str:
    smoke, trees = summary["smoke"], summary["trees"]
    yes_no = {True: "yes", False: "NO", None: "not run"}
    lines = [
        f"tensor-parallel smoke, N = {summary['gpus']} ({summary['device']}); everything in {summary['out']}",
        "preflight GPUs: " + (", ".join(smoke.get("gpus") or []) or summary["preflight"].replace("\n", "; ")),
        f"models split over {summary['gpus']} ranks: "
        + ("yes" if not summary["model_misfits"] else "NO: " + "; ".join(summary["model_misfits"])),
        f"lossless (DDTREE = baseline, tp {summary['gpus']}): {yes_no[smoke['lossless']]}"
        + (f" [{smoke['prompts_matched']} prompts]" if smoke.get("prompts_matched") else "")
        + (f" - {smoke['note']}" if smoke.get("note") else ""),
    ]
    if smoke.get("ran") and "tokens_per_s" in smoke:
        tps = ", ".join(f"{role} {v:.1f}" for role, v in smoke["tokens_per_s"].items() if v is not None)
        lines += [f"accept length: {smoke['accept_length']}", f"tokens/s: {tps or 'n/a'}",
                  f"server ready (s): {smoke['ready_s']}", f"smoke teardown clean: {smoke['teardown_clean']}"]
        lines += [f"failure: {f}" for f in smoke["failures"]]
    tp1 = summary.get("tp1")
    if tp1:
        lines.append(f"tp 1 on the same prompts: lossless {yes_no[tp1['lossless']]}, accept length "
                     f"{tp1.get('accept_length')}, per-prompt accept lengths equal to tp {summary['gpus']}: "
                     f"{tp1.get('same_accept_lengths')} (information, not a gate)")
    lines.append(f"vocab-parallel trees over {summary['gpus']} ranks == tp 1: {yes_no[trees['equal']]}"
                 + (f" ({trees['backend']}, V={trees['vocab']}, {trees['cases']} cases, {trees['seconds']} s)"
                    if "backend" in trees else f" - {trees.get('note', '')}"))
    lines += [f"  {p}" for p in trees.get("problems", [])[:5]]
    lines.append("leftover processes: " + ("none" if not summary["leftover_processes"]
                                            else "; ".join(summary["leftover_processes"])))
    lines.append(f"verdict: {'PASS' if summary['ok'] else 'FAIL'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except BadInput as error:
        print(f"run_tp: error: {error}", file=sys.stderr)
        return 2
    summary = run_all(args)
    print(render(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
