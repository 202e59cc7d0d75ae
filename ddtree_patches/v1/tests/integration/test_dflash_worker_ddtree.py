"""CPU tests for the DDTREE mode of DFlashWorker: init-time refusals and the
Mamba/GDN state commit of the last accepted tree node.

The worker needs a GPU to construct, so these call its methods on stand-in
objects that carry only the attributes those methods read.
"""

from types import SimpleNamespace

import pytest
import torch

dflash_worker = pytest.importorskip("sglang.srt.speculative.dflash_worker")
DFlashWorker = dflash_worker.DFlashWorker


class TritonAttnBackend:
    pass


class FlashAttentionBackend:
    pass


class HybridLinearAttnBackend:
    def __init__(self, full_attn_backend):
        self.full_attn_backend = full_attn_backend
        self.calls = []

    def update_mamba_state_after_mtp_verify(self, **kwargs):
        self.calls.append(kwargs)


def _server_args(**overrides):
    args = dict(
        speculative_ddtree_budget=8,
        speculative_ddtree_topk_cap=None,
        speculative_num_draft_tokens=9,
        speculative_dflash_block_size=4,
        speculative_eagle_topk=8,
        mamba_track_interval=4,
    )
    args.update(overrides)
    return SimpleNamespace(**args)


def _target_worker(backend, vocab_size=100):
    return SimpleNamespace(
        model_runner=SimpleNamespace(
            attn_backend=backend,
            model_config=SimpleNamespace(vocab_size=vocab_size),
            model=None,
        )
    )


def _init(server_args, backend, page_size=1, vocab_size=100):
    worker = SimpleNamespace(page_size=page_size)
    block_size = DFlashWorker._init_ddtree(
        worker, server_args, _target_worker(backend, vocab_size)
    )
    return worker, block_size


def test_init_resolves_widths_and_topk():
    worker, block_size = _init(_server_args(), TritonAttnBackend())
    assert block_size == 4
    assert worker.ddtree_budget == 8
    assert worker.ddtree_topk == 8
    assert worker.ddtree_verify_topk == 8

    worker, _ = _init(_server_args(speculative_ddtree_topk_cap=3), TritonAttnBackend())
    assert worker.ddtree_topk == 3
    worker, _ = _init(_server_args(), TritonAttnBackend(), vocab_size=5)
    assert worker.ddtree_topk == 5


@pytest.mark.parametrize(
    "overrides,page_size,match",
    [
        ({}, 16, "page_size == 1"),
        ({"speculative_num_draft_tokens": 4}, 1, "budget \\+ 1"),
        ({"speculative_dflash_block_size": 1}, 1, "at least 2"),
        ({"speculative_ddtree_topk_cap": 0}, 1, "topk cap"),
    ],
)
def test_init_refuses_bad_configuration(overrides, page_size, match):
    with pytest.raises(ValueError, match=match):
        _init(_server_args(**overrides), TritonAttnBackend(), page_size=page_size)


def test_init_refuses_backend_without_tree_mask():
    with pytest.raises(ValueError, match="FlashAttentionBackend"):
        _init(_server_args(), FlashAttentionBackend())


def test_init_hybrid_target_needs_tree_mode_recurrences():
    hybrid = HybridLinearAttnBackend(TritonAttnBackend())
    with pytest.raises(ValueError, match="speculative_eagle_topk > 1"):
        _init(_server_args(speculative_eagle_topk=1), hybrid)
    # A chain-shaped tree (topk cap 1) is fine with the chain recurrences.
    _init(_server_args(speculative_eagle_topk=1, speculative_ddtree_topk_cap=1), hybrid)
    _init(_server_args(speculative_eagle_topk=8), hybrid)


def test_mamba_commit_uses_last_accepted_tree_node():
    backend = HybridLinearAttnBackend(TritonAttnBackend())
    worker = SimpleNamespace(
        target_worker=_target_worker(backend), server_args=_server_args()
    )
    accept_index = torch.tensor([[0, 3, 7, -1], [0, 2, -1, -1]])
    # Request 0 crosses a tracking point (interval 4) at its 2nd path step.
    batch = SimpleNamespace(
        mamba_track_indices=torch.tensor([5, 6]), seq_lens=torch.tensor([13, 10])
    )
    DFlashWorker._update_target_mamba_state_after_verify(
        worker,
        batch=batch,
        seq_lens_pre_verify=torch.tensor([10, 8]),
        commit_lens=torch.tensor([3, 2], dtype=torch.int32),
        accept_index=accept_index,
    )
    (call,) = backend.calls
    assert call["last_correct_step_indices"].tolist() == [7, 2]
    assert call["mamba_steps_to_track"].tolist() == [3, -1]

    # Without a tree (DFLASH) the path step is the verify index.
    backend.calls.clear()
    DFlashWorker._update_target_mamba_state_after_verify(
        worker,
        batch=batch,
        seq_lens_pre_verify=torch.tensor([10, 8]),
        commit_lens=torch.tensor([3, 2], dtype=torch.int32),
    )
    assert backend.calls[0]["last_correct_step_indices"].tolist() == [2, 1]
