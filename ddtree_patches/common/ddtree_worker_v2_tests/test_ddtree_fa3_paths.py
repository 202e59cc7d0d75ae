"""The fa3 backend's DDTREE paths the shared fa3 tests do not reach, on CPU: the eager verify at a width
other than the one the backend was built for, the eager entry (``init_forward_metadata``) routing a
verify to DDTREE's own metadata and a chain verify (another algorithm) to its own, a prefill through a DDTREE backend (the plain causal FA3 call, no tree
part), the refusals of a malformed tree-kernel call, and the hybrid's TARGET_VERIFY backend the worker
reads.

``--speculative-ddtree-budget auto`` builds the target's attention backend for the widest verify (N = 4L)
and, without CUDA graphs to time (``--disable-cuda-graph``), verifies every round at the chain's width
(N = L) on that backend. The triton backend reads the round's width from the verify input; the fa3
backend's eager metadata must too, from the round's compact mask: built from the backend's widest N, the
prefix pass would take 4L query rows per request and attend the wrong rows to the wrong prefixes.

The stand-ins (FA3 in torch, the KV pool, the page-table builder) are the fa3 tests' own
(``test_ddtree_fa3_verify.py``); every set whose series carries the fa3 verify (v2's 0018, v3's 0017) runs
these against its own base.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

shared = pytest.importorskip("test_ddtree_fa3_verify")
fa3 = shared.fa3
fa3_in_torch = shared.fa3_in_torch  # the fixture: FA3 and the page-table builder in torch
tree_attention = shared.tree_attention
worker_mod = pytest.importorskip("sglang.srt.speculative.ddtree_worker_v2")
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402


def eager_backend(pool, req_to_token, n):
    """The shared stand-in plus what the eager entry reads besides the DDTREE branch (0.5.17's
    ``_unified_dense``, 0.5.23's KV translator and shard pool)."""
    be = shared.backend(pool, req_to_token, n)
    for name, value in dict(kv_index_translator=SimpleNamespace(is_translating=False), is_prefill_aware_swa=False,
                            _kv_shard_pool=None, has_swa=False, _unified_dense=False).items():
        setattr(be, name, value)
    return be


@pytest.mark.parametrize("built_for", [16, 32])
def test_an_eager_verify_narrower_than_its_backend_attends_by_the_rounds_own_width(fa3_in_torch, built_for):
    heads, kv_heads, dim, bs = 4, 2, 8, 3
    tree = shared.trees(bs, 7, seed=11)  # the chain's width of auto: N = 8
    n = tree.num_verify_tokens
    assert n < built_for
    req_to_token = torch.arange(bs * 64, dtype=torch.int32).view(bs, 64) + 1
    pool = shared.KVPool(bs * 64 + 1, kv_heads, dim)
    seq_lens = torch.tensor([4, 13, 9])
    fb = shared.verify_batch(tree, seq_lens, req_to_token, shared.verify_input(tree))
    be = shared.backend(pool, req_to_token, built_for)  # the widest width's backend
    metadata = fa3.FlashAttentionMetadata()
    be._init_ddtree_verify_metadata(metadata, fb, eager_max_k=int(seq_lens.max()))
    assert metadata.max_seq_len_q == n
    assert metadata.cu_seqlens_q.tolist() == list(range(0, bs * n + 1, n))
    be.forward_metadata = metadata
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(bs * n, heads * dim, generator=gen)
    k = torch.randn(bs * n, kv_heads * dim, generator=gen)
    v = torch.randn(bs * n, kv_heads, dim, generator=gen)
    lay = shared.layer(heads, kv_heads, dim)
    out = be.forward_extend(q, k, v, lay, fb)
    expected = shared.expected_output(pool, req_to_token, seq_lens, fb, q.view(-1, heads, dim), tree, lay)
    torch.testing.assert_close(out.view(-1, heads, dim), expected, rtol=1e-5, atol=1e-5)


def test_the_eager_entry_routes_a_verify_to_the_ddtree_metadata(fa3_in_torch):
    bs = 2
    tree = shared.trees(bs, 7, seed=4)
    n = tree.num_verify_tokens
    req_to_token = torch.arange(bs * 32, dtype=torch.int32).view(bs, 32) + 1
    seq_lens = torch.tensor([6, 3])
    fb = shared.verify_batch(tree, seq_lens, req_to_token, shared.verify_input(tree))
    be = eager_backend(shared.KVPool(bs * 32 + 1, 2, 8), req_to_token, n)
    be.init_forward_metadata(fb)
    metadata = be.forward_metadata
    # the prefix pass only: the committed prefix as keys (not prefix + N, as a chain verify has), N queries each
    assert metadata.cache_seqlens_int32.tolist() == [6, 3]
    assert metadata.cu_seqlens_q.tolist() == [0, n, 2 * n]
    assert metadata.max_seq_len_k == 6  # the host mirror's bound
    assert metadata.ddtree_tree_mask is tree.visibility


def test_a_chain_verify_on_a_backend_not_built_for_ddtree_keeps_its_causal_metadata(fa3_in_torch):
    # DDTREE's branch is keyed on the algorithm: a DFLASH / EAGLE topk-1 target (ddtree_verify False) keeps
    # the chain verify's metadata, its window appended to the prefix as keys
    bs, n = 2, 4
    req_to_token = torch.arange(bs * 32, dtype=torch.int32).view(bs, 32) + 1
    seq_lens = torch.tensor([6, 3])
    be = eager_backend(shared.KVPool(bs * 32 + 1, 2, 8), req_to_token, n)
    be.ddtree_verify, be.tree_verify, be.topk = False, False, 1
    fb = SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, seq_lens=seq_lens,
                         seq_lens_cpu=seq_lens, req_pool_indices=torch.arange(bs), spec_info=SimpleNamespace(),
                         encoder_lens=None)
    be.init_forward_metadata(fb)
    metadata = be.forward_metadata
    assert metadata.cache_seqlens_int32.tolist() == [6 + n, 3 + n]
    assert metadata.cu_seqlens_q.tolist() == [0, n, 2 * n]
    assert metadata.ddtree_tree_mask is None


