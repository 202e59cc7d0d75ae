"""Cutting a built tree to a smaller budget and its expected accepts (``ddtree_truncate_tree``,
``ddtree_expected_accepts``: what ``--speculative-ddtree-budget auto`` reads), and the torch top-k of
integer logits, on CPU. A tree whose module lacks them skips (pytest.mark.needs)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytestmark = pytest.mark.needs("ddtree_truncate_tree", "ddtree_expected_accepts", "_local_topk_torch")


def _tree(ddtree_utils, budget=8):
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 32)
    log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(logits, budget)
    return ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, budget)


def test_a_cut_to_the_whole_budget_is_the_tree_itself_and_a_cut_outside_it_is_refused(ddtree_utils):
    tree = _tree(ddtree_utils)
    assert ddtree_utils.ddtree_truncate_tree(tree, tree.budget) is tree
    for budget in (0, tree.budget + 1):
        with pytest.raises(ValueError, match=f"cannot cut a tree of {tree.budget} nodes to {budget}"):
            ddtree_utils.ddtree_truncate_tree(tree, budget)
    for budget in range(1, tree.budget):  # every smaller cut keeps exactly its first nodes
        cut = ddtree_utils.ddtree_truncate_tree(tree, budget)
        assert cut.node_token_ids.shape[1] == budget, budget
        assert torch.equal(cut.node_token_ids, tree.node_token_ids[:, :budget])
        assert cut.visibility.shape[1:] == (budget + 1, budget + 1)


def test_expected_accepts_need_the_node_scores(ddtree_utils):
    tree = _tree(ddtree_utils)
    accepts = ddtree_utils.ddtree_expected_accepts(tree, (2, 8))
    assert accepts.shape == (2,) and 0 < float(accepts[0]) <= float(accepts[1])
    blind = dataclasses.replace(ddtree_utils.ddtree_truncate_tree(tree, 4), node_scores=None)
    with pytest.raises(ValueError, match="did not record node scores"):
        ddtree_utils.ddtree_expected_accepts(blind, (2,))


def test_integer_logits_take_the_same_top_k_as_their_float_values(ddtree_utils):
    torch.manual_seed(1)
    logits = torch.randint(-50, 50, (2, 3, 40))
    as_int = ddtree_utils._local_topk_torch(logits, 5, 0, None)
    as_float = ddtree_utils._local_topk_torch(logits.float(), 5, 0, None)
    for a, b in zip(as_int, as_float):
        assert torch.equal(a, b)
