"""Positions, flat masks, EAGLE retrieve tensors, the verify walk and target sampling."""

from __future__ import annotations

import pytest
import torch

import ddtree_heap_reference as ref


def random_tree(ddtree_utils, bs=4, depth=5, vocab=9, budget=20, seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randint(-3, 3, (bs, depth, vocab), generator=gen).float()
    top = ddtree_utils.ddtree_topk_from_logits(logits.to(device), min(budget, vocab))
    return ddtree_utils.build_ddtree_tree_from_topk(*top, budget)


def test_positions_are_seq_len_plus_depth(ddtree_utils, device):
    tree = random_tree(ddtree_utils, device=device)
    seq_lens = torch.tensor([3, 0, 17, 5], device=device)
    positions = ddtree_utils.ddtree_positions(tree, seq_lens).cpu()
    for b, seq_len in enumerate(seq_lens.tolist()):
        depths = [0] + tree.depths[b].tolist()
        assert positions[b].tolist() == [seq_len + d for d in depths]


def test_custom_mask_is_flattened_full_mask(ddtree_utils, device):
    # A lattice smaller than the budget also puts padding rows in the mask.
    tree = random_tree(ddtree_utils, bs=3, depth=2, vocab=3, budget=14, device=device)
    seq_lens = torch.tensor([4, 0, 9], device=device)
    mask = ddtree_utils.ddtree_custom_mask(tree, seq_lens, int(seq_lens.sum()))
    n = tree.num_verify_tokens
    blocks = []
    for b, seq_len in enumerate(seq_lens.tolist()):
        parents = tree.parents[b].tolist()[: int(tree.num_nodes[b]) + 1]
        block = torch.zeros(n, seq_len + n, dtype=torch.bool)
        block[:, :seq_len] = True
        block[:, seq_len:] = torch.eye(n, dtype=torch.bool)  # padding rows: self only
        block[: len(parents), seq_len : seq_len + len(parents)] = ref.visibility(parents)
        blocks.append(block.flatten())
    assert mask.dtype == torch.bool
    assert torch.equal(mask.cpu(), torch.cat(blocks))


def test_retrieve_tensors_are_left_child_right_sibling(ddtree_utils, device):
    tree = random_tree(ddtree_utils, bs=3, depth=2, vocab=3, budget=14, device=device)
    index, next_token, next_sibling = (t.cpu() for t in ddtree_utils.ddtree_retrieve_tensors(tree))
    n = tree.num_verify_tokens
    for b in range(tree.batch_size):
        parents = tree.parents[b].tolist()
        kids = ref.children(parents)
        assert index[b].tolist() == [b * n + i for i in range(n)]
        for node in range(n):
            assert next_token[b, node] == (min(kids[node]) if kids[node] else -1)
            siblings = sorted(kids[parents[node]]) if parents[node] >= 0 else [node]
            later = siblings[siblings.index(node) + 1 :]
            assert next_sibling[b, node] == (later[0] if later else -1)


def test_follow_verified_matches_reference_walk(ddtree_utils, device):
    gen = torch.Generator().manual_seed(3)
    for seed in range(12):
        tree = random_tree(
            ddtree_utils, bs=6, depth=6, vocab=4, budget=30, seed=seed, device=device
        )
        # Target tokens drawn from the tree's own tokens, so long walks happen.
        target = torch.randint(0, 4, (6, tree.num_verify_tokens), generator=gen)
        accept_index, accept_length, bonus = (
            t.cpu() for t in ddtree_utils.ddtree_follow_verified(tree, target.to(device))
        )
        assert accept_index.shape == (6, 7)
        for b in range(6):
            tokens = tree.node_token_ids[b].tolist()
            path, expected_bonus = ref.follow(tokens, tree.parents[b].tolist(), target[b].tolist())
            assert accept_index[b].tolist() == path + [-1] * (7 - len(path))
            assert int(accept_length[b]) == len(path) - 1
            assert int(bonus[b]) == expected_bonus


def test_follow_verified_accepts_full_depth(ddtree_utils):
    # A chain tree whose tokens the target agrees with everywhere: accept all L.
    log_probs = torch.tensor([[[-0.1, -3.0]] * 4])
    ids = torch.tensor([[[1, 2], [3, 4], [5, 6], [7, 8]]])
    tree = ddtree_utils.build_ddtree_tree_from_topk(log_probs, ids, 4)
    target = torch.tensor([[1, 3, 5, 7, 9]])
    accept_index, accept_length, bonus = ddtree_utils.ddtree_follow_verified(tree, target)
    assert accept_index.tolist() == [[0, 1, 2, 3, 4]]
    assert accept_length.tolist() == [4] and bonus.tolist() == [9]


def test_greedy_sampling_is_argmax(ddtree_utils, device):
    logits = torch.randn(3, 5, 11, device=device)
    tokens = ddtree_utils.ddtree_sample_target_tokens(logits, torch.tensor([0.0, 1e-6, 0.0]))
    assert torch.equal(tokens, logits.argmax(-1))


def test_sampling_follows_tempered_softmax(ddtree_utils):
    gen = torch.Generator().manual_seed(0)
    logits = torch.tensor([[[2.0, 1.0, 0.0, -1.0]]]).expand(4000, 1, 4).contiguous()
    for temperature in (0.5, 1.0, 2.0):
        temps = torch.full((4000,), temperature)
        tokens = ddtree_utils.ddtree_sample_target_tokens(logits, temps, generator=gen)
        counts = torch.bincount(tokens.flatten(), minlength=4).double()
        expected = torch.softmax(logits[0, 0].double() / temperature, -1) * 4000
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        p_value = float(torch.special.gammaincc(torch.tensor(1.5), torch.tensor(chi2 / 2)))
        assert p_value > 1e-3, (temperature, counts.tolist(), expected.tolist())


def test_sampling_mixes_greedy_and_sampled_requests(ddtree_utils):
    logits = torch.randn(2, 64, 5)
    tokens = ddtree_utils.ddtree_sample_target_tokens(logits, torch.tensor([0.0, 5.0]))
    assert torch.equal(tokens[0], logits[0].argmax(-1))
    assert not torch.equal(tokens[1], logits[1].argmax(-1))  # T=5 over 64 nodes
