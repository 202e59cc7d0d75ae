"""A torch reference of the two FA3 entry points SGLang's fa3 backend calls on the verify path
(``flash_attn_with_kvcache``, page size 1; ``merge_state_v2``), for CPU tests of that backend's own
code. It is the definition FA3 implements: for each request, the queries of its ``cu_seqlens_q``
rows against the first ``cache_seqlens[b]`` slots of its ``page_table`` row, bottom-right causal when
asked, one softmax per row; ``return_softmax_lse`` gives the natural-log normaliser laid out as
FA3's varlen call does (``[heads, total_q]``). Anything this reference does not model is refused."""

from __future__ import annotations

import torch


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False,
                            num_splits=0, out=None, ver=3, **unused):
    assert k is None and v is None, "appending K/V is not modelled"
    assert tuple(window_size) == (-1, -1) and not softcap, "windows and soft-capping are not modelled"
    assert cu_seqlens_q is not None, "only the varlen layout the backend uses is modelled"
    heads, dim = q.shape[-2], q.shape[-1]
    kv_heads = k_cache.shape[-2]
    keys_all = k_cache.reshape(-1, kv_heads, dim)
    values_all = v_cache.reshape(-1, kv_heads, v_cache.shape[-1])
    group = heads // kv_heads
    scale = softmax_scale if softmax_scale is not None else dim ** -0.5
    starts = cu_seqlens_q.tolist()
    o = torch.zeros(q.shape[0], heads, values_all.shape[-1], dtype=q.dtype)
    lse = torch.full((heads, q.shape[0]), float("-inf"), dtype=torch.float32)
    for b in range(len(starts) - 1):
        first, last = starts[b], starts[b + 1]
        n_keys = int(cache_seqlens[b])
        if last == first or n_keys == 0:
            continue
        slots = page_table[b, :n_keys].long()
        keys = keys_all[slots].float().repeat_interleave(group, 1)
        values = values_all[slots].float().repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", q[first:last].float(), keys) * scale
        if causal:  # aligned to the bottom right: the last query sees every key
            n_q = last - first
            hidden = torch.arange(n_keys).unsqueeze(0) > torch.arange(n_q).unsqueeze(1) + n_keys - n_q
            scores = scores.masked_fill(hidden.unsqueeze(0), float("-inf"))
        lse[:, first:last] = torch.logsumexp(scores, -1)
        o[first:last] = torch.einsum("hqk,khd->qhd", torch.softmax(scores, -1), values).to(q.dtype)
    if out is not None:
        out.copy_(o)
        o = out
    return (o, lse) if return_softmax_lse else o


def merge_state_v2(v_a, s_a, v_b, s_b, v_merged=None, s_merged=None):
    """Two partial attentions ``[tokens, heads, dim]`` with their normalisers ``[tokens, heads]``, merged."""
    s_a, s_b = s_a.float(), s_b.float()
    top = torch.maximum(s_a, s_b)
    w_a, w_b = torch.exp(s_a - top), torch.exp(s_b - top)
    merged = (w_a.unsqueeze(-1) * v_a.float() + w_b.unsqueeze(-1) * v_b.float()) / (w_a + w_b).unsqueeze(-1)
    return merged.to(v_a.dtype), top + torch.log(w_a + w_b)
