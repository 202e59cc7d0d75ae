"""The speculative hook's DDTREE resolution (``arg_groups/speculative_hook.py``: ``_handle_ddtree``, the
draft config it reads, the features and attention backends it refuses), called in process on a real
0.5.23 ``ServerArgs`` record, on CPU; its decisions are read back through ``resolved_view`` (0.5.23
declares them rather than writing the record). The backend gate runs the same hook through
``ServerArgs`` in a subprocess; this is where its every refusal and derived field is seen line by line.
Also the other DDTREE branches of resolution: the deterministic-inference backend, the draft-parallel
policy and the hidden-state relay."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

hook = pytest.importorskip("sglang.srt.arg_groups.speculative_hook")
from test_ddtree_worker_setup import server_args  # noqa: E402

from sglang.srt.arg_groups.model_override_base import resolved_view  # noqa: E402


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """A draft path that is not a folder is never looked up on the Hub."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def ddtree_args(**fields):
    values = dict(device="cuda", attention_backend="triton", speculative_draft_model_path="/nonexistent/draft",
                  speculative_num_draft_tokens=None, speculative_ddtree_budget=8, speculative_dflash_block_size=4)
    values.update(fields)
    return server_args(**values)


def resolved(args, *names):
    view = resolved_view(args)
    return tuple(getattr(view, name) for name in names)


def test_a_budget_resolves_the_verify_width_the_steps_and_the_children_per_node():
    args = ddtree_args(speculative_num_steps=3, enable_mixed_chunk=True)
    hook._handle_ddtree(args)
    assert resolved(args, "speculative_num_draft_tokens", "speculative_num_steps", "speculative_dflash_block_size",
                    "speculative_eagle_topk", "max_running_requests", "enable_mixed_chunk") == (9, 1, 4, 8, 48, False)
    capped = ddtree_args(speculative_ddtree_topk_cap=2)
    hook._handle_ddtree(capped)
    assert resolved(capped, "speculative_eagle_topk") == (2,)


def test_auto_sizes_everything_for_the_widest_tree():
    from sglang.srt.speculative.ddtree_budget import AUTO_MAX_BLOCKS, auto_verify_widths

    args = ddtree_args(speculative_ddtree_budget="auto")
    hook._handle_ddtree(args)
    widest = auto_verify_widths(4, AUTO_MAX_BLOCKS * 4)[-1]
    assert resolved(args, "speculative_num_draft_tokens", "speculative_eagle_topk") == (widest, widest - 1)


def test_a_draft_without_a_readable_config_takes_the_default_block(caplog):
    args = ddtree_args(speculative_dflash_block_size=None, speculative_ddtree_budget=31)
    with caplog.at_level(logging.WARNING):
        assert hook._ddtree_draft_hf_config(args) is None
        hook._handle_ddtree(args)
    assert resolved(args, "speculative_dflash_block_size") == (16,)
    assert "the block size defaults to 16" in caplog.text


def _draft_checkpoint(folder, architecture="DFlashDraftModel", **dflash_config):
    (folder / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "architectures": [architecture], "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 128, "vocab_size": 100,
        "block_size": 8, "dflash_config": {"block_size": 8, "target_layer_ids": [0], **dflash_config}}))


def test_a_dflash2_drafter_is_refused(tmp_path):
    _draft_checkpoint(tmp_path, architecture=hook.DDTREE_UNSUPPORTED_DRAFT_ARCHITECTURES[0])
    with pytest.raises(ValueError, match="DDTREE does not support DFlash2 drafters"):
        hook._handle_ddtree(ddtree_args(speculative_draft_model_path=str(tmp_path)))


def test_the_draft_block_size_is_read_from_the_draft_checkpoints_config(tmp_path):
    _draft_checkpoint(tmp_path)
    args = ddtree_args(speculative_draft_model_path=str(tmp_path), speculative_dflash_block_size=None)
    assert hook._ddtree_draft_hf_config(args) is not None
    hook._handle_ddtree(args)
    assert resolved(args, "speculative_dflash_block_size", "speculative_num_draft_tokens") == (8, 9)


