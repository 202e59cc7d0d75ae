"""Small CPU paths of the set that the round and kernel tests do not reach: the DDTREE branches of the
attention-backend defaults (server args: fa3 on Hopper for dense MHA models, triton elsewhere;
deterministic inference), the draft top-K head's CUDA-graph
tail hook run eagerly, and the refusals of the round and the request gate.

Each runs the patched tree's own function; only its inputs are built here.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

worker_mod = pytest.importorskip("sglang.srt.speculative.ddtree_worker_v2")
from sglang.srt.arg_groups import model_override_base, overrides  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative import ddtree_utils  # noqa: E402


@pytest.mark.parametrize(("algorithm", "asked"), [("DDTREE", True), ("ddtree", True), ("DFLASH", False), (None, False)])
def test_ddtree_is_recognised_before_the_hook_normalises_its_name(algorithm, asked):
    assert model_override_base.is_ddtree_requested(SimpleNamespace(speculative_algorithm=algorithm)) is asked


@pytest.mark.parametrize("use_mla", [False, True])
def test_the_default_attention_backend_of_ddtree_applies_the_tree_mask(use_mla):
    record = ServerArgs(model_path="toy", speculative_algorithm="ddtree", speculative_eagle_topk=1)
    assert model_override_base.get_default_attn_backend(record, use_mla, None) == "triton"


def model(**fields):
    """The ModelConfig fields the default-backend choice reads: a dense Qwen3 unless told otherwise."""
    values = dict(has_attention_sinks=False, is_local_attention_model=False, sliding_window_size=None,
                  hf_text_config=SimpleNamespace(), hf_config=SimpleNamespace(architectures=["Qwen3ForCausalLM"]),
                  has_asymmetric_kv=False)
    values.update(fields)
    return SimpleNamespace(**values)


def gpu(family: str):
    """The GPU family the default-backend choice sees (0.5.23 reads it from the platform context):
    'hopper' (H100 / H200) or 'sm120' (RTX PRO 6000)."""
    from sglang.srt.runtime_context import override_platform

    return override_platform(is_hopper_with_cuda_12_3=family == "hopper", is_sm100=False,
                             is_sm120=family == "sm120", is_blackwell=family == "sm120", is_hip=False,
                             has_flashinfer=True)


def default_backend(algorithm: str, mla: bool = False, config=None, **fields) -> str:
    record = ServerArgs(model_path="toy", speculative_algorithm=algorithm, **fields)
    return model_override_base.get_default_attn_backend(record, mla, config if config is not None else model())


def test_ddtree_gets_fa3_on_hopper_where_dflash_does():
    with gpu("hopper"):
        assert default_backend("DDTREE") == "fa3"
        assert default_backend("DFLASH", speculative_eagle_topk=1) == "fa3"


@pytest.mark.parametrize(("mla", "fields"), [
    (True, {}),  # MLA: the fa3 tree verify is dense MHA only
    (False, {"sliding_window_size": 4096}),  # a model that uses a sliding window
    (False, {"is_local_attention_model": True}),
    (False, {"has_attention_sinks": True}),
])
def test_on_hopper_a_model_the_fa3_tree_verify_does_not_cover_gets_triton(mla, fields):
    with gpu("hopper"):
        assert default_backend("DDTREE", mla, model(**fields)) == "triton"


def test_a_sliding_window_the_model_does_not_use_keeps_fa3():
    # Qwen2.5-style configs name a window and switch it off
    config = model(sliding_window_size=131072, hf_text_config=SimpleNamespace(use_sliding_window=False))
    with gpu("hopper"):
        assert default_backend("DDTREE", False, config) == "fa3"


def test_on_an_rtx_pro_6000_ddtree_gets_triton_while_dflash_gets_flashinfer():
    # sm120: DFLASH's default is flashinfer; flashinfer plans every verify on the host and trtllm_mha's
    # XQA path has no tree mask, so DDTREE takes triton (both are refused when named: the hook's tests)
    with gpu("sm120"):
        assert default_backend("DFLASH", speculative_eagle_topk=1) == "flashinfer"
        assert default_backend("DDTREE") == "triton"


def test_deterministic_inference_without_a_backend_falls_back_to_triton_for_ddtree():
    view = SimpleNamespace(enable_deterministic_inference=True, attention_backend=None, speculative_algorithm="DDTREE")
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


def test_a_request_asking_for_the_sampling_mask_is_refused():
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.speculative.ddtree_info_v2 import validate_ddtree_request

    req = Req("r", "", [1, 2, 3], SamplingParams(max_new_tokens=4), vocab_size=100)
    assert validate_ddtree_request(req) is None
    req.return_sampling_mask = True
    assert "return_sampling_mask" in validate_ddtree_request(req)
