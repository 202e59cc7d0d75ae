"""The T = 1 sampling check and its broken control, simulated on CPU on the tree-friendly test models.

Why did ``bench --sampling``'s control (v2's test-only broken acceptance rule, ``SGLANG_DDTREE_TEST_BROKEN_ACCEPT``)
pass at 128 samples with ddtree@2.3.0 when it failed with 2.2.0? This script answers with the set's own
tree builder (``ddtree_utils.py`` of a patched tree, by file path: ``--tree DIR`` or PATCHKIT_TARGET), the
plain-torch reference forward of ``patchkit testmodels --profile tree`` (seed 0, the bf16 weights as written)
and the bench's own chi-square test (:mod:`patchkit.bench.chisquare`):

1. **the tree**: for every bonus token and context length the check meets, the (n - 1)-node tree an auto
   round of 2.3.0 builds from K = n - 1 candidates equals the widest tree (K = 63) cut to n - 1 nodes,
   which 2.2.0 verified: the rule sees the same trees at the same width;
2. **the reach**: the share of samples whose walk stands, at each output position, on a tree node with a
   child (where the rule can act: it gives such a node, with probability 1/2, its first child's token);
3. **the power**: ``--reps`` replicate checks of ``--samples`` draws per server (the baseline: autoregressive
   T = 1 sampling; DDTREE: the sample-and-match walk with the broken rule at a fixed width), each judged as
   the bench judges a run without log-probs (4 token tests at 0.001 / 4): how often the control fails.

    python benchmarks/sampling_control.py --tree PATCHED_TREE --samples 128 --reps 100 --budgets 7,63

The numbers of the 2026-12-07 run are in ``docs/sampling-power.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "hostprep" / "testmodels"))

import reference as ref  # noqa: E402

from patchkit.bench.chisquare import homogeneity  # noqa: E402
from patchkit.hostprep import testmodels as tm  # noqa: E402

PROMPT = [195]  # the first smoke prompt: what bench --sampling samples
TOKENS = 4
THRESHOLD = 0.001 / TOKENS  # the token test alone, as in the GPU run whose log-probs were not scored


def load_utils(tree: Path):
    path = tree / "python" / "sglang" / "srt" / "speculative" / "ddtree_utils.py"
    spec = importlib.util.spec_from_file_location("ddtree_utils_sim", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Models:
    def __init__(self, utils):
        torch.set_num_threads(1)
        self.utils = utils
        target, draft = tm.build_tree_weights(0)
        self.target = {k: v.to(torch.bfloat16).float() for k, v in target.items()}
        self.draft = {k: v.to(torch.bfloat16).float() for k, v in draft.items()}
        self._trees: dict = {}

    def next_probs(self, seqs: torch.Tensor) -> torch.Tensor:
        """[m, len] contexts of one length -> [m, V] T = 1 distributions of the next token."""
        with torch.no_grad():
            logits = torch.func.vmap(lambda ids: ref.target_logits(self.target, ids)[-1])(seqs)
        return torch.softmax(logits.double(), -1)

    def draft_logits(self, ctx_len: int) -> torch.Tensor:
        with torch.no_grad():
            return torch.func.vmap(lambda b: ref.draft_block_logits(self.target, self.draft, ctx_len, b))(
                torch.arange(tm.ORDINARY)).float()

    def trees(self, ctx_len: int, budget: int):
        """Per bonus token: (token by node, first child by node (-1: none), {token: child} by node)."""
        key = (ctx_len, budget)
        if key not in self._trees:
            logits = self.draft_logits(ctx_len)
            top, ids = self.utils.ddtree_topk_from_logits(logits, budget)
            tree = self.utils.build_ddtree_tree_from_topk(top, ids, budget)
            parents, tokens, count = tree.parents.tolist(), tree.node_token_ids.tolist(), tree.num_nodes.tolist()
            out = []
            for bonus in range(tm.ORDINARY):
                n = count[bonus] + 1
                node_tokens = [bonus, *tokens[bonus]]
                first, children = [-1] * n, [dict() for _ in range(n)]
                for c in range(1, n):
                    parent = parents[bonus][c]
                    children[parent].setdefault(node_tokens[c], c)
                    first[parent] = c if first[parent] < 0 else first[parent]
                out.append((node_tokens, first, children))
            self._trees[key] = out
        return self._trees[key]


def same_trees(models: Models) -> tuple[int, int]:
    same = total = 0
    for ctx_len in range(len(PROMPT), len(PROMPT) + TOKENS):
        logits = models.draft_logits(ctx_len)
        top, ids = models.utils.ddtree_topk_from_logits(logits, 63)
        widest = models.utils.build_ddtree_tree_from_topk(top, ids, 63)
        for n in (8, 16, 32):
            top, ids = models.utils.ddtree_topk_from_logits(logits, n - 1)
            direct = models.utils.build_ddtree_tree_from_topk(top, ids, n - 1)
            cut = models.utils.ddtree_truncate_tree(widest, n - 1)
            same += torch.equal(direct.parents, cut.parents) and torch.equal(direct.node_token_ids, cut.node_token_ids)
            total += 1
    return same, total


def sample(models: Models, m: int, budget: int | None, broken: bool, seed: int):
    """m outputs of TOKENS tokens; with a budget, DDTREE's walk (and the broken rule when asked); also
    per position the share of samples standing on a node with a child."""
    gen = torch.Generator().manual_seed(seed)
    seqs = torch.tensor([PROMPT] * m)
    state: list = [None] * m
    reach = []
    for _ in range(TOKENS):
        probs = models.next_probs(seqs)
        flip_to = torch.tensor([s[0][0][s[0][1][s[1]]] if s is not None and s[0][1][s[1]] >= 0 else -1 for s in state])
        reach.append(float((flip_to >= 0).double().mean()))
        x = torch.multinomial(probs, 1, generator=gen).view(-1)
        coin = torch.rand(m, generator=gen) < 0.5
        if broken:
            x = torch.where((flip_to >= 0) & coin, flip_to, x)
        if budget is not None:
            fresh = models.trees(seqs.shape[1], budget)
            for i, token in enumerate(x.tolist()):
                s, child = state[i], None
                if s is not None:
                    child = s[0][2][s[1]].get(token)
                state[i] = (s[0], child) if child is not None else (fresh[token], 0) if token < tm.ORDINARY else None
        seqs = torch.cat([seqs, x.view(-1, 1)], 1)
    return seqs[:, len(PROMPT):].tolist(), reach


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=os.environ.get("PATCHKIT_TARGET"), help="a patched v2 tree")
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--budgets", default="7,63", help="fixed widths - 1 to simulate (7, 15, 31, 63)")
    args = parser.parse_args()
    if args.tree is None:
        parser.error("--tree (or PATCHKIT_TARGET) names the patched tree")
    models = Models(load_utils(args.tree))
    start = time.time()
    same, total = same_trees(models)
    print(f"trees of K = n - 1 equal to the widest tree cut to n - 1 nodes: {same}/{total} "
          f"(context lengths x widths 8/16/32, all {tm.ORDINARY} bonus tokens each)")
    n, reps = args.samples, args.reps
    baseline, _ = sample(models, n * reps, None, False, seed=11)
    for budget in (int(b) for b in args.budgets.split(",")):
        control, reach = sample(models, n * reps, budget, True, seed=12 + budget)
        fails, by_position, smallest = 0, [0] * TOKENS, []
        for r in range(reps):
            a, b = baseline[r * n:(r + 1) * n], control[r * n:(r + 1) * n]
            p = [homogeneity([s[k] for s in a], [s[k] for s in b]).p_value for k in range(TOKENS)]
            fails += min(p) < THRESHOLD
            smallest.append(min(p))
            by_position = [c + (v < THRESHOLD) for c, v in zip(by_position, p, strict=True)]
        smallest.sort()
        quartiles = ", ".join(f"{smallest[int(q * (reps - 1))]:.1e}" for q in (0.25, 0.5, 0.75))
        print(f"B={budget}: the control fails {fails}/{reps} checks of {n} samples (per position {by_position}; "
              f"smallest p-value quartiles {quartiles}); the walk stands on a node with a child at positions "
              f"0-{TOKENS - 1} in {[round(r, 3) for r in reach]} of the samples ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
