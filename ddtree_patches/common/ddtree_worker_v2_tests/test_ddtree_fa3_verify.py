"""DDTREE's target verify on the fa3 backend, on CPU: the tree's own mask -> the keys each query sees ->
the attention, against a reference that attends every query to its prefix and its ancestors in one softmax.

What runs is the tree's own code: ``ddtree_tree_attention`` (the torch path here, its Triton kernel in
Triton's interpreter), and ``FlashAttentionBackend``'s DDTREE branches: the eager metadata, the CUDA-graph
replay's metadata and mask buffer, ``forward_extend`` (the prefix pass, then the tree part merged in place)
and the configurations it refuses. What is stood in for: FA3 itself (``fa3_reference``: the definition of
the two calls the backend makes, in torch), the Triton page-table builder (a torch gather with the same
result for page size 1), the KV pool (a dict of per-layer tensors), and the model layer's attributes.

The trees are real DDTrees (``build_ddtree_tree_from_topk``): their ``visibility`` is the compact
``[bs, N, N]`` mask the worker hands the fa3 backend.
"""

from __future__ import annotations

import inspect
import math
import random
import sys
from types import SimpleNamespace

import fa3_reference
import pytest
import torch
from _kernel_helpers import as_if_cuda, interpreted_copy, load_fresh

fa3 = pytest.importorskip("sglang.srt.layers.attention.flashattention_backend")
tree_attention = pytest.importorskip("sglang.srt.layers.attention.ddtree_tree_attention")
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative import ddtree_utils  # noqa: E402
from sglang.srt.speculative import spec_info as spec_info_mod  # noqa: E402
from sglang.srt.speculative.ddtree_info_v2 import DDTreeVerifyInput  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm, create_dummy_verify_input  # noqa: E402


def trees(bs: int, budget: int, depths: int = 4, k: int = 3, seed: int = 0) -> ddtree_utils.DDTreeBatch:
    """Real DDTrees of ``budget`` nodes from random per-depth draft distributions."""
    gen = torch.Generator().manual_seed(seed)
    log_probs = torch.log_softmax(torch.randn(bs, depths, 12, generator=gen) * 2, dim=-1)
    top = log_probs.topk(k, dim=-1)
    return ddtree_utils.build_ddtree_tree_from_topk(top.values, top.indices, budget)


def reference(q, prefix_k, prefix_v, tree_k, tree_v, visibility, scale) -> torch.Tensor:
    """Every query of request b against its prefix and the tree tokens its row allows, one softmax.

    q ``[bs*N, Hq, D]``; prefix_k/v ``[bs, P, Hkv, D]``; tree_k/v ``[bs*N, Hkv, D]``; visibility ``[bs, N, N]``.
    """
    bs, n = visibility.shape[0], visibility.shape[1]
    group = q.shape[1] // tree_k.shape[1]
    out = torch.empty(q.shape, dtype=torch.float32)
    for b in range(bs):
        for i in range(n):
            keys = torch.cat([prefix_k[b], tree_k[b * n: (b + 1) * n][visibility[b, i]]]).float()
            values = torch.cat([prefix_v[b], tree_v[b * n: (b + 1) * n][visibility[b, i]]]).float()
            keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
            scores = torch.einsum("hd,khd->hk", q[b * n + i].float(), keys) * scale
            out[b * n + i] = torch.einsum("hk,khd->hd", torch.softmax(scores, -1), values)
    return out


def prefix_pass(q, prefix_k, prefix_v, n, scale):
    """FA3's prefix pass (non-causal, with the log-sum-exp), through the reference."""
    bs, p, kv_heads, dim = prefix_k.shape
    slots = torch.arange(bs * p).view(bs, p)
    o, lse = fa3_reference.flash_attn_with_kvcache(
        q, prefix_k.reshape(-1, 1, kv_heads, dim), prefix_v.reshape(-1, 1, kv_heads, dim),
        cache_seqlens=torch.full((bs,), p), page_table=slots,
        cu_seqlens_q=torch.arange(0, bs * n + 1, n), softmax_scale=scale, return_softmax_lse=True,
    )
    return o, lse


