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


def model(**fields):
    """The ModelConfig fields the default-backend choice reads: a dense Qwen3 unless told otherwise."""
    values = dict(has_attention_sinks=False, is_local_attention_model=False, sliding_window_size=None,
                  hf_text_config=SimpleNamespace(), hf_config=SimpleNamespace(architectures=["Qwen3ForCausalLM"]),
                  has_asymmetric_kv=False)
    values.update(fields)
    return SimpleNamespace(**values)


@pytest.fixture
def gpu(monkeypatch):
    """Which GPU family the default-backend choice sees: 'hopper' (H100/H200), 'sm120' (RTX PRO 6000)."""
    from sglang.srt import server_args as server_args_mod

    def set_family(family: str) -> None:
        monkeypatch.setattr(server_args_mod, "is_hopper_with_cuda_12_3", lambda: family == "hopper")
        monkeypatch.setattr(server_args_mod, "is_sm100_supported", lambda *a: False)
        monkeypatch.setattr(server_args_mod, "is_sm120_supported", lambda *a: family == "sm120")
        monkeypatch.setattr(server_args_mod, "is_flashinfer_available", lambda: True)

    return set_family


def test_the_default_attention_backend_of_ddtree_applies_the_tree_mask():
    assert record(speculative_algorithm="ddtree", speculative_eagle_topk=4)._get_default_attn_backend(False, None) \
        == "triton"


def test_ddtree_gets_fa3_on_hopper_where_dflash_does(gpu):
    gpu("hopper")
    assert record(speculative_algorithm="DDTREE")._get_default_attn_backend(False, model()) == "fa3"
    assert record(speculative_algorithm="DFLASH", speculative_eagle_topk=1)._get_default_attn_backend(
        False, model()) == "fa3"


@pytest.mark.parametrize(("mla", "fields"), [
    (True, {}),  # MLA: the fa3 tree verify is dense MHA only
    (False, {"sliding_window_size": 4096}),  # a model that uses a sliding window
    (False, {"is_local_attention_model": True}),
    (False, {"has_attention_sinks": True}),
])
def test_on_hopper_a_model_the_fa3_tree_verify_does_not_cover_gets_triton(gpu, mla, fields):
    gpu("hopper")
    assert record(speculative_algorithm="DDTREE")._get_default_attn_backend(mla, model(**fields)) == "triton"


def test_a_sliding_window_the_model_does_not_use_keeps_fa3(gpu):
    gpu("hopper")  # Qwen2.5-style configs name a window and switch it off
    config = model(sliding_window_size=131072, hf_text_config=SimpleNamespace(use_sliding_window=False))
    assert record(speculative_algorithm="DDTREE")._get_default_attn_backend(False, config) == "fa3"


def test_on_an_rtx_pro_6000_ddtree_gets_triton_while_dflash_gets_flashinfer(gpu):
    # sm120: DFLASH's default is flashinfer (trtllm_mha does not run there); flashinfer plans every
    # verify on the host and trtllm_mha's XQA path has no tree mask, so DDTREE takes triton, and both
    # are refused when named.
    gpu("sm120")
    assert record(speculative_algorithm="DFLASH", speculative_eagle_topk=1)._get_default_attn_backend(
        False, model()) == "flashinfer"
    assert record(speculative_algorithm="DDTREE")._get_default_attn_backend(False, model()) == "triton"
    for named in ("flashinfer", "trtllm_mha"):
        with pytest.raises(ValueError, match="does not apply the tree mask"):
            speculative_hook._check_ddtree_attention_backends(record(attention_backend=named, page_size=1))


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


@pytest.mark.parametrize("backend", ["triton", "fa3"])
def test_triton_or_fa3_on_both_roles_applies_the_tree_mask(monkeypatch, backend):
    monkeypatch.setattr(ServerArgs, "use_mla_backend", lambda self: False)  # a dense model (no config here)
    speculative_hook._check_ddtree_attention_backends(record(attention_backend=backend, page_size=1))


@pytest.mark.parametrize(("blackwell", "mla", "message"), [
    (True, False, "'fa3' does not run on Blackwell GPUs"),
    (False, True, "verifies the tree of dense (MHA) models only"),
])
def test_fa3_is_refused_where_its_tree_verify_cannot_run(monkeypatch, blackwell, mla, message):
    from sglang.srt import server_args as server_args_mod

    monkeypatch.setattr(server_args_mod, "is_blackwell_supported", lambda: blackwell)
    monkeypatch.setattr(ServerArgs, "use_mla_backend", lambda self: mla)
    with pytest.raises(ValueError, match="pass --attention-backend triton") as refused:
        speculative_hook._check_ddtree_attention_backends(record(attention_backend="fa3", page_size=1))
    assert message in str(refused.value)


@pytest.mark.parametrize(("fields", "message"), [
    ({"attention_backend": "trtllm_mha"}, "prefill attention backend 'trtllm_mha' does not apply the tree mask"),
    ({"attention_backend": "triton", "decode_attention_backend": "flashinfer"},
     "decode attention backend 'flashinfer' does not apply the tree mask"),
    ({"attention_backend": "triton", "page_size": 16}, "requires --page-size 1"),
])
def test_a_backend_or_page_size_that_drops_the_tree_mask_is_refused(fields, message):
    with pytest.raises(ValueError) as raised:
        speculative_hook._check_ddtree_attention_backends(record(**fields))
    assert message in str(raised.value)