@pytest.mark.parametrize(("fields", "message"), [
    ({"device": "cpu"}, "only supports CUDA devices"),
    ({"speculative_draft_model_path": None}, "requires setting --speculative-draft-model-path"),
    ({"speculative_ddtree_topk_cap": 0}, "--speculative-ddtree-topk-cap must be >= 1"),
    ({"speculative_dflash_block_size": 1}, "at least 2 tokens"),
    ({"speculative_ddtree_budget": 2}, "budget >= draft block size - 1"),
    ({"speculative_num_draft_tokens": 5}, "derived from the tree budget (B + 1 = 9)"),
    ({"attention_backend": "flashinfer"}, "does not apply the tree mask"),
    ({"page_size": 16}, "requires --page-size 1"),
    ({"speculative_use_rejection_sampling": True}, "does not support --speculative-use-rejection-sampling"),
    ({"pp_size": 2}, "does not support --pp-size > 1"),
])
def test_what_ddtree_cannot_serve_is_refused_naming_the_flag(fields, message):
    with pytest.raises(ValueError) as refused:
        hook._handle_ddtree(ddtree_args(**fields))
    assert message in str(refused.value)


@pytest.mark.parametrize("backend", ["triton", "fa3"])
def test_triton_or_fa3_on_both_roles_applies_the_tree_mask(monkeypatch, backend):
    monkeypatch.setattr(hook, "use_mla_backend", lambda args: False)  # a dense model (no config here)
    hook._check_ddtree_attention_backends(ddtree_args(attention_backend=backend, page_size=1))


@pytest.mark.parametrize(("blackwell", "mla", "message"), [
    (True, False, "'fa3' does not run on Blackwell GPUs"),
    (False, True, "verifies the tree of dense (MHA) models only"),
])
def test_fa3_is_refused_where_its_tree_verify_cannot_run(monkeypatch, blackwell, mla, message):
    from sglang.srt.runtime_context import override_platform

    monkeypatch.setattr(hook, "use_mla_backend", lambda args: mla)
    with override_platform(is_blackwell=blackwell), pytest.raises(ValueError, match="pass --attention-backend triton") \
            as refused:
        hook._check_ddtree_attention_backends(ddtree_args(attention_backend="fa3", page_size=1))
    assert message in str(refused.value)


@pytest.mark.parametrize("named", ["flashinfer", "trtllm_mha"])
def test_on_an_rtx_pro_6000_the_backends_dflash_may_take_are_refused_for_ddtree(named):
    # flashinfer (sm120's default for DFLASH) plans every verify on the host; trtllm_mha, which 0.5.23 runs
    # on sm120, has no tree mask there
    from sglang.srt.runtime_context import override_platform

    with override_platform(is_sm120=True, is_blackwell=True), pytest.raises(ValueError) as refused:
        hook._check_ddtree_attention_backends(ddtree_args(attention_backend=named, page_size=1))
    assert f"attention backend '{named}' does not apply the tree mask" in str(refused.value)
    assert "pass --attention-backend fa3 (Hopper) or triton" in str(refused.value)


@pytest.mark.parametrize(("algorithm", "backend"), [("DDTREE", "triton"), ("EAGLE", "fa3")])
def test_deterministic_inference_without_a_backend_takes_the_tree_mask_backend_for_ddtree(algorithm, backend):
    from sglang.srt.arg_groups.overrides import _deterministic_attention_backend

    view = resolved_view(server_args(speculative_algorithm=algorithm, enable_deterministic_inference=True,
                                     attention_backend=None))
    assert _deterministic_attention_backend(view) == {"attention_backend": backend}  # no Blackwell here


def test_ddtree_drafts_in_one_group_like_dflash(monkeypatch):
    import sglang.srt.speculative.draft_parallel as draft_parallel
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    ddtree = draft_parallel.legacy_draft_parallel_spec(SpeculativeAlgorithm.DDTREE)
    assert ddtree == draft_parallel.legacy_draft_parallel_spec(SpeculativeAlgorithm.DFLASH)
    assert ddtree != draft_parallel.legacy_draft_parallel_spec(SpeculativeAlgorithm.EAGLE)
    monkeypatch.setattr(draft_parallel, "draft_attn_parallel_group", lambda: "draft_attn_tp")
    monkeypatch.setattr(draft_parallel, "get_parallel", lambda: SimpleNamespace(attn_tp_size=4, draft_attn_tp_size=1))
    assert draft_parallel.legacy_draft_attn_tp_size(SpeculativeAlgorithm.DDTREE) == 1
    assert draft_parallel.legacy_draft_attn_tp_size(SpeculativeAlgorithm.EAGLE) == 4


@pytest.mark.parametrize(("algorithm", "relayed"), [("DDTREE", False), ("EAGLE", True)])
def test_ddtree_relays_no_hidden_states_through_the_future_map(algorithm, relayed):
    from sglang.srt.runtime_context import get_context, reset_context
    from sglang.srt.speculative.spec_utils import spec_need_hidden_states

    get_context().set_server_args(server_args(speculative_algorithm=algorithm, enable_multi_layer_eagle=False))
    try:
        assert spec_need_hidden_states() is relayed
    finally:
        reset_context()
