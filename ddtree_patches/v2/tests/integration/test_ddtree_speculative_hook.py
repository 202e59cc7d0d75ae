"""The speculative hook's DDTREE resolution (``arg_groups/speculative_hook.py``: ``_handle_ddtree`` and
the draft block size it infers), called in process on a real 0.5.17 ``ServerArgs`` record, on CPU.
The backend gate runs the same hook through ``ServerArgs`` in a subprocess; this is where its every
refusal and derived field is seen line by line."""

from __future__ import annotations

import logging

import pytest

hook = pytest.importorskip("sglang.srt.arg_groups.speculative_hook")
from test_ddtree_worker_setup import server_args  # noqa: E402

from sglang.srt.server_args import _ddtree_budget_arg  # noqa: E402


def ddtree_args(**fields):
    values = dict(device="cuda", attention_backend="triton", speculative_draft_model_path="toy-draft",
                  speculative_num_draft_tokens=None, speculative_num_steps=None, max_running_requests=None,
                  enable_mixed_chunk=True)
    values.update(fields)
    return server_args(**values)


def test_a_budget_resolves_the_verify_width_the_steps_and_the_children_per_node():
    args = ddtree_args(speculative_ddtree_budget=8, speculative_dflash_block_size=4, speculative_num_steps=3)
    hook._handle_ddtree(args)
    assert (args.speculative_num_draft_tokens, args.speculative_num_steps, args.speculative_dflash_block_size,
            args.speculative_eagle_topk) == (9, 1, 4, 8)
    assert args.max_running_requests == 48 and args.enable_mixed_chunk is False
    capped = ddtree_args(speculative_ddtree_budget=8, speculative_dflash_block_size=4, speculative_ddtree_topk_cap=2)
    hook._handle_ddtree(capped)
    assert capped.speculative_eagle_topk == 2


def test_auto_sizes_everything_for_the_widest_tree():
    args = ddtree_args(speculative_ddtree_budget="auto", speculative_dflash_block_size=4)
    hook._handle_ddtree(args)
    widest = 4 * 2 ** (len(hook_widths(4)) - 1)
    assert args.speculative_num_draft_tokens == widest and args.speculative_eagle_topk == widest - 1


def hook_widths(block):
    from sglang.srt.speculative.ddtree_budget import AUTO_MAX_BLOCKS, auto_verify_widths

    return auto_verify_widths(block, AUTO_MAX_BLOCKS * block)


def test_a_draft_without_a_readable_config_takes_the_default_block(caplog):
    args = ddtree_args(speculative_ddtree_budget=31, speculative_dflash_block_size=None,
                       speculative_draft_model_path="/nonexistent/draft", json_model_override_args="{}")
    with caplog.at_level(logging.WARNING):
        assert hook._infer_dflash_block_size(args) is None
        hook._handle_ddtree(args)
    assert args.speculative_dflash_block_size == 16 and "defaulting to 16" in caplog.text


@pytest.mark.parametrize(("fields", "message"), [
    ({"device": "cpu"}, "only supports CUDA devices"),
    ({"speculative_draft_model_path": None}, "requires setting --speculative-draft-model-path"),
    ({"speculative_ddtree_topk_cap": 0}, "--speculative-ddtree-topk-cap must be >= 1"),
    ({"speculative_dflash_block_size": 1}, "at least 2 tokens"),
    ({"speculative_ddtree_budget": 2, "speculative_dflash_block_size": 4}, "budget >= draft block size - 1"),
    ({"speculative_num_draft_tokens": 5}, "derived from the tree budget (B + 1 = 9)"),
    ({"attention_backend": "flashinfer"}, "does not apply the tree mask"),
    ({"page_size": 16}, "requires --page-size 1"),
    ({"speculative_use_rejection_sampling": True}, "does not support --speculative-use-rejection-sampling"),
])
def test_what_ddtree_cannot_serve_is_refused_naming_the_flag(fields, message):
    args = ddtree_args(**{"speculative_ddtree_budget": 8, "speculative_dflash_block_size": 4, **fields})
    with pytest.raises(ValueError) as refused:
        hook._handle_ddtree(args)
    assert message in str(refused.value)


@pytest.mark.parametrize(("value", "parsed"), [("64", 64), (" 16 ", 16), ("auto", "auto"), ("1.5", "1.5")])
def test_the_budget_flag_keeps_a_whole_number_as_an_int_and_anything_else_as_text(value, parsed):
    assert _ddtree_budget_arg(value) == parsed


def test_deterministic_inference_without_a_backend_takes_the_tree_mask_backend_for_ddtree():
    from types import SimpleNamespace

    from sglang.srt.arg_groups.overrides import _deterministic_attention_backend

    view = SimpleNamespace(enable_deterministic_inference=True, attention_backend=None,
                           _is_ddtree_requested=lambda: True)
    assert _deterministic_attention_backend(view) == {"attention_backend": "triton"}


@pytest.mark.parametrize(("algorithm", "relayed"), [("DDTREE", False), ("DFLASH", False), ("EAGLE", True)])
def test_ddtree_relays_no_hidden_states_through_the_future_map(algorithm, relayed):
    from types import SimpleNamespace

    from sglang.srt.speculative.spec_utils import spec_need_hidden_states

    args = SimpleNamespace(speculative_algorithm=algorithm, enable_multi_layer_eagle=False)
    assert spec_need_hidden_states(args) is relayed


def test_without_ddtree_deterministic_inference_keeps_the_architectures_fallback():
    from types import SimpleNamespace

    from sglang.srt.arg_groups.overrides import _deterministic_attention_backend

    view = SimpleNamespace(enable_deterministic_inference=True, attention_backend=None,
                           _is_ddtree_requested=lambda: False)
    assert _deterministic_attention_backend(view) == {"attention_backend": "fa3"}  # no Blackwell here


def test_the_draft_block_size_is_read_from_the_draft_checkpoints_config(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "architectures": ["DFlashDraftModel"], "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 128, "vocab_size": 100,
        "block_size": 8, "dflash_config": {"block_size": 8, "target_layer_ids": [0]}}))
    args = ddtree_args(speculative_draft_model_path=str(tmp_path), json_model_override_args="{}",
                       trust_remote_code=False, speculative_draft_model_revision=None)
    assert hook._infer_dflash_block_size(args) == 8
