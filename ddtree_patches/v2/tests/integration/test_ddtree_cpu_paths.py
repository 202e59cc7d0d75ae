"""Small CPU paths of the set that the round and kernel tests do not reach: the DDTREE branches of the
attention-backend defaults (server args, deterministic inference), the draft top-K head's CUDA-graph
tail hook run eagerly, and the refusal of the round.

Each runs the patched tree's own function; only its inputs are built here.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

worker_mod = pytest.importorskip("sglang.srt.speculative.ddtree_worker_v2")
from sglang.srt.arg_groups import overrides, speculative_hook  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative import ddtree_utils  # noqa: E402


def record(**fields) -> ServerArgs:
    """A 0.5.17 ServerArgs with fields set directly (its resolution needs a model and a GPU)."""
    out = object.__new__(ServerArgs)
    for field in dataclasses.fields(ServerArgs):
        if field.default_factory is not dataclasses.MISSING:  # defaults that are not class attributes
            setattr(out, field.name, field.default_factory())
    for name, value in fields.items():
        setattr(out, name, value)
    return out


@pytest.mark.parametrize(("algorithm", "asked"), [("DDTREE", True), ("ddtree", True), ("DFLASH", False), (None, False)])
def test_ddtree_is_recognised_before_the_hook_normalises_its_name(algorithm, asked):
    assert record(speculative_algorithm=algorithm)._is_ddtree_requested() is asked


def test_the_default_attention_backend_of_ddtree_applies_the_tree_mask():
    assert record(speculative_algorithm="ddtree", speculative_eagle_topk=4)._get_default_attn_backend(False, None) \
        == "triton"


def test_deterministic_inference_without_a_backend_falls_back_to_triton_for_ddtree():
    view = record(enable_deterministic_inference=True, attention_backend=None, speculative_algorithm="DDTREE")
    assert overrides._deterministic_attention_backend(view) == {"attention_backend": "triton"}


def test_the_tail_hook_writes_what_compute_returns_into_its_static_buffers():
    vocab, block, bs, k = 7, 3, 2, 2
    head = worker_mod._DDTreeDraftTopK(weight=torch.eye(vocab), num_org=vocab, num_org_padded=vocab, org_vocab_start=0,
                                       block_size=block, topk=k, max_bs=bs)
    hidden = torch.randn(bs * block, vocab, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    head(hidden)  # a float64 input is cast to the head's dtype first
    rows = hidden.view(bs, block, vocab)[:, 1:, :].reshape(-1, vocab).float()
    expected = torch.log_softmax(rows, dim=-1).topk(k, dim=-1)
    n = bs * (block - 1)
    assert torch.equal(head.top_token_ids[:n], expected.indices)
    torch.testing.assert_close(head.top_log_probs[:n], expected.values)


def test_a_round_without_a_mask_buffer_or_its_host_size_is_refused():
    top_log_probs, top_ids = torch.zeros(1, 2, 2), torch.zeros(1, 2, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="needs seq_lens_sum"):
        ddtree_utils.ddtree_tree_round(top_log_probs, top_ids, 2, torch.tensor([3]))


def test_a_tree_reports_its_budget_from_its_node_rows():
    top_log_probs = torch.log_softmax(torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(1)), dim=-1)
    top_log_probs, order = top_log_probs.sort(dim=-1, descending=True)
    tree = ddtree_utils.build_ddtree_tree_from_topk(top_log_probs, order, 5)
    assert tree.budget == 5 and tree.node_token_ids.shape == (1, 5)



def test_a_plain_configuration_has_no_unsupported_feature():
    speculative_hook._check_ddtree_unsupported_features(record())


@pytest.mark.parametrize(("fields", "flag"), [
    ({"pp_size": 2}, "--pp-size > 1"),
    ({"speculative_adaptive": True}, "--speculative-adaptive"),
    ({"speculative_use_rejection_sampling": True}, "--speculative-use-rejection-sampling"),
    ({"speculative_accept_threshold_acc": 0.5}, "--speculative-accept-threshold-single/-acc"),
    ({"speculative_draft_window_size": 8}, "--speculative-draft-window-size"),
])
def test_features_the_tree_verify_cannot_serve_are_refused(fields, flag):
    with pytest.raises(ValueError, match="does not support") as raised:
        speculative_hook._check_ddtree_unsupported_features(record(**fields))
    assert flag in str(raised.value)


def test_triton_on_both_roles_applies_the_tree_mask():
    speculative_hook._check_ddtree_attention_backends(record(attention_backend="triton", page_size=1))


@pytest.mark.parametrize(("fields", "message"), [
    ({"attention_backend": "fa3"}, "prefill attention backend 'fa3' does not apply the tree mask"),
    ({"attention_backend": "triton", "decode_attention_backend": "flashinfer"},
     "decode attention backend 'flashinfer' does not apply the tree mask"),
    ({"attention_backend": "triton", "page_size": 16}, "requires --page-size 1"),
])
def test_a_backend_or_page_size_that_drops_the_tree_mask_is_refused(fields, message):
    with pytest.raises(ValueError) as raised:
        speculative_hook._check_ddtree_attention_backends(record(**fields))
    assert message in str(raised.value)
