"""DDTreeWorkerV2's start-up around a model runner, on CPU: what the worker adds to DFLASH's set-up.

What runs is the tree's own code: ``init_attention_backends`` (DFLASH's, then the target backend's check:
one that applies the tree mask, the compact mask for fa3, the hybrid linear-attention target's topk),
``init_cuda_graphs`` (DFLASH's under the draft's config, auto's budget policy, the round kernels' warm-up),
``_maybe_build_draft_sampler`` and ``_ddtree_topk_head`` (the draft top-K head over the target's LM head:
plain or vocab-parallel, and what it refuses), and the head's merge of every TP rank's shard. Stood in for:
DFLASH's own set-up (the draft model runner, its attention backends and the CUDA-graph capture: a
recorder), the backends (named by class, as the worker reads them), the LM head (a weight and its
``shard_indices``), and the TP group's all-gather (the other ranks' shards, computed here by the same head
over their slices of the weight).
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

worker_mod = pytest.importorskip("sglang.srt.speculative.ddtree_worker_v2")

Worker = worker_mod.DDTreeWorkerV2


def backend(name: str):
    return type(name, (), {})()


def make(*, auto_widths=(8,), budget=7, topk=7, server_topk=7, hybrid=False, attn_backend=None):
    w = object.__new__(Worker)
    w.events = []
    w.auto_widths, w.budget, w.ddtree_topk, w.server_topk = tuple(auto_widths), budget, topk, server_topk
    w.block_size = 4
    w._need_mamba_verify_commit = hybrid
    w.ps = SimpleNamespace(tp_rank=0)
    w._target_tp_rank = 0
    w.model_runner = SimpleNamespace(attn_backend=attn_backend or backend("TritonAttnBackend"))

    @contextlib.contextmanager
    def draft_config():
        w.events.append("draft config")
        yield
        w.events.append("target config")

    w._draft_config = draft_config
    return w


@pytest.fixture
def dflash_setup(monkeypatch):
    """DFLASH's own set-up (a loaded draft model runner, CUDA-graph capture), recorded instead of run."""
    for name in ("init_attention_backends", "init_cuda_graphs"):
        monkeypatch.setattr(worker_mod.DFlashWorkerV2, name, lambda self, name=name: self.events.append(name))


@pytest.mark.parametrize(("name", "compact"), [("TritonAttnBackend", False), ("FlashAttentionBackend", True)])
def test_the_target_backend_decides_which_mask_the_rounds_write(dflash_setup, name, compact):
    w = make(attn_backend=backend(name))
    w.init_attention_backends()
    assert w.events == ["draft config", "init_attention_backends", "target config"]
    assert w._compact_tree_mask is compact


def test_a_hybrids_verify_backend_is_the_one_checked(dflash_setup):
    verify = backend("FlashAttentionBackend")
    hybrid = SimpleNamespace(_select_backend=lambda mode: verify)
    w = make(attn_backend=hybrid)
    w.init_attention_backends()
    assert w._compact_tree_mask is True


def test_a_target_backend_without_the_tree_mask_is_refused_by_name(dflash_setup):
    with pytest.raises(ValueError, match="got FlashInferAttnBackend. Pass --attention-backend fa3"):
        make(attn_backend=backend("FlashInferAttnBackend")).init_attention_backends()


def test_a_hybrid_linear_attention_target_needs_a_server_topk_above_one(dflash_setup):
    with pytest.raises(ValueError, match="speculative_eagle_topk > 1, got 1"):
        make(hybrid=True, server_topk=1).init_attention_backends()
    make(hybrid=True, server_topk=4).init_attention_backends()
    make(hybrid=True, server_topk=1, budget=1, topk=1).init_attention_backends()  # a chain: nothing to follow


@pytest.mark.parametrize(("auto_widths", "steps"), [
    ((8,), ["draft config", "init_cuda_graphs", "target config", "warm"]),
    ((4, 8), ["draft config", "init_cuda_graphs", "target config", "policy", "warm"]),
])
def test_the_graphs_are_captured_under_the_draft_config_then_auto_times_them_and_the_kernels_compile(
        dflash_setup, auto_widths, steps):
    w = make(auto_widths=auto_widths)
    w._init_budget_policy = lambda: w.events.append("policy")
    w._warm_round_kernels = lambda: w.events.append("warm")
    w.init_cuda_graphs()
    assert w.events == steps


class Shard:
    """A vocab-parallel LM head's ``shard_indices``."""

    def __init__(self, start: int, num: int, padded: int, added: int = 0):
        self.org_vocab_start_index, self.num_org_elements = start, num
        self.num_org_elements_padded, self.num_added_elements = padded, added


def head_worker(monkeypatch, lm_head, world_size=1):
    w = make()
    w._target_worker = SimpleNamespace(model_runner=SimpleNamespace(model=SimpleNamespace(lm_head=lm_head)))
    group = SimpleNamespace(world_size=world_size)
    monkeypatch.setattr(worker_mod, "get_tp_group", lambda: group)
    return w, group


def test_a_plain_lm_head_gives_a_head_over_its_whole_vocabulary(monkeypatch):
    weight = torch.randn(40, 8)
    w, _ = head_worker(monkeypatch, SimpleNamespace(weight=weight))
    head = w._ddtree_topk_head(max_bs=3)
    assert head.weight is weight and (head.num_org, head.num_org_padded, head.org_vocab_start) == (40, 40, 0)
    assert head.topk == w.ddtree_topk and head.tp_group is None and head.tp_size == 1
    assert head.top_log_probs.shape == (3 * (w.block_size - 1), w.ddtree_topk)


