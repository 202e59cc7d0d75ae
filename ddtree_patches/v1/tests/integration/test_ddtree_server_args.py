"""The DDTREE server arguments of 0.5.12 on CPU: the widths ``_handle_ddtree_speculative_args`` resolves,
every configuration it refuses, and the DDTREE branches of the attention-backend and page-size defaults.

What runs is the tree's own ``ServerArgs`` methods on a real record whose fields are set directly (its
``__post_init__`` resolution needs a model and a GPU). Only the two base methods that read the model's
config (``use_mla_backend``, ``get_attention_backends``) are answered here, per test.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from types import SimpleNamespace

import pytest

server_args_mod = pytest.importorskip("sglang.srt.server_args")
ServerArgs = server_args_mod.ServerArgs


def record(backends=("triton", "triton"), mla=False, **fields) -> ServerArgs:
    """A DDTREE record (budget 8, block 4, triton, page size 1) with ``fields`` changed."""
    out = object.__new__(ServerArgs)
    for field in dataclasses.fields(ServerArgs):
        if field.default_factory is not dataclasses.MISSING:  # defaults that are not class attributes
            setattr(out, field.name, field.default_factory())
    values = dict(model_path="toy", speculative_algorithm="DDTREE", speculative_draft_model_path="toy-draft",
                  speculative_ddtree_budget=8, speculative_dflash_block_size=4, attention_backend="triton",
                  page_size=1)
    values.update(fields)
    for name, value in values.items():
        setattr(out, name, value)
    out.use_mla_backend = lambda: mla  # the model's config is not read on CPU
    out.get_attention_backends = lambda: backends
    return out


def test_a_ddtree_configuration_resolves_its_two_widths():
    args = record(speculative_ddtree_topk_cap=3, speculative_num_steps=4, enable_mixed_chunk=True)
    args._handle_ddtree_speculative_args()
    assert args.speculative_num_draft_tokens == 9  # the target verify width B + 1
    assert args.speculative_dflash_block_size == 4  # the draft block stays L
    assert args.speculative_eagle_topk == 3  # min(B, topk cap)
    assert args.speculative_num_steps == 1
    assert args.speculative_ddtree_budget == 8 and args.speculative_ddtree_topk_cap == 3
    assert args.max_running_requests == 48 and args.disable_overlap_schedule is True
    assert args.enable_mixed_chunk is False


def test_explicit_widths_that_agree_are_kept():
    args = record(speculative_num_draft_tokens=9, speculative_eagle_topk=8, speculative_num_steps=1,
                  max_running_requests=7, speculative_draft_window_size=6)
    args._handle_ddtree_speculative_args()
    assert (args.speculative_num_draft_tokens, args.speculative_eagle_topk, args.max_running_requests) == (9, 8, 7)
    assert args.speculative_draft_window_size == 6


def test_a_block_size_the_draft_config_cannot_give_defaults_to_16(caplog):
    args = record(speculative_dflash_block_size=None, speculative_ddtree_budget=16,
                  speculative_draft_model_path="/no/such/draft")
    with caplog.at_level(logging.WARNING):
        args._handle_ddtree_speculative_args()
    assert args.speculative_dflash_block_size == 16 and args.speculative_num_draft_tokens == 17
    assert "defaulting to 16 for DDTREE" in caplog.text


def test_a_topk_cap_that_cannot_fill_the_budget_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING):
        record(speculative_ddtree_topk_cap=1)._handle_ddtree_speculative_args()
    assert "the tree holds at most 3 nodes, fewer than --speculative-ddtree-budget 8" in caplog.text


@pytest.mark.parametrize(("fields", "message"), [
    ({"enable_dp_attention": True}, "does not support dp attention"),
    ({"pp_size": 2}, "only supports pp_size == 1"),
    ({"speculative_draft_model_path": None}, "requires setting --speculative-draft-model-path"),
    ({"speculative_ddtree_budget": 0}, "--speculative-ddtree-budget must be >= 1, got 0"),
    ({"speculative_ddtree_topk_cap": 0}, "--speculative-ddtree-topk-cap must be >= 1, got 0"),
    ({"speculative_dflash_block_size": 1}, "draft block size >= 2"),
    ({"speculative_draft_window_size": 0}, "--speculative-draft-window-size must be positive"),
    ({"speculative_draft_window_size": 3}, "window_size=3, block_size=4"),
    ({"speculative_ddtree_budget": 2}, "(= 3) so that the verify width"),
    ({"speculative_num_draft_tokens": 8}, "budget + 1 = 9), got --speculative-num-draft-tokens 8"),
    ({"backends": ("fa3", "triton")}, "attention backend 'fa3' does not apply the tree mask"),
    ({"backends": ("triton", "trtllm_mha"), "decode_attention_backend": "trtllm_mha"},
     "Pass --decode-attention-backend"),
    ({"page_size": 16}, "requires --page-size 1"),
    ({"speculative_accept_threshold_single": 0.5}, "does not use rejection sampling"),
])
def test_a_configuration_ddtree_cannot_serve_is_refused(fields, message):
    with pytest.raises(ValueError) as raised:
        record(**fields)._handle_ddtree_speculative_args()
    assert message in str(raised.value)


@pytest.mark.parametrize(("algorithm", "asked"), [("DDTREE", True), ("ddtree", True), ("DFLASH", False), (None, False)])
def test_ddtree_is_recognised_before_the_algorithm_name_is_normalised(algorithm, asked):
    assert record(speculative_algorithm=algorithm)._is_ddtree_requested() is asked


def test_the_default_attention_backend_of_ddtree_applies_the_tree_mask():
    args = record(speculative_eagle_topk=4)
    llama = SimpleNamespace(architectures=["LlamaForCausalLM"])
    sinks = SimpleNamespace(has_attention_sinks=True, hf_config=llama)
    plain = SimpleNamespace(has_attention_sinks=False, hf_config=llama)
    assert args._get_default_attn_backend(False, sinks) == "triton"  # attention sinks: never flashinfer
    assert args._get_default_attn_backend(True, plain) == "triton"  # MLA
    mha = args._get_default_ddtree_attn_backend(False, plain)
    assert mha in ("flashinfer", "triton")  # flashinfer where it is installed, both apply the mask


def test_ddtree_defaults_to_page_size_1():
    args = record(page_size=None)
    args._handle_page_size()
    assert args.page_size == 1


def test_the_ddtree_flags_are_on_the_command_line():
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    parsed = parser.parse_args(["--model-path", "toy", "--speculative-ddtree-budget", "32",
                                "--speculative-ddtree-topk-cap", "4"])
    assert (parsed.speculative_ddtree_budget, parsed.speculative_ddtree_topk_cap) == (32, 4)
