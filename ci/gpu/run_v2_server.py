"""The v2 set's real-server check on a GPU host: baseline, DFLASH and DDTREE, lossless or not.

    python3 ci/gpu/run_v2_server.py --target TREE --model M --draft-model D [--out DIR] [-- server args]

Starts one server at a time from the patched tree (``TREE/python`` first on ``PYTHONPATH``) with
the same arguments, sends the set's token-id prompts (``ddtree_patches/v2/smoke/prompts.jsonl``)
one at a time and 8 at once, greedy, and compares every output with the baseline's token for
token. Servers, in order (each start costs about a minute; the first one also JIT-compiles
flashinfer's norm kernel):

  baseline       no speculation
  dflash         --speculative-algorithm DFLASH (overlap scheduler on)
  dflash-sync    DFLASH with --disable-overlap-schedule (is a batch-8 overlap slowdown
                 DFLASH's own, or DDTREE's?)
  ddtree         --speculative-algorithm DDTREE (overlap scheduler on, the default)
  ddtree-sync    DDTREE with --disable-overlap-schedule

On the DDTREE servers it also sends seeded sampled requests (temperature 1, a sampling_seed per
request) and counts how many equal the baseline's seeded samples: DDTREE keys every node's draw
on (seed, position), like the baseline's pytorch sampler, so they should all be equal; bf16
near-ties may flip a few, so this count is reported, not gated.

Writes ``OUT/summary.json`` (versioned, keys below) and one log per server under ``OUT`` (``$OUT``
when set, else ``.patchkit/logs/v2-server-<time>``). Exit 0 when every greedy output of every
speculative server equals the baseline's and every server started and stopped cleanly; 1 when
not; 2 for bad options. Standard library only, so it runs with the host's python and the
bundle's PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

SUMMARY_VERSION = 1
REPO = Path(__file__).resolve().parents[2]
DEFAULT_PROMPTS = REPO / "ddtree_patches" / "v2" / "smoke" / "prompts.jsonl"
SERVER_ARGS = [
    "--dtype", "bfloat16", "--attention-backend", "triton", "--page-size", "1",
    "--random-seed", "0", "--disable-radix-cache", "--cuda-graph-max-bs", "8",
    "--skip-tokenizer-init", "--sampling-backend", "pytorch", "--grammar-backend", "none",
    "--mem-fraction-static", "0.25", "--max-running-requests", "8",
]
VARIANTS = {
    "baseline": [],
    "dflash": ["--speculative-algorithm", "DFLASH"],
    "dflash-sync": ["--speculative-algorithm", "DFLASH", "--disable-overlap-schedule"],
    "ddtree": ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "64"],
    "ddtree-sync": ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "64",
                    "--disable-overlap-schedule"],
}
SPECULATIVE = ("dflash", "dflash-sync", "ddtree", "ddtree-sync")
SAMPLED = ("ddtree", "ddtree-sync")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(prog="run_v2_server.py", description=__doc__.split("\n")[0])
    p.add_argument("--target", required=True, help="the patched SGLang tree (holds python/sglang)")
    p.add_argument("--model", required=True)
    p.add_argument("--draft-model", required=True)
    p.add_argument("--out", default=os.environ.get("OUT"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--port", type=int, default=30123)
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS))
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--sampled", type=int, default=16, help="seeded sampled requests per DDTREE server")
    p.add_argument("--startup-timeout", type=float, default=900.0)
    p.add_argument("--request-timeout", type=float, default=300.0)
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset, baseline first")
    args = p.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown or not args.variants or args.variants[0] != "baseline":
        p.error(f"--variants must start with baseline and name only {', '.join(VARIANTS)}; got {args.variants}")
    if not (Path(args.target) / "python" / "sglang").is_dir():
        p.error(f"--target {args.target}: no python/sglang there")
    for flag in ("model", "draft_model"):
        if not (Path(getattr(args, flag)) / "config.json").is_file():
            p.error(f"--{flag.replace('_', '-')} {getattr(args, flag)}: no config.json")
    return args, extra


def load_prompts(path: str) -> list[dict]:
    prompts = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        row = json.loads(line)
        if "input_ids" in row:  # text prompts need a tokenizer; the servers run without one
            prompts.append(row)
    if not prompts:
        raise SystemExit(f"{path}: no token-id prompts")
    return prompts


def post(url: str, body: dict, timeout: float) -> dict:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_healthy(base: str, proc: subprocess.Popen, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it became healthy")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    raise RuntimeError(f"server not healthy after {timeout:.0f} s")


def generate(base: str, input_ids: list[int], params: dict, timeout: float) -> dict:
    t0 = time.monotonic()
    out = post(f"{base}/generate", {"input_ids": input_ids, "sampling_params": params}, timeout)
    if isinstance(out, list):
        out = out[0]
    meta = out.get("meta_info", {})
    return {"output_ids": list(out.get("output_ids") or []), "seconds": time.monotonic() - t0,
            "verify_ct": meta.get("spec_verify_ct"), "completion_tokens": meta.get("completion_tokens")}


def run_requests(base: str, jobs: list[tuple[str, list[int], dict]], concurrency: int, timeout: float) -> dict:
    results: dict[str, dict] = {}
    lock, queue = threading.Lock(), list(jobs)

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                key, ids, params = queue.pop(0)
            try:
                res = generate(base, ids, params, timeout)
            except Exception as e:  # noqa: BLE001 - recorded as the request's result
                res = {"error": f"{type(e).__name__}: {e}"}
            with lock:
                results[key] = res

    threads = [threading.Thread(target=worker) for _ in range(max(1, concurrency))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def stop(proc: subprocess.Popen, grace: float = 30.0) -> str:
    if proc.poll() is not None:
        return "exited"
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
        return "sigterm"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        return "sigkill"


def run_server(args, extra, variant: str, prompts: list[dict], out: Path) -> dict:
    base = f"http://127.0.0.1:{args.port}"
    cmd = [args.python, "-m", "sglang.launch_server", "--model-path", args.model, "--host", "127.0.0.1",
           "--port", str(args.port), *SERVER_ARGS, *VARIANTS[variant]]
    if variant != "baseline":
        cmd += ["--speculative-draft-model-path", args.draft_model]
    cmd += extra
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(Path(args.target) / "python"), os.environ.get("PYTHONPATH", "")) if p))
    log = open(out / f"{variant}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    record: dict = {"variant": variant, "command": cmd}
    try:
        record["ready_s"] = round(wait_healthy(base, proc, args.startup_timeout), 1)
        greedy = {"temperature": 0.0, "max_new_tokens": args.max_new_tokens, "ignore_eos": True}
        jobs = [(p["id"], p["input_ids"], greedy) for p in prompts]
        t0 = time.monotonic()
        record["serial"] = run_requests(base, jobs, 1, args.request_timeout)
        record["serial_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        record["concurrent"] = run_requests(base, jobs, args.concurrency, args.request_timeout)
        record["concurrent_s"] = time.monotonic() - t0
        if variant == "baseline" or variant in SAMPLED:
            sampled = [(f"{p['id']}#s{i}", p["input_ids"],
                        {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16, "ignore_eos": True,
                         "sampling_seed": 1000 + i})
                       for i in range(args.sampled) for p in prompts[:1]]
            record["sampled"] = run_requests(base, sampled, args.concurrency, args.request_timeout)
    except Exception as e:  # noqa: BLE001 - the summary carries it
        record["error"] = f"{type(e).__name__}: {e}"
    finally:
        record["teardown"] = stop(proc)
        log.close()
    return record


def stats(results: dict) -> dict:
    ok = [r for r in results.values() if "error" not in r]
    tokens = sum(len(r["output_ids"]) for r in ok)
    seconds = sum(r["seconds"] for r in ok)
    verify = [r["verify_ct"] for r in ok if r.get("verify_ct")]
    return {"requests": len(results), "errors": len(results) - len(ok),
            "tokens_per_s_per_request": round(tokens / seconds, 1) if seconds else None,
            "accept_length": round(sum(len(r["output_ids"]) for r in ok) / sum(verify), 3) if verify else None}


def compare(reference: dict, results: dict) -> dict:
    mismatches = []
    for key, ref in reference.items():
        got = results.get(key, {})
        if "error" in ref or "error" in got or ref["output_ids"] != got.get("output_ids"):
            first = next((i for i, (a, b) in enumerate(zip(ref.get("output_ids", []), got.get("output_ids", [])))
                          if a != b), None)
            mismatches.append({"prompt": key, "first_diff": first, "error": got.get("error") or ref.get("error")})
    return {"compared": len(reference), "identical": len(reference) - len(mismatches), "mismatches": mismatches}


def summarize(records: dict[str, dict]) -> dict:
    base = records.get("baseline", {})
    summary = {"version": SUMMARY_VERSION, "servers": {}, "pass": True}
    for variant, rec in records.items():
        row = {"ready_s": rec.get("ready_s"), "error": rec.get("error"), "teardown": rec.get("teardown")}
        for mode in ("serial", "concurrent"):
            if mode in rec:
                row[mode] = stats(rec[mode])
                if variant != "baseline" and mode in base:
                    row[mode]["lossless"] = compare(base[mode], rec[mode])
                    if row[mode]["lossless"]["mismatches"]:
                        summary["pass"] = False
        if variant != "baseline" and "sampled" in rec and "sampled" in base:
            row["sampled_equal_to_baseline"] = compare(base["sampled"], rec["sampled"])["identical"]
            row["sampled_total"] = len(base["sampled"])
        if rec.get("error") or rec.get("teardown") == "sigkill" or (variant != "baseline" and "serial" not in rec):
            summary["pass"] = False
        summary["servers"][variant] = row
    return summary


def main(argv: list[str]) -> int:
    args, extra = parse_args(argv)
    out = Path(args.out or REPO / ".patchkit" / "logs" / f"v2-server-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    prompts = load_prompts(args.prompts)
    records = {}
    for variant in args.variants:
        print(f"[run_v2_server] {variant}: starting", flush=True)
        records[variant] = run_server(args, extra, variant, prompts, out)
        print(f"[run_v2_server] {variant}: {records[variant].get('error') or 'done'}", flush=True)
        if variant == "baseline" and "error" in records[variant]:
            break
    summary = summarize(records)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "raw.json").write_text(json.dumps(records, indent=2, default=str))
    print(json.dumps(summary, indent=2))
    print(f"[run_v2_server] {'PASS' if summary['pass'] else 'FAIL'}; logs and summary.json in {out}")
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
