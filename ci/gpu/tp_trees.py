#!/usr/bin/env python3
"""Vocabulary-parallel DDTree trees on N real devices equal the tp = 1 trees.

    python3 ci/gpu/tp_trees.py --world-size 8                  # 8 GPUs, NCCL, V = 151936, bf16
    python3 ci/gpu/tp_trees.py --world-size 2 --device cpu     # gloo on 127.0.0.1

The logic is the shared test of the DDTree core module,
``ddtree_patches/common/ddtree_utils_tests/test_tp_shard_worlds.py``, which every set runs against its
own tree (loaded by path; it needs only torch): one process per rank (``cuda:<rank>`` with NCCL), each
holding a padded vocabulary shard of the same random draft logits, local top-K, all-gather of
(values, ids, max, sumexp), merge, tree build; every rank's tree and merged top-K are compared
bit for bit with the tree one process builds from the full logits on the same device kind.

Exit 0: all equal; 1: a difference or a failed rank; 2: bad input. ``--json`` prints one object.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# Where a set finds it: its own tests first, then the shared package its manifest names ([verify.tests] shared).
TEST_FILES = (Path("tests") / "test_tp_shard_worlds.py", Path("../common/ddtree_utils_tests/test_tp_shard_worlds.py"))
MODULE_IN_TREE = Path("python/sglang/srt/speculative/ddtree_utils.py")
QWEN3_VOCAB = 151936


class BadInput(Exception):
    """A wrong option or a missing file: one line, exit 2."""


def newest_set(root: Path = REPO_ROOT / "ddtree_patches") -> Path:
    sets = [d for d in root.glob("v*") if d.is_dir() and d.name[1:].isdigit()]
    if not sets:
        raise BadInput(f"no patch set under {root}; pass --set DIR")
    return max(sets, key=lambda d: int(d.name[1:]))


def single_tree() -> Path:
    """The one tree under ``$PATCHKIT_HOME/trees`` (default ``.patchkit/trees``), as smoke picks it."""
    trees_dir = Path(os.environ.get("PATCHKIT_HOME", REPO_ROOT / ".patchkit")) / "trees"
    trees = sorted(d for d in trees_dir.iterdir() if d.is_dir()) if trees_dir.is_dir() else []
    if len(trees) != 1:
        raise BadInput(f"cannot choose a tree under {trees_dir} ({len(trees)} found); pass --target DIR")
    return trees[0]


def module_path(args: argparse.Namespace) -> Path:
    path = (args.ddtree_utils or (args.target or single_tree()) / MODULE_IN_TREE).resolve()
    if not path.is_file():
        raise BadInput(f"{path} does not exist: pass --target (a patched SGLang tree) or --ddtree-utils")
    return path


def load_test_module(set_dir: Path):
    """The vocab-parallel test file the set runs, as a module (it imports only torch and the stdlib)."""
    path = next((set_dir / name for name in TEST_FILES if (set_dir / name).is_file()), set_dir / TEST_FILES[-1])
    if not path.is_file():
        raise BadInput(f"{path} does not exist: is {set_dir} a patch set?")
    spec = importlib.util.spec_from_file_location("vocab_parallel_shards", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def device_cases(shards, vocab: int):
    """Qwen3-sized vocabularies, draft blocks of 8 and 16, budgets 16..128, bf16 with ties."""
    case = shards.Case
    return (
        case(seed=0, batch=4, depth=16, vocab=vocab, budget=64, kind="bf16"),
        case(seed=1, batch=4, depth=16, vocab=vocab, budget=128, kind="bf16"),
        case(seed=2, batch=2, depth=8, vocab=vocab, budget=16, kind="fp32"),
        case(seed=3, batch=4, depth=8, vocab=vocab, budget=64, kind="bf16-ties"),
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-size", type=int, required=True, help="ranks (GPUs with --device cuda)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--backend", choices=("nccl", "gloo"), help="default: nccl on cuda, gloo on cpu")
    parser.add_argument("--vocab", type=int, default=QWEN3_VOCAB, help="vocabulary size (default Qwen3's)")
    parser.add_argument("--set", type=Path, dest="set_dir", help="patch set (default: the newest)")
    parser.add_argument("--target", type=Path, help="patched SGLang tree holding python/sglang")
    parser.add_argument("--ddtree-utils", type=Path, help="ddtree_utils.py itself (instead of --target)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole world")
    parser.add_argument("--workdir", type=Path, help="rank logs and results (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.world_size < 1:
        raise BadInput(f"--world-size must be at least 1, got {args.world_size}")
    if args.vocab < 2:
        raise BadInput(f"--vocab must be at least 2, got {args.vocab}")
    args.backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    if args.backend == "nccl" and args.device != "cuda":
        raise BadInput("--backend nccl needs --device cuda")
    return args


def check_devices(args: argparse.Namespace) -> None:
    if args.device != "cuda":
        return
    import torch

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < args.world_size:
        raise BadInput(f"--world-size {args.world_size} needs {args.world_size} GPUs; torch sees {found}")


def run(args: argparse.Namespace) -> dict:
    # NVLink multicast stays off: a program using it can take a shared host's GPUs out of service.
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    shards = load_test_module(args.set_dir or newest_set())
    path = module_path(args)
    check_devices(args)
    mod = shards.load_module(path)
    cases = device_cases(shards, args.vocab)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tp-trees-"))
    started = time.monotonic()
    report = {"world_size": args.world_size, "device": args.device, "backend": args.backend,
              "vocab": args.vocab, "cases": len(cases), "workdir": str(workdir), "module": str(path)}
    try:
        results = shards.run_world(path, args.world_size, cases, workdir, device=args.device,
                                   backend=args.backend, timeout_s=args.timeout)
    except shards.WorldFailed as error:
        return {**report, "equal": False, "problems": [f"world failed: {error}"],
                "seconds": round(time.monotonic() - started, 1)}
    reference_device = shards.torch.device("cuda", 0) if args.device == "cuda" else shards.torch.device("cpu")
    problems = shards.compare_with_tp1(mod, cases, results, reference_device)
    shard_width = shards.shard_layout(args.vocab, args.world_size, 0)[1]
    return {**report, "equal": not problems, "problems": problems,
            "ranks": len(results), "gathered_bytes_per_rank": results[0].gathered_bytes,
            "dense_shard_bytes_per_rank": sum(c.batch * c.depth * shard_width * 2 for c in cases),
            "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        report = run(args)
    except BadInput as error:
        print(f"tp_trees: error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        verdict = "EQUAL to tp=1" if report["equal"] else "DIFFERENT from tp=1"
        print(f"tp_trees: {report['world_size']} ranks ({report['device']}, {report['backend']}), "
              f"V={report['vocab']}, {report['cases']} cases: {verdict} ({report['seconds']} s)")
        for line in report["problems"]:
            print(f"  {line}")
    return 0 if report["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
