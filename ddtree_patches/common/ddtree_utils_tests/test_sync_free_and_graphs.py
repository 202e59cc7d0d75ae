"""GPU-only properties: no host synchronisation, and CUDA graph capture and replay."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


def round_inputs(ddtree_utils, cuda, seed, bs=16, depth=15, vocab=4099, budget=64):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(bs, depth, vocab, generator=gen) * 4).bfloat16().to(cuda)
    top = ddtree_utils.ddtree_topk_from_logits(logits, budget)
    target_logits = torch.randn(bs, budget + 1, 64, generator=gen).to(cuda)
    return top, target_logits


def one_round(ddtree_utils, top, target_logits, temperatures, budget=64):
    tree = ddtree_utils.build_ddtree_tree_from_topk(*top, budget)
    seq_lens = torch.arange(tree.batch_size, device=top[0].device) * 7 + 3
    positions = ddtree_utils.ddtree_positions(tree, seq_lens)
    retrieve = ddtree_utils.ddtree_retrieve_tensors(tree)
    target = ddtree_utils.ddtree_sample_target_tokens(target_logits, temperatures)
    walk = ddtree_utils.ddtree_follow_verified(tree, target)
    return (tree.node_token_ids, tree.parents, tree.visibility, positions, *retrieve, *walk)


def test_per_round_functions_never_synchronise(ddtree_utils, cuda):
    top, target_logits = round_inputs(ddtree_utils, cuda, 0)
    temperatures = torch.zeros(16, device=cuda)
    one_round(ddtree_utils, top, target_logits, temperatures)  # warm-up: constants
    logits = torch.randn(16, 15, 4099, device=cuda)
    seq_lens = torch.arange(16, device=cuda) + 5
    seq_lens_sum = sum(range(5, 21))
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        one_round(ddtree_utils, top, target_logits, temperatures)
        ddtree_utils.ddtree_topk_from_logits(logits, 64)
        tree = ddtree_utils.build_ddtree_tree_from_topk(*top, 64)
        ddtree_utils.ddtree_custom_mask(tree, seq_lens, seq_lens_sum)
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def test_round_is_cuda_graph_capturable(ddtree_utils, cuda):
    top, target_logits = round_inputs(ddtree_utils, cuda, 1)
    static_top = tuple(t.clone() for t in top)
    static_logits = target_logits.clone()
    temperatures = torch.zeros(16, device=cuda)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up off the capture
            one_round(ddtree_utils, static_top, static_logits, temperatures)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = one_round(ddtree_utils, static_top, static_logits, temperatures)

    for seed in (2, 3, 4):
        new_top, new_logits = round_inputs(ddtree_utils, cuda, seed)
        for static, fresh in zip(static_top, new_top):
            static.copy_(fresh)
        static_logits.copy_(new_logits)
        graph.replay()
        eager = one_round(ddtree_utils, new_top, new_logits, temperatures)
        for replayed, expected in zip(captured, eager):
            assert torch.equal(replayed, expected)