def case(bs=3, budget=15, heads=8, kv_heads=2, dim=32, prefix=7, dtype=torch.float32, seed=0):
    tree = trees(bs, budget, seed=seed)
    n = tree.num_verify_tokens
    gen = torch.Generator().manual_seed(seed + 100)
    q = torch.randn(bs * n, heads, dim, generator=gen).to(dtype)
    tree_k = torch.randn(bs * n, kv_heads, dim, generator=gen).to(dtype)
    tree_v = torch.randn(bs * n, kv_heads, dim, generator=gen).to(dtype)
    prefix_k = torch.randn(bs, prefix, kv_heads, dim, generator=gen).to(dtype)
    prefix_v = torch.randn(bs, prefix, kv_heads, dim, generator=gen).to(dtype)
    return tree, q, tree_k, tree_v, prefix_k, prefix_v, 1 / math.sqrt(dim)


# ------------------------------------------------------------------------------- the tree kernel


@pytest.mark.parametrize(("heads", "kv_heads"), [(8, 2), (4, 4), (6, 1)])
@pytest.mark.parametrize("budget", [1, 15, 32])
def test_the_tree_part_merged_into_the_prefix_pass_is_one_softmax_over_prefix_and_ancestors(heads, kv_heads, budget):
    tree, q, tree_k, tree_v, prefix_k, prefix_v, scale = case(heads=heads, kv_heads=kv_heads, budget=budget)
    n = tree.num_verify_tokens
    o, lse = prefix_pass(q, prefix_k, prefix_v, n, scale)
    merged = tree_attention.ddtree_merge_tree_attention(q, tree_k, tree_v, tree.visibility, o, lse, scale,
                                                        use_triton=False)
    assert merged.data_ptr() == o.data_ptr(), "merged in place"
    expected = reference(q, prefix_k, prefix_v, tree_k, tree_v, tree.visibility, scale)
    torch.testing.assert_close(merged, expected, rtol=1e-5, atol=1e-5)


def test_a_truncated_tree_reads_its_mask_through_a_strided_view():
    # auto truncates the widest tree: its visibility is a [:, :n, :n] view of the widest one.
    tree, q, tree_k, tree_v, prefix_k, prefix_v, scale = case(budget=31)
    cut = ddtree_utils.ddtree_truncate_tree(tree, 15)
    assert not cut.visibility.is_contiguous()
    n = cut.num_verify_tokens
    q, tree_k, tree_v = (t.view(3, 32, *t.shape[1:])[:, :n].reshape(3 * n, *t.shape[1:]) for t in (q, tree_k, tree_v))
    o, lse = prefix_pass(q, prefix_k, prefix_v, n, scale)
    tree_attention.ddtree_merge_tree_attention(q, tree_k, tree_v, cut.visibility, o, lse, scale, use_triton=False)
    torch.testing.assert_close(o, reference(q, prefix_k, prefix_v, tree_k, tree_v, cut.visibility, scale),
                               rtol=1e-5, atol=1e-5)


def test_a_row_whose_mask_is_empty_still_sees_itself_and_no_row_is_ever_nan():
    # Rows of a padded request in a CUDA graph may hold zeros; an empty prefix row's lse is +-inf.
    tree, q, tree_k, tree_v, prefix_k, prefix_v, scale = case(bs=2, budget=3)
    n = tree.num_verify_tokens
    o, lse = prefix_pass(q, prefix_k, prefix_v, n, scale)
    mask = torch.zeros_like(tree.visibility)
    lse[:, :n] = float("inf")  # request 0: the kernel's empty-row value
    lse[:, n:] = float("-inf")  # request 1: no prefix either
    tree_attention.ddtree_merge_tree_attention(q, tree_k, tree_v, mask, o, lse, scale, use_triton=False)
    group = q.shape[1] // tree_k.shape[1]
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o, tree_v.repeat_interleave(group, 1), rtol=1e-6, atol=1e-6)  # itself alone


