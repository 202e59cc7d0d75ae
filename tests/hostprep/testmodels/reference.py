"""A plain-torch reference forward of the tiny test models (Qwen3 target, DFlash draft), written from
the architecture (RMSNorm, neox RoPE, per-head q/k norm, GQA, SiLU MLP) to check what the weights do."""

from __future__ import annotations

import torch

from patchkit.hostprep import testmodels as tm


def rms(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + tm.RMS_EPS) * weight


def rope(x, positions):
    """Neox-style rotary embedding over the last dim of [seq, heads, head_dim]."""
    half = tm.HEAD_DIM // 2
    inv_freq = tm.ROPE_THETA ** (-torch.arange(0, tm.HEAD_DIM, 2, dtype=torch.float32) / tm.HEAD_DIM)
    angles = positions.float()[:, None] * inv_freq[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(w, prefix, xn, positions, mask, extra_kv=None):
    """Self-attention of the rows of ``xn``; ``mask[i, j]`` says whether row i sees key j."""
    n = xn.shape[0]
    heads = w[f"{prefix}self_attn.q_proj.weight"].shape[0] // tm.HEAD_DIM  # --heads: read off the weights
    q = (xn @ w[f"{prefix}self_attn.q_proj.weight"].T).view(n, heads, tm.HEAD_DIM)
    k = (xn @ w[f"{prefix}self_attn.k_proj.weight"].T).view(n, tm.KV_HEADS, tm.HEAD_DIM)
    v = (xn @ w[f"{prefix}self_attn.v_proj.weight"].T).view(n, tm.KV_HEADS, tm.HEAD_DIM)
    q = rope(rms(q, w[f"{prefix}self_attn.q_norm.weight"]), positions)
    k = rope(rms(k, w[f"{prefix}self_attn.k_norm.weight"]), positions)
    if extra_kv is not None:  # context keys/values in front (the draft's context cache)
        k, v = torch.cat([extra_kv[0], k]), torch.cat([extra_kv[1], v])
    group = heads // tm.KV_HEADS
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / tm.HEAD_DIM**0.5
    scores = scores.masked_fill(~mask[None], float("-inf"))
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, heads * tm.HEAD_DIM)
    return out @ w[f"{prefix}self_attn.o_proj.weight"].T


def mlp(w, prefix, x):
    gate = x @ w[f"{prefix}mlp.gate_proj.weight"].T
    up = x @ w[f"{prefix}mlp.up_proj.weight"].T
    return (torch.nn.functional.silu(gate) * up) @ w[f"{prefix}mlp.down_proj.weight"].T


def layer(w, prefix, h, positions, mask, extra_kv=None):
    h = h + attention(w, prefix, rms(h, w[f"{prefix}input_layernorm.weight"]), positions, mask, extra_kv)
    return h + mlp(w, prefix, rms(h, w[f"{prefix}post_attention_layernorm.weight"]))


def target_logits(w, ids):
    """Logits at every position of ``ids`` (causal); ``ids`` a list or a tensor (so torch.func.vmap can
    batch it over many sequences of one length)."""
    ids = torch.as_tensor(ids)
    n = len(ids)
    h = w["model.embed_tokens.weight"][ids]
    positions, causal = torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril()
    for i in range(tm.TARGET_LAYERS):
        h = layer(w, f"model.layers.{i}.", h, positions, causal)
    return rms(h, w["model.norm.weight"]) @ w["lm_head.weight"].T


def greedy(w, prompt, steps):
    ids = list(prompt)
    for _ in range(steps):
        ids.append(int(target_logits(w, ids)[-1].argmax()))
    return ids[len(prompt):]


def draft_block_logits(target_w, draft_w, context_len, bonus):
    """Logits of block positions 1..L-1 for the block [bonus, mask...] after ``context_len`` tokens
    (``bonus`` an int or a 0-d tensor, which torch.func.vmap can batch).

    The context features go through fc (zero in the test draft), so context keys and values are zero.
    """
    ids = torch.cat([torch.as_tensor(bonus).view(1), torch.full((tm.BLOCK_SIZE - 1,), tm.MASK_TOKEN)])
    h = target_w["model.embed_tokens.weight"][ids]
    positions = context_len + torch.arange(tm.BLOCK_SIZE)
    zeros = torch.zeros(context_len, tm.KV_HEADS, tm.HEAD_DIM)
    mask = torch.ones(tm.BLOCK_SIZE, context_len + tm.BLOCK_SIZE, dtype=torch.bool)  # non-causal
    h = layer(draft_w, "layers.0.", h, positions, mask, extra_kv=(zeros, zeros))
    return (rms(h, draft_w["norm.weight"]) @ target_w["lm_head.weight"].T)[1:]