def test_a_vocab_parallel_lm_head_gives_its_shard_and_the_tp_group(monkeypatch):
    lm_head = SimpleNamespace(weight=torch.randn(24, 8), shard_indices=Shard(start=20, num=18, padded=24))
    w, group = head_worker(monkeypatch, lm_head, world_size=2)
    head = w._ddtree_topk_head(max_bs=1)
    assert (head.num_org, head.num_org_padded, head.org_vocab_start) == (18, 24, 20)
    assert head.tp_group is group and head.tp_size == 2


@pytest.mark.parametrize(("lm_head", "world_size", "error", "message"), [
    (SimpleNamespace(), 1, RuntimeError, "expose `lm_head` with `weight`"),
    (None, 1, RuntimeError, "expose `lm_head` with `weight`"),
    (SimpleNamespace(weight=torch.zeros(4, 2), shard_indices=Shard(0, 4, 4, added=2)), 1, ValueError,
     "added vocabulary"),
    (SimpleNamespace(weight=torch.zeros(4, 2)), 2, ValueError, "needs a vocab-parallel LM head"),
])
def test_a_head_ddtree_cannot_read_is_refused(monkeypatch, lm_head, world_size, error, message):
    w, _ = head_worker(monkeypatch, lm_head, world_size)
    with pytest.raises(error, match=message):
        w._ddtree_topk_head(max_bs=1)


def test_a_fixed_budget_folds_the_head_into_the_draft_graph_sized_to_its_largest_batch(monkeypatch):
    w = make()
    monkeypatch.setattr(worker_mod, "get_exec", lambda: SimpleNamespace(
        graph=SimpleNamespace(cuda_graph_config=SimpleNamespace(decode=SimpleNamespace(bs=[1, 8, 4])))))
    built = []
    w._ddtree_topk_head = lambda *, max_bs: built.append(max_bs) or SimpleNamespace(tp_size=1)
    assert w._maybe_build_draft_sampler() is not None and built == [8]


def test_auto_keeps_the_head_out_of_the_draft_graph():
    w = make(auto_widths=(4, 8))
    w._ddtree_topk_head = lambda **kwargs: pytest.fail("auto sizes the head to each round")
    assert w._maybe_build_draft_sampler() is None


class TwoRankGroup:
    """Rank 0's TP group of two ranks: the all-gather puts rank 0's tensor, then rank 1's (computed by the
    same head over rank 1's slice of the weight), in that order, as NCCL's all_gather_into_tensor does."""

    world_size = 2

    def __init__(self, other_rank_stats):
        self.other = list(other_rank_stats)
        self.calls = 0

    def all_gather_into_tensor(self, out, t):
        assert out.shape == (2 * t.shape[0], *t.shape[1:]) and out.dtype == t.dtype and t.is_contiguous()
        out[: t.shape[0]] = t
        out[t.shape[0]:] = self.other[self.calls]
        self.calls += 1


@pytest.mark.parametrize("k", [5, 16])
def test_the_ranks_shards_merge_into_the_single_rank_top_k(k):
    """The head on rank 0 of two, vocabulary 37 split 19 + 18 (padded to 19): its gathered top-K equals one
    head over the whole vocabulary, log-normaliser included."""
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(37, 8, generator=gen)
    hidden = torch.randn(6, 8, generator=gen)
    padded = torch.cat([weight, torch.zeros(1, 8)])  # the last shard's padding row
    common = dict(block_size=4, topk=16, max_bs=2)
    rank1 = worker_mod._DDTreeDraftTopK(weight=padded[19:], num_org=18, num_org_padded=19, org_vocab_start=19,
                                        **common)
    group = TwoRankGroup(rank1._local(hidden, k))
    rank0 = worker_mod._DDTreeDraftTopK(weight=padded[:19], num_org=19, num_org_padded=19, org_vocab_start=0,
                                        tp_group=group, **common)
    assert rank0.tp_size == 2
    top_log_probs, top_token_ids = rank0.compute(hidden, k=k)
    assert group.calls == 4  # values, ids, shard max, shard sum of exps
    whole = worker_mod._DDTreeDraftTopK(weight=weight, num_org=37, num_org_padded=37, org_vocab_start=0, **common)
    want_log_probs, want_token_ids = whole.compute(hidden, k=k)
    assert torch.equal(top_token_ids, want_token_ids)
    torch.testing.assert_close(top_log_probs, want_log_probs, rtol=0, atol=1e-6)


class BroadcastGroup:
    """A TP group of two ranks: broadcast(src=0) leaves every rank holding rank 0's tensor."""

    world_size = 2

    def __init__(self, rank0_tokens):
        self.rank0_tokens, self.calls = rank0_tokens, []

    def broadcast(self, tensor, src):
        self.calls.append(src)
        tensor.copy_(self.rank0_tokens)


@pytest.mark.parametrize(("greedy", "world_size", "broadcasts"), [(False, 2, [0]), (True, 2, []), (False, 1, [])])
def test_sampled_target_tokens_are_rank_zeros_on_every_tp_rank(monkeypatch, greedy, world_size, broadcasts):
    """Each rank samples its own tokens; the walk must follow one path, so a sampled round takes rank 0's
    (greedy tokens are the same arg-max on every rank)."""
    mine, rank0 = torch.tensor([3, 1, 4, 1]), torch.tensor([2, 7, 1, 8])
    monkeypatch.setattr(worker_mod, "sample_ddtree_target_tokens", lambda **kwargs: mine.clone())
    group = BroadcastGroup(rank0)
    group.world_size = world_size
    monkeypatch.setattr(worker_mod, "get_tp_group", lambda: group)
    tokens = make()._target_tokens(torch.zeros(4, 5), SimpleNamespace(is_all_greedy=greedy), torch.arange(4), 4)
    assert group.calls == broadcasts
    assert torch.equal(tokens, rank0 if broadcasts else mine)
