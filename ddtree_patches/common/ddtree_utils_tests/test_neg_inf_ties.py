"""-inf and NaN log-probs in the tree builders: ties among -inf scores go by rank tuple.

A top-K row can hold -inf (tokens of zero probability) and, when a drafter row has no finite
logit at all, NaN (-inf - -inf). Every prefix through such a rank scores -inf, and the heap
pops equal scores in lexicographic rank-tuple order, so the torch beam must not prune a -inf
candidate by its beam position, and both builders must treat NaN as -inf whatever its sign
bit (sorts and the kernel's keys would otherwise put it first or last by that bit).
"""

from __future__ import annotations

import heapq
import math
import random

import pytest
import torch
from _kernel_helpers import draft_logits_case, interpreted_copy

# the torch twin of the fused top-K (v2/v3)
pytestmark = pytest.mark.needs("_topk_from_logits_torch")

TREE_FIELDS = ("node_token_ids", "depths", "parents", "num_nodes", "visibility")


def heap_with_kernel_sums(log_probs, token_ids, budget):
    """The best-first heap, a child scored as its parent's score plus its log-prob (the sums
    both builders form), NaN as -inf; equal scores pop the smaller rank tuple first."""
    rows = [[float("-inf") if math.isnan(v) else float(v) for v in row] for row in log_probs]
    topk = min(len(rows[0]), budget)
    tokens, depths, parents = [], [], [-1]
    heap = [(-rows[0][0], (0,), 0, 1, 0, 0.0)]
    while heap and len(tokens) < budget:
        negative, ranks, parent, depth, rank, base = heapq.heappop(heap)
        tokens.append(int(token_ids[depth - 1][rank]))
        depths.append(depth)
        parents.append(parent)
        if rank + 1 < topk:
            score = base + rows[depth - 1][rank + 1]
            heapq.heappush(heap, (-score, ranks[:-1] + (rank + 1,), parent, depth, rank + 1, base))
        if depth < len(rows):
            score = -negative + rows[depth][0]
            heapq.heappush(heap, (-score, ranks + (0,), len(tokens), depth + 1, 0, -negative))
    return tokens, depths, parents


def neg_inf_top_k(rng: random.Random, gen: torch.Generator, kind: int):
    """Sorted top-K log-probs with long -inf tails; ``kind`` adds all -inf first depths,
    finite heads (many -inf ties at the budget boundary) or NaN rows."""
    bs, depth, k = rng.choice((1, 3)), rng.randint(1, 9), rng.choice((1, 2, 3, 5, 8))
    budget = rng.choice((1, 2, 5, 9, 16, 31, 40))
    lp = torch.sort(-torch.rand(bs, depth, k, generator=gen).mul(3).floor().div(2), dim=-1, descending=True).values
    masked = torch.rand(bs, depth, k, generator=gen) < rng.choice((0.2, 0.5, 0.8))
    lp = torch.where(masked.cumsum(-1) > 0, float("-inf"), lp)
    if kind == 1:
        lp[:, 0] = float("-inf")
    elif kind == 2:
        lp[:, :, 0] = torch.where(lp[:, :, 0] == float("-inf"), 0.0, lp[:, :, 0])
    elif kind == 3:
        lp = torch.where(torch.rand(bs, depth, 1, generator=gen) < 0.2, float("nan"), lp)
    elif kind == 4:
        lp[...] = float("-inf")
    ids = torch.argsort(torch.rand(bs, depth, k, generator=gen), dim=-1)
    return lp.float(), ids, budget


def failing_round_top_k(module):
    """test_draft_round_equals_torch_path[neg_inf] case 0: (64, 12, 3), B = 31, whose rows 17
    and 40 differed on an H200 (all -inf rows give NaN log-probs)."""
    logits = draft_logits_case("neg_inf", (64, 12, 3), torch.Generator().manual_seed(5))
    return (*module._topk_from_logits_torch(logits, 3), 31)


def assert_tree_is_heap(tree, lp, ids, budget, where):
    for b in range(lp.shape[0]):
        tokens, depths, parents = heap_with_kernel_sums(lp[b].tolist(), ids[b].tolist(), budget)
        n = len(tokens)
        assert int(tree.num_nodes[b]) == n, where
        assert tree.node_token_ids[b, :n].tolist() == tokens, (where, b)
        assert tree.depths[b, :n].tolist() == depths, (where, b)
        assert tree.parents[b, : n + 1].tolist() == parents, (where, b)


def test_torch_builder_pops_neg_inf_ties_like_the_heap(ddtree_utils, monkeypatch):
    """Both torch sorts (the CPU select-then-sort and the full sort CUDA uses)."""
    cases = [failing_round_top_k(ddtree_utils)]
    rng, gen = random.Random(11), torch.Generator().manual_seed(11)
    cases += [neg_inf_top_k(rng, gen, i % 5) for i in range(300)]
    for sort in (ddtree_utils._top_by_select_then_sort, ddtree_utils._top_by_full_sort):
        monkeypatch.setattr(ddtree_utils, "_top_by_score_then_position", sort)
        for i, (lp, ids, budget) in enumerate(cases):
            tree = ddtree_utils._build_tree_torch(lp, ids, budget)
            assert_tree_is_heap(tree, lp, ids, budget, f"{sort.__name__} case {i}")


def test_nan_log_probs_build_the_same_tree_as_neg_inf(ddtree_utils):
    lp, ids, budget = failing_round_top_k(ddtree_utils)
    assert bool(lp.isnan().any())
    as_neg_inf = ddtree_utils._build_tree_torch(torch.where(lp.isnan(), float("-inf"), lp), ids, budget)
    for bits in (0x7FFFFFFF, -1):  # +NaN and -NaN
        nan = torch.tensor(bits, dtype=torch.int32).view(torch.float32)
        tree = ddtree_utils._build_tree_torch(torch.where(lp.isnan(), nan, lp), ids, budget)
        for field in TREE_FIELDS:
            assert torch.equal(getattr(tree, field), getattr(as_neg_inf, field)), (bits, field)


def test_heap_kernel_neg_inf_ties_under_triton_interpreter(ddtree_utils, monkeypatch):
    module = interpreted_copy(ddtree_utils, monkeypatch, triton_on_cpu=False)
    lp, ids, budget = failing_round_top_k(ddtree_utils)
    rows = [17, 40]  # the rows that differed on the H200 (each a program: the interpreter runs them one by one)
    cases = [(lp[rows], ids[rows], budget)]
    for bits in (0x7FFFFFFF, -1):  # the kernel reads the NaN's sign bit: both must give -inf's tree
        nan = torch.tensor(bits, dtype=torch.int32).view(torch.float32)
        cases.append((torch.where(lp[rows].isnan(), nan, lp[rows]), ids[rows], budget))
    rng, gen = random.Random(12), torch.Generator().manual_seed(12)
    cases += [neg_inf_top_k(rng, gen, i % 5) for i in range(6)]
    for i, (x, y, b) in enumerate(cases):
        fast = module._build_tree_triton(x, y, b)
        slow = ddtree_utils._build_tree_torch(x, y, b)
        for field in TREE_FIELDS:
            assert torch.equal(getattr(fast, field), getattr(slow, field)), (i, field, x.tolist(), b)
