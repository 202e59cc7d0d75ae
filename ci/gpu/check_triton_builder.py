"""The DDTree tree builder's Triton fast path on a GPU host: the set's tests, then timings.

    python3 ci/gpu/check_triton_builder.py [--tree PATCHED_TREE] [--no-tests] [--no-bench]

Needs torch with CUDA, triton, numpy and pytest; no SGLang, no network. Without --tree (or
PATCHKIT_TARGET) the module under test, python/sglang/srt/speculative/ddtree_utils.py, is
taken from patch 0001 of ddtree_patches/v1 (it adds the whole file), so a repository
checkout is enough.

1. ``python -m pytest ddtree_patches/v1/tests <shared core tests> -q`` against that tree (tests/integration,
   which need SGLang's dependencies, are left out); the Triton tests run on CUDA.
2. ``build_ddtree_tree_from_topk`` timed with the Triton path on and off
   (SGLANG_DDTREE_TRITON=0, a second import of the module), eager and replayed from a CUDA
   graph, for bs 1/16/64 x B 16/64/128/512 (draft depth 15): ms per build, median of
   repeats; every cell also checks that both paths return identical trees.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SET_DIR = REPO / "ddtree_patches" / "v1"
MODULE = "python/sglang/srt/speculative/ddtree_utils.py"
FIELDS = ("node_token_ids", "depths", "parents", "num_nodes", "visibility")


def extract_module(tree: Path) -> Path:
    """Write the file patch 0001 adds (a new file: its hunk is the whole text) under ``tree``."""
    series = (SET_DIR / "series").read_text().splitlines()
    patch = SET_DIR / next(line.strip() for line in series if line.strip() and not line.startswith("#"))
    lines = patch.read_text().splitlines(keepends=True)
    header = f"+++ b/{MODULE}"
    start = next(i for i, line in enumerate(lines) if line.rstrip("\n") == header)
    body = []
    for line in lines[start + 1:]:
        if line.startswith("diff --git ") or line.startswith("-- \n"):
            break
        if line.startswith("@@"):
            continue
        if line.startswith("-") or line.startswith(" "):
            raise SystemExit(f"{patch.name}: {MODULE} is not a new file in this patch")
        if line.startswith("+"):
            body.append(line[1:])
    out = tree / MODULE
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(body))
    return out


def load(path: Path, name: str, **env: str):
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def shared_tests(set_dir: Path) -> list[Path]:
    """The shared test packages the set's manifest names (``[verify.tests] shared``: the DDTree core
    module's tests, kept once for every set), run with the set's own tests against its tree."""
    import tomllib  # Python 3.11+, as the GPU hosts run

    manifest = tomllib.loads((set_dir / "manifest.toml").read_text()) if (set_dir / "manifest.toml").is_file() else {}
    return [(set_dir / rel).resolve() for rel in manifest.get("verify", {}).get("tests", {}).get("shared", [])]


def run_tests(tree: Path, python: str) -> int:
    env = {**os.environ, "PATCHKIT_TARGET": str(tree)}
    command = [python, "-m", "pytest", str(SET_DIR / "tests"), *map(str, shared_tests(SET_DIR)), "-q",
               "-p", "no:cacheprovider",
               "--ignore", str(SET_DIR / "tests" / "integration"), "-rs"]
    print("$", " ".join(command), flush=True)
    return subprocess.run(command, env=env, cwd=REPO).returncode


def bench(path: Path, batches, budgets, depth: int, vocab: int, repeats: int) -> bool:
    import torch

    fast = load(path, "ddtree_utils_triton_on")
    slow = load(path, "ddtree_utils_triton_off", SGLANG_DDTREE_TRITON="0")
    assert fast._DDTREE_TRITON_ENABLED and not slow._DDTREE_TRITON_ENABLED
    device = torch.device("cuda")
    print(f"\n{torch.cuda.get_device_name()} | torch {torch.__version__} | "
          f"triton {getattr(fast.triton, '__version__', 'missing')} | depth {depth}, vocab {vocab}\n")
    print("| bs | B | torch eager (ms) | triton eager (ms) | torch graph (ms) | triton graph (ms) "
          "| speedup graph | identical |")
    print("|---:|---:|---:|---:|---:|---:|---:|:---:|")
    ok = True

    def timed(fn, inner=20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(repeats):
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / inner)
        return statistics.median(samples)

    def graphed(module, top, budget):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                module.build_ddtree_tree_from_topk(*top, budget)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = module.build_ddtree_tree_from_topk(*top, budget)
        return graph, out

    for bs in batches:
        for budget in budgets:
            gen = torch.Generator(device=device).manual_seed(bs * 1000 + budget)
            logits = (torch.randn(bs, depth, vocab, generator=gen, device=device) * 4).bfloat16()
            top = fast.ddtree_topk_from_logits(logits, budget)
            use = fast._use_triton_tree(*top, budget)
            g_fast, out_fast = graphed(fast, top, budget)
            g_slow, out_slow = graphed(slow, top, budget)
            g_fast.replay()
            g_slow.replay()
            eager = fast.build_ddtree_tree_from_topk(*top, budget)
            torch.cuda.synchronize()
            same = use and all(
                torch.equal(getattr(a, f), getattr(b, f))
                for a, b in ((out_fast, out_slow), (eager, out_slow))
                for f in FIELDS
            )
            ok &= same
            row = (
                timed(lambda: slow.build_ddtree_tree_from_topk(*top, budget), 5),
                timed(lambda: fast.build_ddtree_tree_from_topk(*top, budget)),
                timed(g_slow.replay),
                timed(g_fast.replay),
            )
            print(f"| {bs} | {budget} | {row[0]:.3f} | {row[1]:.3f} | {row[2]:.3f} | {row[3]:.3f} "
                  f"| {row[2] / row[3]:.1f}x | {'yes' if same else 'NO'} |", flush=True)
            del g_fast, g_slow
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=os.environ.get("PATCHKIT_TARGET") or None,
                        help="a patched SGLang tree (default: the module from patch 0001)")
    parser.add_argument("--no-tests", action="store_true")
    parser.add_argument("--no-bench", action="store_true")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--budgets", type=int, nargs="+", default=[16, 64, 128, 512])
    parser.add_argument("--depth", type=int, default=15)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="ddtree-tree-") as scratch:
        tree = args.tree or Path(scratch)
        path = tree / MODULE
        if args.tree is None:
            extract_module(tree)
        print(f"module under test: {path}", flush=True)
        status = 0
        if not args.no_tests:
            status = run_tests(tree, sys.executable)
            print(f"tests: exit {status}", flush=True)
        if not args.no_bench:
            import torch

            if not torch.cuda.is_available():
                print("no CUDA device: timings skipped")
                return status or 1
            if not bench(path, args.batches, args.budgets, args.depth, args.vocab, args.repeats):
                print("MISMATCH: the Triton and torch builders differ in a cell above")
                status = status or 1
        return status


if __name__ == "__main__":
    sys.exit(main())