@pytest.mark.parametrize(("bad", "message"), [
    ("mask_shape", "tree_mask must be"),
    ("rows", "whole number of"),
    ("lse", "lse_prefix must be"),
    ("heads", "query heads over"),
])
def test_a_malformed_call_is_refused_with_what_is_wrong(bad, message):
    tree, q, tree_k, tree_v, prefix_k, prefix_v, scale = case(bs=2, budget=3)
    n = tree.num_verify_tokens
    o, lse = prefix_pass(q, prefix_k, prefix_v, n, scale)
    mask = tree.visibility
    if bad == "mask_shape":
        mask = mask[:, :, :2]
    elif bad == "rows":
        q, tree_k, tree_v, o = q[:-1], tree_k[:-1], tree_v[:-1], o[:-1]
    elif bad == "lse":
        lse = lse[:, 1:]
    elif bad == "heads":
        tree_k = tree_k.repeat(1, 3, 1)[:, :3]
    with pytest.raises(ValueError, match=message):
        tree_attention.ddtree_merge_tree_attention(q, tree_k, tree_v, mask, o, lse, scale, use_triton=False)


@pytest.fixture
def interpreted(monkeypatch):
    """``ddtree_tree_attention`` imported afresh with ``TRITON_INTERPRET=1``: its kernel runs in Triton's
    interpreter, in this process, and CPU tensors take the Triton launch (``_use_triton``)."""
    return interpreted_copy(tree_attention, monkeypatch)


def ancestor_masks(requests: int, n: int) -> torch.Tensor:
    parent = [[-1] + [random.Random(b * 7 + i).randrange(i) for i in range(1, n)] for b in range(requests)]
    mask = torch.zeros(requests, n, n, dtype=torch.bool)
    for b in range(requests):
        for i in range(n):
            j = i
            while j >= 0:
                mask[b, i, j] = True
                j = parent[b][j]
    return mask


def test_the_triton_kernel_computes_what_the_torch_path_computes_in_the_interpreter(interpreted):
    # fp32 and fp16 (Triton's CPU interpreter does not compute bf16 dots; bf16 runs on the GPU check,
    # ci/gpu/host/fa3_tree_bench.py). Batches of several requests, GQA groups 1-6, widths 5-65
    # (several key blocks), an empty prefix row; bool and uint8 masks.
    gen = torch.Generator().manual_seed(0)
    worst = {}
    for dtype in (torch.float32, torch.float16):
        for bs, n, heads, kv_heads, dim in ((3, 16, 8, 2, 32), (2, 33, 4, 4, 64), (1, 65, 6, 1, 16), (2, 5, 8, 8, 48)):
            q = torch.randn(bs * n, heads, dim, generator=gen).to(dtype)
            k = torch.randn(bs * n, kv_heads, dim, generator=gen).to(dtype)
            v = torch.randn(bs * n, kv_heads, dim, generator=gen).to(dtype)
            mask = ancestor_masks(bs + 1, n)
            if n == 5:
                mask = mask.to(torch.uint8)
            o = torch.randn(bs * n, heads, dim, generator=gen).to(dtype)
            lse = torch.randn(heads, bs * n, generator=gen) * 3
            lse[0, 0] = float("inf")
            torch_out = interpreted.ddtree_tree_attention_torch(q, k, v, mask, o, lse, 0.3)
            assert interpreted._use_triton(q)
            kernel_out = interpreted.ddtree_merge_tree_attention(q, k, v, mask, o, lse, 0.3)
            assert kernel_out.data_ptr() == o.data_ptr(), "merged in place"
            err = ((kernel_out.float() - torch_out.float()).abs().max() / torch_out.float().abs().max()).item()
            worst[str(dtype)] = max(worst.get(str(dtype), 0.0), err)
    assert worst["torch.float32"] < 1e-5, worst
    assert worst["torch.float16"] < 2e-3, worst


@pytest.mark.parametrize("strided", ["q", "k", "v", "o_prefix", "tree_mask"])
def test_the_triton_launch_refuses_an_operand_strided_in_its_last_dimension(interpreted, strided):
    tree, q, tree_k, tree_v, prefix_k, prefix_v, scale = case(bs=2, budget=3)
    n = tree.num_verify_tokens
    o, lse = prefix_pass(q, prefix_k, prefix_v, n, scale)
    operands = dict(q=q, k=tree_k, v=tree_v, tree_mask=tree.visibility, o_prefix=o)
    operands[strided] = operands[strided].transpose(-1, -2).contiguous().transpose(-1, -2)
    assert operands[strided].stride(-1) != 1
    with pytest.raises(ValueError, match="contiguous in its last dimension"):
        interpreted.ddtree_merge_tree_attention(operands["q"], operands["k"], operands["v"], operands["tree_mask"],
                                                operands["o_prefix"], lse, scale)


