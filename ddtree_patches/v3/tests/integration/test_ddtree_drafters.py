"""Which DFlash drafters DDTREE drives on SGLang 0.5.23: plain DFlash yes; DFlash2 (0.5.19+, the
backbone plus a sequential candidate selector) and Domino (a prefix-GRU projector) are refused at
argument resolution with a message naming the drafter and what to use instead.

The backend gate resolves the same refusals end to end through ServerArgs.resolve_once
(expectations/backend.toml: dflash2-draft-refused, domino-draft-refused, and DFLASH serving the
DFlash2 checkpoint as the contrast); these tests pin the predicate on the configs themselves.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sglang.srt.arg_groups.speculative_hook import ddtree_draft_refusal


def _draft(architectures, **dflash_config):
    return SimpleNamespace(
        architectures=architectures, num_hidden_layers=1, block_size=16, num_target_layers=4,
        dflash_config={"target_layer_ids": [1, 2], "mask_token_id": 1000, **dflash_config},
    )


def test_a_plain_dflash_drafter_is_served():
    assert ddtree_draft_refusal(_draft(["DFlashDraftModel"])) is None


@pytest.mark.parametrize("arch", ["DFlash2DraftModel", "DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel"])
def test_dflash2_drafters_are_refused_by_architecture(arch):
    message = ddtree_draft_refusal(_draft([arch], selector_rank=8, selector_top_k=4))
    assert message is not None and f"DFlash2 drafters ({arch})" in message
    assert "--speculative-algorithm DFLASH" in message


def test_a_selector_draft_is_refused_even_under_the_plain_architecture_name():
    message = ddtree_draft_refusal(_draft(["DFlashDraftModel"], selector_rank=8, selector_top_k=4))
    assert message is not None and "candidate-selector draft (selector_rank)" in message


def test_domino_drafters_are_refused():
    message = ddtree_draft_refusal(
        _draft(["DFlashDraftModel"], projector_type="domino", shift_label=True, pure_draft_prefix_len=1,
               gru_hidden_dim=32, emb_dim=32))
    assert message is not None and message.startswith("DDTREE does not support Domino drafters")
