#!/usr/bin/env python3
"""The DDTree commit kernels on a GPU against their torch ops, without pytest (the offline host has none).

    python3 check_commit.py TREE

TREE is a patched SGLang tree; its ``ddtree_utils.py`` is loaded by path. The same comparisons as the
shared core test ``test_commit_round.py``'s GPU case, at the batch sizes the bench serves; exit 1 on
the first difference, naming the field.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import torch

MODULE = "python/sglang/srt/speculative/ddtree_utils.py"
FIELDS = ("out_tokens", "commit_lens", "flat_accept_index", "path_rows", "kv_src", "kv_tgt", "new_seq_lens")


def load(tree: Path):
    spec = importlib.util.spec_from_file_location("ddtree_utils_under_check", tree / MODULE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def case(seed: int, bs: int, n: int, steps: int):
    rng = random.Random(seed)
    draft = torch.tensor([[rng.randrange(150000) for _ in range(n)] for _ in range(bs)], dtype=torch.int64)
    index = torch.full((bs, steps), -1, dtype=torch.int64)
    length = torch.zeros(bs, dtype=torch.int64)
    for b in range(bs):
        accepted = rng.randrange(0, steps)
        index[b, 0] = 0
        for i, node in enumerate(sorted(rng.sample(range(1, n), accepted)), start=1):
            index[b, i] = node
        length[b] = accepted
    bonus = torch.tensor([rng.randrange(150000) for _ in range(bs)], dtype=torch.int64)
    window = torch.randperm(bs * n * 4, generator=torch.Generator().manual_seed(seed))[: bs * n] + 1
    seq_lens = torch.tensor([rng.randrange(1, 4000) for _ in range(bs)], dtype=torch.int64)
    return draft, index, length, bonus, window.to(torch.int64), seq_lens


def main(tree: Path) -> int:
    utils = load(tree)
    cuda = torch.device("cuda")
    checked = 0
    for bs in (1, 3, 4, 5, 15, 16, 17, 32):
        for n in (16, 32, 64):
            args = case(1000 * bs + n, bs, n, 16)
            expected = utils.ddtree_commit_round(*args)
            got = utils.ddtree_commit_round(*(t.to(cuda) for t in args))
            for field in FIELDS:
                if not torch.equal(getattr(got, field).cpu(), getattr(expected, field)):
                    print(f"check_commit: FAIL ddtree_commit_round bs={bs} n={n}: {field} differs")
                    return 1
            req_to_token = torch.randint(0, 10**6, (64, 4200), dtype=torch.int32)
            rows = torch.randperm(64)[:bs]
            starts = torch.randint(0, 4000, (bs,))
            want = utils.ddtree_window_slots(req_to_token, rows, starts, n)
            have = utils.ddtree_window_slots(req_to_token.to(cuda), rows.to(cuda), starts.to(cuda), n).cpu()
            if not torch.equal(have, want):
                print(f"check_commit: FAIL ddtree_window_slots bs={bs} n={n}")
                return 1
            checked += 1
    print(f"check_commit: ok, the commit and window-slot kernels equal the torch ops in {checked} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