def test_a_cuda_query_takes_the_triton_launch():
    assert tree_attention._use_triton(as_if_cuda(torch.zeros(2, 4, 8)))


def test_without_triton_every_query_takes_the_torch_path(monkeypatch):
    # A None entry in sys.modules makes ``import triton`` raise ImportError.
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    module = load_fresh(tree_attention, monkeypatch)
    assert module.triton is None and module.tl is None
    assert not module._use_triton(as_if_cuda(torch.zeros(2, 4, 8)))
    tree, q, tree_k, tree_v, prefix_k, prefix_v, scale = case(bs=2, budget=3)
    o, lse = prefix_pass(q, prefix_k, prefix_v, tree.num_verify_tokens, scale)
    module.ddtree_merge_tree_attention(q, tree_k, tree_v, tree.visibility, o, lse, scale)
    torch.testing.assert_close(o, reference(q, prefix_k, prefix_v, tree_k, tree_v, tree.visibility, scale),
                               rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------- the fa3 backend


class KVPool:
    """Per-layer K/V tensors addressed by slot, as the backend reads and writes them (page size 1)."""

    def __init__(self, slots: int, kv_heads: int, dim: int, dtype=torch.float32, seed: int = 3):
        gen = torch.Generator().manual_seed(seed)
        self.k = {0: torch.randn(slots, kv_heads, dim, generator=gen).to(dtype)}
        self.v = {0: torch.randn(slots, kv_heads, dim, generator=gen).to(dtype)}

    def set_kv_buffer(self, layer, loc, k, v, k_scale=None, v_scale=None):
        rows = self.k[layer.layer_id].shape[1:]
        self.k[layer.layer_id][loc.loc] = k.reshape(-1, *rows)
        self.v[layer.layer_id][loc.loc] = v.reshape(-1, *rows)

    def get_kv_buffer(self, layer_id):
        return self.k[layer_id], self.v[layer_id]


def layer(heads: int, kv_heads: int, dim: int):
    return SimpleNamespace(
        layer_id=0, tp_q_head_num=heads, tp_k_head_num=kv_heads, tp_v_head_num=kv_heads, head_dim=dim,
        v_head_dim=dim, scaling=1 / math.sqrt(dim), logit_cap=0.0, is_cross_attention=False,
        sliding_window_size=None, attn_type=None, k_scale=None, v_scale=None,
    )


def backend(pool: KVPool, req_to_token: torch.Tensor, n: int):
    """The tree's FlashAttentionBackend with the fields its DDTREE verify reads (its __init__ needs a model
    runner and a GPU; ``_check_ddtree_verify_support`` is tested on its own below)."""
    b = object.__new__(fa3.FlashAttentionBackend)
    fields = dict(
        ddtree_verify=True, tree_verify=True, topk=n - 1, speculative_num_draft_tokens=n, device=torch.device("cpu"),
        req_to_token_pool=SimpleNamespace(req_to_token=req_to_token), req_to_token=req_to_token,
        token_to_kv_pool=pool, page_size=1, fa_impl_ver=3, attn_cp_size=1, fa_skip_kv_cache=False, use_mla=False,
        kv_cache_is_mxfp8=False, kv_cache_dtype_str="auto", has_local_attention=False,
        use_sliding_window_kv_pool=False, num_splits=0, max_context_len=req_to_token.shape[1],
        full_cg_prefill_metadata=None, _ddtree_tree_mask_buf=None,
        local_attn_builder=None,  # 0.5.23: local attention's metadata builder (None: no local attention)
    )
    for name, value in fields.items():
        setattr(b, name, value)
    return b


def verify_batch(tree, seq_lens, req_to_token, spec_info):
    n = tree.num_verify_tokens
    bs = seq_lens.numel()
    window = torch.stack([req_to_token[b, int(seq_lens[b]): int(seq_lens[b]) + n] for b in range(bs)])
    return SimpleNamespace(
        forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, seq_lens=seq_lens, seq_lens_cpu=seq_lens.clone(),
        req_pool_indices=torch.arange(bs), out_cache_loc=window.reshape(-1).long(), spec_info=spec_info,
        attn_cp_metadata=None, encoder_lens=None,
        out_cache_loc_is_physical=False,  # 0.5.23's KVWriteLoc carries the batch's physical-id mark
    )


@pytest.fixture
def fa3_in_torch(monkeypatch):
    monkeypatch.setattr(fa3, "flash_attn_with_kvcache", fa3_reference.flash_attn_with_kvcache)
    monkeypatch.setattr(fa3, "merge_state_v2", fa3_reference.merge_state_v2)

    def page_table(req_to_token, req_pool_indices, cache_seqlens, page_table, page_size, **unused):
        assert page_size == 1
        for row, (req, length) in enumerate(zip(req_pool_indices.tolist(), cache_seqlens.tolist(), strict=True)):
            page_table[row, :length] = req_to_token[req, :length]

    monkeypatch.setattr(fa3, "build_trtllm_mha_page_table", page_table)


def verify_input(tree) -> DDTreeVerifyInput:
    verify = ddtree_utils.ddtree_verify_inputs(tree, torch.zeros(tree.batch_size, dtype=torch.long), with_mask=False)
    return DDTreeVerifyInput.from_verify_inputs(tree=tree, verify=verify, root_tokens=torch.zeros(tree.batch_size),
                                                topk=4, compact_mask=True)


def expected_output(pool, req_to_token, seq_lens, fb, q, tree, lay):
    bs, n = seq_lens.numel(), tree.num_verify_tokens
    out = []
    for b in range(bs):
        prefix_slots = req_to_token[b, : int(seq_lens[b])].long()
        rows = slice(b * n, (b + 1) * n)
        out.append(reference(q[rows], pool.k[0][prefix_slots][None], pool.v[0][prefix_slots][None],
                             pool.k[0][fb.out_cache_loc[rows]], pool.v[0][fb.out_cache_loc[rows]],
                             tree.visibility[b: b + 1], lay.scaling))
    return torch.cat(out)


def test_the_eager_verify_attends_each_tree_token_to_its_prefix_and_ancestors(fa3_in_torch):
    heads, kv_heads, dim, bs = 8, 2, 16, 3
    tree = trees(bs, 15, seed=5)
    n = tree.num_verify_tokens
    req_to_token = (torch.arange(bs * 64, dtype=torch.int32).view(bs, 64) + 1)
    pool = KVPool(bs * 64 + 1, kv_heads, dim)
    seq_lens = torch.tensor([5, 17, 9])
    spec = verify_input(tree)
    assert spec.custom_mask is None and spec.tree_mask is tree.visibility  # no FULL_MASK for fa3
    fb = verify_batch(tree, seq_lens, req_to_token, spec)
    be = backend(pool, req_to_token, n)
    metadata = fa3.FlashAttentionMetadata()
    be._init_ddtree_verify_metadata(metadata, fb, eager_max_k=int(seq_lens.max()))
    # mask -> keys: the prefix pass sees exactly the committed prefix of each request, N queries each
    assert metadata.cache_seqlens_int32.tolist() == seq_lens.tolist()
    assert metadata.cu_seqlens_q.tolist() == list(range(0, bs * n + 1, n))
    assert metadata.cu_seqlens_k.tolist() == [0, 5, 22, 31]
    assert torch.equal(metadata.page_table, req_to_token[:, : int(seq_lens.max())])
    assert metadata.ddtree_tree_mask is tree.visibility
    be.forward_metadata = metadata
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(bs * n, heads * dim, generator=gen)
    k = torch.randn(bs * n, kv_heads * dim, generator=gen)
    v = torch.randn(bs * n, kv_heads, dim, generator=gen)
    lay = layer(heads, kv_heads, dim)
    out = be.forward_extend(q, k, v, lay, fb)
    # the forward wrote the tree tokens' K/V into their window slots, and read them back the same
    assert torch.equal(pool.k[0][fb.out_cache_loc], k.view(-1, kv_heads, dim))
    expected = expected_output(pool, req_to_token, seq_lens, fb, q.view(-1, heads, dim), tree, lay)
    torch.testing.assert_close(out.view(-1, heads, dim), expected, rtol=1e-5, atol=1e-5)


def eager_verify(tree, seq_lens, *, heads, kv_heads, dim, row, backend_width=None, seed=0):
    """One eager DDTREE verify through the backend with no fresh K/V (the tree tokens' rows are read back
    from their slots): the metadata, the output and the reference's."""
    bs, n = tree.batch_size, tree.num_verify_tokens
    req_to_token = (torch.arange(bs * row, dtype=torch.int32).view(bs, row) + 1)
    pool = KVPool(bs * row + 1, kv_heads, dim)
    fb = verify_batch(tree, seq_lens, req_to_token, verify_input(tree))
    be = backend(pool, req_to_token, backend_width or n)
    metadata = fa3.FlashAttentionMetadata()
    be._init_ddtree_verify_metadata(metadata, fb, eager_max_k=row)
    be.forward_metadata = metadata
    q = torch.randn(bs * n, heads * dim, generator=torch.Generator().manual_seed(seed))
    lay = layer(heads, kv_heads, dim)
    out = be.forward_extend(q, None, None, lay, fb)
    expected = expected_output(pool, req_to_token, seq_lens, fb, q.view(-1, heads, dim), tree, lay)
    return metadata, out.view(-1, heads, dim), expected


def test_a_verify_without_fresh_kv_reads_the_tree_tokens_back_from_their_slots(fa3_in_torch):
    _, out, expected = eager_verify(trees(2, 7, seed=2), torch.tensor([3, 11]), heads=4, kv_heads=4, dim=8,
                                    row=32, seed=4)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_a_graph_replay_copies_the_masks_into_the_captured_buffer_and_pads_with_rows_that_see_themselves(
        fa3_in_torch):
    heads, kv_heads, dim, real_bs, graph_bs = 4, 2, 8, 3, 4
    tree = trees(real_bs, 7, seed=7)
    n = tree.num_verify_tokens
    req_to_token = (torch.arange(graph_bs * 40, dtype=torch.int32).view(graph_bs, 40) + 1)
    pool = KVPool(graph_bs * 40 + 1, kv_heads, dim)
    be = backend(pool, req_to_token, n)
    # What init_cuda_graph_state allocates and _bind_metadata_buffers binds for the tree verify.
    be._ddtree_tree_mask_buf = torch.eye(n, dtype=torch.uint8).expand(8, n, n).contiguous()
    metadata = fa3.FlashAttentionMetadata(
        cache_seqlens_int32=torch.zeros(graph_bs, dtype=torch.int32), max_seq_len_q=n,
        cu_seqlens_q=torch.arange(0, graph_bs * n + 1, n, dtype=torch.int32),
        cu_seqlens_k=torch.zeros(graph_bs + 1, dtype=torch.int32),
        page_table=torch.zeros(graph_bs, 40, dtype=torch.int32),
        ddtree_tree_mask=be._ddtree_tree_mask_buf[:graph_bs],
    )
    be.target_verify_metadata_topk_normal = {graph_bs: metadata}
    # The graph runner pads the batch: seq_lens of a padded request are the fill value (1).
    seq_lens = torch.tensor([6, 2, 30, 1])
    spec = verify_input(tree)
    got = be._apply_ddtree_verify_metadata(graph_bs, torch.arange(graph_bs), seq_lens, spec)
    assert got is metadata
    assert metadata.cache_seqlens_int32.tolist() == seq_lens.tolist()
    assert metadata.cu_seqlens_k.tolist() == [0, 6, 8, 38, 39]
    assert torch.equal(metadata.page_table[2, :30], req_to_token[2, :30])
    assert torch.equal(be._ddtree_tree_mask_buf[:real_bs].bool(), tree.visibility)
    assert torch.equal(be._ddtree_tree_mask_buf[real_bs], torch.eye(n, dtype=torch.uint8))  # padded: itself
    # The captured forward then reads the buffer, for the real rows and the padded one alike.
    padded_tree = SimpleNamespace(num_verify_tokens=n, visibility=be._ddtree_tree_mask_buf[:graph_bs].bool())
    fb = verify_batch(padded_tree, seq_lens, req_to_token, spec)
    be.forward_metadata = metadata
    q = torch.randn(graph_bs * n, heads * dim, generator=torch.Generator().manual_seed(1))
    out = be.forward_extend(q, None, None, layer(heads, kv_heads, dim), fb)
    expected = expected_output(pool, req_to_token, seq_lens, fb, q.view(-1, heads, dim), padded_tree,
                               layer(heads, kv_heads, dim))
    torch.testing.assert_close(out.view(-1, heads, dim), expected, rtol=1e-5, atol=1e-5)


def test_a_verify_input_without_its_compact_mask_is_refused_by_the_fa3_backend():
    with pytest.raises(RuntimeError, match="compact tree mask"):
        fa3.ddtree_verify_tree_mask(SimpleNamespace(tree_mask=None))


def test_the_warm_up_input_carries_a_mask_where_every_node_sees_only_itself_for_any_batch(monkeypatch):
    args = SimpleNamespace(speculative_eagle_topk=4, speculative_num_steps=1, speculative_num_draft_tokens=9)
    mask = torch.zeros(16, dtype=torch.bool)
    if "server_args" in inspect.signature(create_dummy_verify_input).parameters:  # 0.5.17: the widths from it
        spec = create_dummy_verify_input(SpeculativeAlgorithm.DDTREE, args, mask, 9, is_draft_worker=False)
    else:  # 0.5.23: from the published spec bag
        monkeypatch.setattr(spec_info_mod, "get_spec_config", lambda: args)
        spec = create_dummy_verify_input(SpeculativeAlgorithm.DDTREE, mask, 9, is_draft_worker=False)
    assert spec.tree_mask.shape[1:] == (9, 9) and spec.tree_mask.shape[0] >= 4096
    assert spec.tree_mask.stride(0) == 0  # a view: no memory per row
    assert torch.equal(spec.tree_mask[4095], torch.eye(9, dtype=torch.bool))


@pytest.mark.parametrize(("field", "value", "what"), [
    ("fa_impl_ver", 4, "FA4"),
    ("use_mla", True, "MLA models"),
    ("has_swa", True, "sliding-window or local attention"),
    ("has_softcap", True, "soft-capping"),
    ("kv_cache_dtype_str", "fp8_e4m3", "--kv-cache-dtype fp8_e4m3"),
    ("page_size", 16, "--page-size > 1"),
    ("attn_cp_size", 2, "context parallelism"),
])
def test_what_the_fa3_tree_verify_does_not_cover_is_refused_naming_triton(field, value, what):
    be = object.__new__(fa3.FlashAttentionBackend)
    plain = dict(fa_impl_ver=3, use_mla=False, has_swa=False, has_local_attention=False, has_softcap=False,
                 kv_cache_dtype_str="auto", page_size=1, attn_cp_size=1)
    for name, v in {**plain, field: value}.items():
        setattr(be, name, v)
    with pytest.raises(ValueError, match="pass --attention-backend triton") as refused:
        be._check_ddtree_verify_support()
    assert what in str(refused.value)
    for name, v in plain.items():
        setattr(be, name, v)
    be._check_ddtree_verify_support()  # the plain configuration passes


def test_the_eager_verify_takes_the_rounds_width_from_its_mask_not_the_backends(fa3_in_torch):
    # auto without CUDA graphs verifies the chain's width (16) on the backend built for the widest (64).
    tree = trees(2, 15, seed=11)
    n = tree.num_verify_tokens
    metadata, out, expected = eager_verify(tree, torch.tensor([4, 9]), heads=4, kv_heads=2, dim=8, row=48,
                                           backend_width=4 * n, seed=2)
    assert metadata.max_seq_len_q == n and metadata.cu_seqlens_q.tolist() == [0, n, 2 * n]
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
