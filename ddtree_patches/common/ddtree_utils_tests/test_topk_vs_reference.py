"""Vocab-parallel top-k: per-shard candidates merged exactly, never dense logits."""

from __future__ import annotations

import pytest
import torch

import ddtree_heap_reference as ref


def shard_bounds(vocab: int, shards: int):
    return [(s * vocab) // shards for s in range(shards + 1)]


def merged_over_shards(ddtree_utils, logits: torch.Tensor, k: int, shards: int):
    """Split like a TP vocab-parallel lm_head: equal padded shards, last one partial."""
    vocab = logits.shape[-1]
    per_shard = -(-vocab // shards)
    stats = []
    for s in range(shards):
        start = s * per_shard
        shard = logits[..., start : start + per_shard]
        valid = shard.shape[-1]
        # Pad the tail shard with garbage columns, as a padded vocabulary would.
        shard = torch.nn.functional.pad(shard, (0, per_shard - valid), value=1e4)
        stats.append(ddtree_utils.ddtree_local_topk(shard, k, vocab_start=start, num_valid=valid))
    stacked = [torch.stack(parts) for parts in zip(*stats)]
    return ddtree_utils.ddtree_merge_topk(*stacked, k=k)


@pytest.mark.parametrize("vocab,k", [(7, 7), (50, 16), (1000, 128), (4099, 64)])
def test_single_shard_matches_direct_definition(ddtree_utils, vocab, k):
    gen = torch.Generator().manual_seed(vocab)
    # Integer logits: many exact ties, which must go to the smaller token id.
    logits = torch.randint(-4, 4, (3, 5, vocab), generator=gen).float()
    log_probs, ids = ddtree_utils.ddtree_topk_from_logits(logits, k)
    expected_lp, expected_ids = ref.top_log_probs(logits, k)
    assert torch.equal(ids, expected_ids)
    torch.testing.assert_close(log_probs, expected_lp, rtol=0, atol=1e-6)
    assert log_probs.dtype == torch.float32 and ids.dtype == torch.int64


@pytest.mark.parametrize("shards", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sharded_merge_equals_single_shard(ddtree_utils, shards, dtype):
    gen = torch.Generator().manual_seed(shards)
    logits = (torch.randn(4, 6, 3001, generator=gen) * 4).to(dtype)
    single = ddtree_utils.ddtree_topk_from_logits(logits, 64)
    merged = merged_over_shards(ddtree_utils, logits, 64, shards)
    assert torch.equal(merged[1], single[1])
    assert torch.equal(merged[0], single[0])


def test_merge_with_ties_across_shards(ddtree_utils):
    logits = torch.randint(-2, 2, (2, 3, 97), generator=torch.Generator().manual_seed(1)).float()
    for shards in (2, 5):
        merged = merged_over_shards(ddtree_utils, logits, 40, shards)
        assert torch.equal(merged[1], ref.top_log_probs(logits, 40)[1])


def test_local_topk_reports_shard_normaliser(ddtree_utils):
    logits = torch.randn(2, 3, 200) * 5
    vals, ids, shard_max, sumexp = ddtree_utils.ddtree_local_topk(logits, 10, vocab_start=1000)
    assert ids.min() >= 1000 and ids.max() < 1200
    torch.testing.assert_close(shard_max + torch.log(sumexp), torch.logsumexp(logits.double(), -1))
    assert torch.equal(vals, logits.gather(-1, ids - 1000))


def test_topk_runs_on_every_device(ddtree_utils, device):
    logits = torch.randn(2, 4, 500, generator=torch.Generator().manual_seed(2))
    log_probs, ids = ddtree_utils.ddtree_topk_from_logits(logits.to(device), 32)
    expected_lp, expected_ids = ref.top_log_probs(logits, 32)
    assert torch.equal(ids.cpu(), expected_ids)
    torch.testing.assert_close(log_probs.cpu(), expected_lp, rtol=0, atol=1e-6)


@pytest.mark.gpu
def test_gpu_topk_equals_cpu_topk(ddtree_utils, cuda):
    gen = torch.Generator().manual_seed(4)
    logits = (torch.randn(8, 15, 151936, generator=gen) * 3).bfloat16()
    cpu = ddtree_utils.ddtree_topk_from_logits(logits, 128)
    gpu = ddtree_utils.ddtree_topk_from_logits(logits.to(cuda), 128)
    assert torch.equal(gpu[1].cpu(), cpu[1])
    torch.testing.assert_close(gpu[0].cpu(), cpu[0], rtol=0, atol=1e-6)
