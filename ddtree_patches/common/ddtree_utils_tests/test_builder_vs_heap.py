"""The batched tree builder against the reference best-first heap, bit for bit."""

from __future__ import annotations

import dataclasses
import random
from typing import Iterator, Tuple

import pytest
import torch

import ddtree_heap_reference as ref
from _kernel_helpers import as_if_cuda

BATCH = 8
BUDGETS = (1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 200, 256)
LARGE_BUDGETS = (512, 1024)
VOCABS = (7, 8, 11, 23, 50, 300, 1000)


def draft_logits(regime: str, shape: Tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Draft logits of one regime; several of them make exact score ties likely."""
    if regime == "gaussian":
        sigma = float(torch.tensor([1.0, 3.0, 8.0])[torch.randint(3, (1,), generator=gen)])
        return torch.randn(shape, generator=gen) * sigma
    if regime == "spiky":
        logits = torch.randn(shape, generator=gen)
        spikes = torch.randint(shape[-1], shape[:-1] + (3,), generator=gen)
        boost = torch.rand(shape[:-1] + (3,), generator=gen) * 12
        return logits.scatter_add(-1, spikes, boost)
    if regime == "integer":
        return torch.randint(-3, 3, shape, generator=gen).float()
    if regime == "bf16":
        return (torch.randn(shape, generator=gen) * 6).bfloat16().float()
    if regime == "saturated":
        # The top token dominates so strongly that its fp32 log-prob is exactly 0.
        logits = torch.randint(-2, 1, shape, generator=gen).float()
        top = torch.randint(shape[-1], shape[:-1] + (1,), generator=gen)
        saturate = torch.rand(shape[:-1] + (1,), generator=gen) < 0.7
        return logits.scatter(-1, top, torch.where(saturate, 200.0, 1.0))
    raise ValueError(regime)


def random_batches(regime: str, seed: int, count: int) -> Iterator[Tuple[torch.Tensor, int]]:
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    for _ in range(count):
        budget = rng.choice(LARGE_BUDGETS) if rng.random() < 0.04 else rng.choice(BUDGETS)
        depth = rng.randint(1, 15)
        vocab = rng.choice(VOCABS)
        yield draft_logits(regime, (BATCH, depth, vocab), gen), budget


def assert_matches_heap(
    tree, log_probs: torch.Tensor, token_ids: torch.Tensor, budget: int
) -> None:
    assert tree.node_token_ids.shape == (log_probs.shape[0], budget)
    assert tree.parents.shape == (log_probs.shape[0], budget + 1)
    assert tree.visibility.shape == (log_probs.shape[0], budget + 1, budget + 1)
    for b in range(log_probs.shape[0]):
        expected = ref.heap_tree(log_probs[b].tolist(), token_ids[b].tolist(), budget)
        n = len(expected.tokens)
        padding = budget - n
        assert int(tree.num_nodes[b]) == n
        assert tree.node_token_ids[b].tolist() == expected.tokens + [0] * padding
        assert tree.depths[b].tolist() == expected.depths + [0] * padding
        assert tree.parents[b].tolist() == expected.parents + [-1] * padding
        valid = ref.visibility(expected.parents)
        assert torch.equal(tree.visibility[b, : n + 1, : n + 1], valid)
        # Padding rows see only themselves; nothing sees them.
        assert torch.equal(
            tree.visibility[b, n + 1 :], torch.eye(budget + 1, dtype=torch.bool)[n + 1 :]
        )
        assert not tree.visibility[b, : n + 1, n + 1 :].any()


REGIMES = ("gaussian", "spiky", "integer", "bf16", "saturated")


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("seed", [0, 1])
def test_builder_is_bit_identical_to_heap(ddtree_utils, regime, seed):
    # 5 regimes x 2 seeds x 32 batches x 8 requests = 2560 random trees.
    for logits, budget in random_batches(regime, seed * 1000 + REGIMES.index(regime), 32):
        k = min(budget, logits.shape[-1])
        log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(logits, k)
        tree = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, budget)
        assert_matches_heap(tree, log_probs, token_ids, budget)


def test_tie_regimes_really_tie(ddtree_utils):
    # Guard the corpus: the tie regimes must produce equal scores at the cut,
    # or the suite would not exercise the lexicographic tie-break at all.
    tied = 0
    for logits, budget in random_batches("integer", 7, 16):
        log_probs, _ = ddtree_utils.ddtree_topk_from_logits(logits, min(budget, logits.shape[-1]))
        tied += int((log_probs[..., 1:] == log_probs[..., :-1]).any())
    assert tied >= 8


def test_full_vocabulary_sizes(ddtree_utils):
    gen = torch.Generator().manual_seed(5)
    for regime, budget in (("bf16", 16), ("gaussian", 512), ("saturated", 64)):
        logits = draft_logits(regime, (2, 3, 151936), gen)
        log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(logits, budget)
        tree = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, budget)
        assert_matches_heap(tree, log_probs, token_ids, budget)


def test_exactly_saturated_log_probs(ddtree_utils):
    # Every depth's top token has log-prob exactly 0.0: the whole top-1 chain
    # ties with the root's first child and must pop shallowest first.
    log_probs = torch.tensor([[[0.0, -1.0, -1.0], [0.0, -1.0, -2.0], [0.0, 0.0, -1.0]]])
    token_ids = torch.tensor([[[5, 6, 7], [8, 9, 10], [11, 12, 13]]])
    for budget in range(1, 14):
        tree = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, budget)
        assert_matches_heap(tree, log_probs, token_ids, budget)
    tree = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, 4)
    assert tree.node_token_ids[0].tolist() == [5, 8, 11, 12]
    assert tree.parents[0].tolist() == [-1, 0, 1, 2, 2]


def test_lattice_smaller_than_budget_is_padded(ddtree_utils):
    log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(torch.randn(3, 2, 3), 3)
    tree = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, 20)
    assert tree.num_nodes.tolist() == [12, 12, 12]  # 3 + 3 * 3 prefixes
    assert_matches_heap(tree, log_probs, token_ids, 20)


def test_extra_ranks_beyond_budget_are_ignored(ddtree_utils):
    logits = draft_logits("integer", (4, 6, 40), torch.Generator().manual_seed(3))
    wide = ddtree_utils.ddtree_topk_from_logits(logits, 40)
    narrow = ddtree_utils.ddtree_topk_from_logits(logits, 9)
    a = ddtree_utils.build_ddtree_tree_from_topk(*wide, 9)
    b = ddtree_utils.build_ddtree_tree_from_topk(*narrow, 9)
    assert torch.equal(a.node_token_ids, b.node_token_ids)
    assert torch.equal(a.parents, b.parents)


def test_zero_budget_is_root_only(ddtree_utils):
    log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(torch.randn(2, 4, 9), 4)
    tree = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, 0)
    assert tree.parents.tolist() == [[-1], [-1]]
    assert tree.visibility.tolist() == [[[True]], [[True]]]
    assert tree.num_nodes.tolist() == [0, 0]


def test_builder_runs_on_every_device(ddtree_utils, device):
    logits = draft_logits("bf16", (BATCH, 15, 300), torch.Generator().manual_seed(11))
    log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(logits.to(device), 64)
    tree = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, 64)
    assert tree.parents.device.type == device.type
    on_cpu = dataclasses.replace(
        tree, **{name: value.cpu() for name, value in vars(tree).items() if torch.is_tensor(value)}
    )
    assert_matches_heap(on_cpu, log_probs.cpu(), token_ids.cpu(), 64)


@pytest.mark.gpu
@pytest.mark.parametrize("regime", REGIMES)
def test_gpu_builder_equals_cpu_builder(ddtree_utils, cuda, regime):
    for logits, budget in random_batches(regime, 99, 24):
        k = min(budget, logits.shape[-1])
        log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(logits, k)
        on_cpu = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, budget)
        on_gpu = ddtree_utils.build_ddtree_tree_from_topk(
            log_probs.to(cuda), token_ids.to(cuda), budget
        )
        for field in ("node_token_ids", "depths", "parents", "num_nodes", "visibility"):
            assert torch.equal(getattr(on_gpu, field).cpu(), getattr(on_cpu, field)), field


def test_cuda_scores_take_the_full_sort_and_choose_what_the_cpu_chooses(ddtree_utils):
    """The beam's selection: CUDA scores take one stable full sort, CPU scores select then sort; both
    choose the same entries in the same order, ties by position (here on a CPU: a tensor that says it is
    a CUDA tensor takes the CUDA branch, whose torch ops run anywhere)."""
    gen = torch.Generator().manual_seed(4)
    for width in (1, 3, 8, 20):
        score = torch.randint(-3, 2, (5, 20), generator=gen).float()  # many ties
        score[0] = float("-inf")
        chosen, rank = ddtree_utils._top_by_score_then_position(as_if_cuda(score), width)
        want_chosen, want_rank = ddtree_utils._top_by_select_then_sort(score, width)
        assert torch.equal(chosen, want_chosen) and torch.equal(rank, want_rank), width