def test_a_prefill_through_a_ddtree_backend_is_the_plain_causal_attention(fa3_in_torch):
    heads, kv_heads, dim = 4, 2, 8
    prefix, new = torch.tensor([3, 5]), torch.tensor([4, 2])
    seq_lens = prefix + new
    bs = 2
    req_to_token = torch.arange(bs * 16, dtype=torch.int32).view(bs, 16) + 1
    pool = shared.KVPool(bs * 16 + 1, kv_heads, dim)
    gen = torch.Generator().manual_seed(8)
    for b in range(bs):  # the cached prefix
        slots = req_to_token[b, : int(prefix[b])].long()
        pool.k[0][slots] = torch.randn(len(slots), kv_heads, dim, generator=gen)
        pool.v[0][slots] = torch.randn(len(slots), kv_heads, dim, generator=gen)
    out_cache_loc = torch.cat([req_to_token[b, int(prefix[b]): int(seq_lens[b])] for b in range(bs)]).long()
    be = shared.backend(pool, req_to_token, 8)
    fb = SimpleNamespace(forward_mode=ForwardMode.EXTEND, batch_size=bs, seq_lens=seq_lens, seq_lens_cpu=seq_lens,
                         req_pool_indices=torch.arange(bs), out_cache_loc=out_cache_loc, spec_info=None,
                         attn_cp_metadata=None, encoder_lens=None, out_cache_loc_is_physical=False)
    be.forward_metadata = fa3.FlashAttentionMetadata(
        cache_seqlens_int32=seq_lens.to(torch.int32), max_seq_len_q=int(new.max()),
        cu_seqlens_q=torch.tensor([0, 4, 6], dtype=torch.int32),
        cu_seqlens_k=torch.tensor([0, 7, 14], dtype=torch.int32), max_seq_len_k=int(seq_lens.max()),
        page_table=req_to_token[:, : int(seq_lens.max())],
    )
    lay = shared.layer(heads, kv_heads, dim)
    q = torch.randn(int(new.sum()), heads * dim, generator=gen)
    k = torch.randn(int(new.sum()), kv_heads * dim, generator=gen)
    v = torch.randn(int(new.sum()), kv_heads, dim, generator=gen)
    out = be.forward_extend(q, k, v, lay, fb).view(-1, heads, dim)
    row = 0
    for b in range(bs):
        keys = pool.k[0][req_to_token[b, : int(seq_lens[b])].long()].repeat_interleave(heads // kv_heads, 1)
        values = pool.v[0][req_to_token[b, : int(seq_lens[b])].long()].repeat_interleave(heads // kv_heads, 1)
        for i in range(int(new[b])):
            visible = int(prefix[b]) + i + 1  # causal: the prefix and the new tokens up to itself
            scores = torch.einsum("hd,khd->hk", q.view(-1, heads, dim)[row], keys[:visible]) * lay.scaling
            expected = torch.einsum("hk,khd->hd", torch.softmax(scores, -1), values[:visible])
            torch.testing.assert_close(out[row], expected, rtol=1e-5, atol=1e-5)
            row += 1


@pytest.mark.parametrize(("change", "message"), [
    ({"q": torch.zeros(16, 4)}, "must be [tokens, heads, head_dim]"),
    ({"tree_mask": torch.ones(1, 8, 8, dtype=torch.bool)}, "tree_mask holds 1 requests, the batch has 2"),
    ({"k": torch.zeros(8, 2, 8), "v": torch.zeros(8, 2, 8)}, "must hold the same tree tokens"),
    ({"k": torch.zeros(16, 3, 8), "v": torch.zeros(16, 3, 8)}, "4 query heads over 3 KV heads"),
])
def test_a_malformed_tree_kernel_call_is_refused(change, message):
    args = dict(q=torch.zeros(16, 4, 8), k=torch.zeros(16, 2, 8), v=torch.zeros(16, 2, 8),
                tree_mask=torch.ones(2, 8, 8, dtype=torch.bool), o_prefix=torch.zeros(16, 4, 8),
                lse_prefix=torch.zeros(4, 16))
    args.update(change)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        tree_attention.ddtree_merge_tree_attention(**args, sm_scale=1.0)


def test_the_worker_reads_the_mask_of_the_backend_a_hybrid_runs_the_verify_on():
    prefill, decode = SimpleNamespace(name="prefill"), SimpleNamespace(name="decode")
    hybrid = SimpleNamespace(_select_backend=lambda mode: prefill if mode == ForwardMode.TARGET_VERIFY else decode)
    assert worker_mod._target_verify_backend(hybrid) is prefill
    assert worker_mod._target_verify_backend(decode) is decode  # a single backend is its own
