"""Triton prototype of the DDTree hot path (``ddtree_hot_path.py --triton-proto``).

Not part of the patch set: a measured proposal. Three fused kernels, one launch each:

* ``heap_tree_kernel``: one program per request runs the reference best-first heap itself, with the
  frontier held in registers (pop = a few block-wide reductions), scores in fp64 updated exactly as
  the reference does (sibling: minus this rank's log-prob plus the next; child: plus the next depth's
  top), ties broken by the rank tuple packed 10 bits per depth into three int64 words, so the pop
  order, and hence the node numbering, is the reference's by construction. The visibility matrix
  is then filled by chasing parent pointers L times.
* ``verify_inputs_kernel``: positions, the flat FULL_MASK rows and the EAGLE-style retrieve tensors,
  one program per (request, node).
* ``walk_kernel``: the greedy / sample-and-match walk, one program per request.

Plus an exact top-K (bf16 radix top-k for the K-th value, an int32 key that keeps everything above it
and the smallest ids equal to it, a sort of the K survivors by (value desc, id asc)) and an fp32
log-sum-exp kernel. Works on CUDA; on CPU only under TRITON_INTERPRET=1 (slow, for checking).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_BUDGET = 1021  # ranks are packed 10 bits each (rank + 2 < 1024)
MAX_DEPTH = 18  # three 60-bit words of six ranks


@triton.jit
def _set_rank(w0, w1, w2, pos, value):
    """The rank tuple with slot ``pos`` (0-based depth) set to ``value`` (rank + 1; 0 = absent)."""
    word = pos // 6
    shift = tl.cast((5 - pos % 6) * 10, tl.int64)
    clear = ~(tl.cast(1023, tl.int64) << shift)
    put = tl.cast(value, tl.int64) << shift
    return (
        tl.where(word == 0, (w0 & clear) | put, w0),
        tl.where(word == 1, (w1 & clear) | put, w1),
        tl.where(word == 2, (w2 & clear) | put, w2),
    )


@triton.jit
def heap_tree_kernel(lp_ptr, ids_ptr, tok_ptr, depth_ptr, parent_ptr, num_ptr, vis_ptr, K, stride_b,
                     BUDGET: tl.constexpr, L: tl.constexpr, BLOCK: tl.constexpr, VIS_ROWS: tl.constexpr):
    b = tl.program_id(0)
    n: tl.constexpr = BUDGET + 1
    idx = tl.arange(0, BLOCK)
    lp_base = lp_ptr + b * stride_b
    ids_base = ids_ptr + b * stride_b
    out_tok = tok_ptr + b * BUDGET
    out_depth = depth_ptr + b * BUDGET
    out_parent = parent_ptr + b * n
    tl.store(out_tok + idx, tl.zeros([BLOCK], tl.int64), mask=idx < BUDGET)
    tl.store(out_depth + idx, tl.zeros([BLOCK], tl.int64), mask=idx < BUDGET)
    tl.store(out_parent + idx, tl.full([BLOCK], -1, tl.int64), mask=idx < n)
    tl.debug_barrier()

    neg = float("-inf")
    first = tl.cast(tl.load(lp_base), tl.float64)
    f_score = tl.where(idx == 0, first, tl.full([BLOCK], neg, tl.float64))
    f_w0 = tl.where(idx == 0, tl.full([BLOCK], 1 << 50, tl.int64), tl.zeros([BLOCK], tl.int64))
    f_w1 = tl.zeros([BLOCK], tl.int64)
    f_w2 = tl.zeros([BLOCK], tl.int64)
    # meta = parent | depth << 11 | rank << 16; the start entry is (parent 0, depth 1, rank 0).
    f_meta = tl.where(idx == 0, tl.full([BLOCK], 1 << 11, tl.int32), tl.zeros([BLOCK], tl.int32))
    f_valid = idx == 0
    count = tl.cast(0, tl.int32)
    top = tl.cast(1, tl.int32)
    for _ in range(BUDGET):
        alive = tl.max(tl.cast(f_valid, tl.int32), 0) > 0
        sc = tl.where(f_valid, f_score, neg)
        best = tl.max(sc, 0)
        cand = f_valid & (sc == best)
        # Exact score ties are rare; only then compare the rank tuples word by word.
        if tl.sum(tl.cast(cand, tl.int32), 0) > 1:
            m0 = tl.min(tl.where(cand, f_w0, 0x7FFFFFFFFFFFFFFF), 0)
            cand = cand & (f_w0 == m0)
            m1 = tl.min(tl.where(cand, f_w1, 0x7FFFFFFFFFFFFFFF), 0)
            cand = cand & (f_w1 == m1)
            m2 = tl.min(tl.where(cand, f_w2, 0x7FFFFFFFFFFFFFFF), 0)
            cand = cand & (f_w2 == m2)
        slot = tl.min(tl.where(cand, idx, BLOCK), 0)
        sel = idx == slot
        meta = tl.sum(tl.where(sel, f_meta, 0), 0)
        score = tl.max(tl.where(sel, f_score, neg), 0)
        w0 = tl.sum(tl.where(sel, f_w0, 0), 0)
        w1 = tl.sum(tl.where(sel, f_w1, 0), 0)
        w2 = tl.sum(tl.where(sel, f_w2, 0), 0)
        parent = meta & 2047
        depth = (meta >> 11) & 31
        rank = meta >> 16
        row = (depth - 1) * K

        token = tl.load(ids_base + row + rank, mask=alive, other=0)
        tl.store(out_tok + count, token, mask=alive)
        tl.store(out_depth + count, tl.cast(depth, tl.int64), mask=alive)
        tl.store(out_parent + count + 1, tl.cast(parent, tl.int64), mask=alive)

        # Next sibling replaces the popped entry: score - lp[d-1][r] + lp[d-1][r+1], as the reference.
        has_sib = alive & (rank + 1 < K)
        here = tl.cast(tl.load(lp_base + row + rank, mask=alive, other=0.0), tl.float64)
        nxt = tl.cast(tl.load(lp_base + row + rank + 1, mask=has_sib, other=0.0), tl.float64)
        sib_score = score - here + nxt
        s0, s1, s2 = _set_rank(w0, w1, w2, depth - 1, rank + 2)
        f_score = tl.where(sel, sib_score, f_score)
        f_meta = tl.where(sel, meta + (1 << 16), f_meta)
        f_w0 = tl.where(sel, s0, f_w0)
        f_w1 = tl.where(sel, s1, f_w1)
        f_w2 = tl.where(sel, s2, f_w2)
        f_valid = tl.where(sel, has_sib, f_valid)

        # First child goes to a fresh slot: score + lp[d][0].
        has_child = alive & (depth < L)
        child_score = score + tl.cast(tl.load(lp_base + depth * K, mask=has_child, other=0.0), tl.float64)
        c0, c1, c2 = _set_rank(w0, w1, w2, depth, 1)
        new = (idx == top) & has_child
        f_score = tl.where(new, child_score, f_score)
        f_meta = tl.where(new, (count + 1) | ((depth + 1) << 11), f_meta)
        f_w0 = tl.where(new, c0, f_w0)
        f_w1 = tl.where(new, c1, f_w1)
        f_w2 = tl.where(new, c2, f_w2)
        f_valid = f_valid | new
        top = top + tl.cast(has_child, tl.int32)
        count = count + tl.cast(alive, tl.int32)

    tl.store(num_ptr + b, tl.cast(count, tl.int64))
    tl.debug_barrier()
    vis_base = vis_ptr + b * n * n
    rows_tile = tl.arange(0, VIS_ROWS)[:, None]
    cols = idx[None, :]
    for r0 in range(0, n, VIS_ROWS):
        rows = r0 + rows_tile
        tl.store(vis_base + rows * n + cols, tl.zeros([VIS_ROWS, BLOCK], tl.int8), mask=(rows < n) & (cols < n))
    tl.debug_barrier()
    anc = idx
    row_ok = idx < n
    for _ in range(L + 1):
        ok = row_ok & (anc >= 0)
        tl.store(vis_base + idx * n + anc, tl.full([BLOCK], 1, tl.int8), mask=ok)
        anc = tl.cast(tl.load(out_parent + anc, mask=ok, other=-1), tl.int32)


@triton.jit
def verify_inputs_kernel(parent_ptr, depth_ptr, vis_ptr, seq_ptr, pos_ptr, mask_ptr, ridx_ptr, rnext_ptr, rsib_ptr, bs,
                         N: tl.constexpr, BLOCK: tl.constexpr, BS_BLOCK: tl.constexpr, CHUNK: tl.constexpr, MAX_SEQ: tl.constexpr):
    b = tl.program_id(0)
    row = tl.program_id(1)
    idx = tl.arange(0, BLOCK)
    req = tl.arange(0, BS_BLOCK)
    seqs = tl.load(seq_ptr + req, mask=req < bs, other=0)
    seq = tl.sum(tl.where(req == b, seqs, 0), 0)
    before = tl.sum(tl.where(req < b, seqs, 0), 0)
    row_start = N * before + tl.cast(b, tl.int64) * N * N + tl.cast(row, tl.int64) * (seq + N)
    ones = tl.full([CHUNK], 1, tl.int8)
    for c0 in range(0, MAX_SEQ, CHUNK):
        col = c0 + tl.arange(0, CHUNK)
        tl.store(mask_ptr + row_start + col, ones, mask=col < seq)
    vis_row = tl.load(vis_ptr + (tl.cast(b, tl.int64) * N + row) * N + idx, mask=idx < N, other=0)
    tl.store(mask_ptr + row_start + seq + idx, vis_row, mask=idx < N)

    parents = tl.load(parent_ptr + b * N + idx, mask=idx < N, other=-1)
    depth = tl.load(depth_ptr + b * (N - 1) + row - 1, mask=row > 0, other=0)
    tl.store(pos_ptr + b * N + row, seq + depth)
    tl.store(ridx_ptr + b * N + row, tl.cast(b * N + row, tl.int64))
    first = tl.min(tl.where(parents == row, idx, BLOCK), 0)
    tl.store(rnext_ptr + b * N + row, tl.cast(tl.where(first < BLOCK, first, -1), tl.int64))
    mine = tl.sum(tl.where(idx == row, parents, 0), 0)
    sib = tl.min(tl.where((parents == mine) & (idx > row) & (mine >= 0), idx, BLOCK), 0)
    tl.store(rsib_ptr + b * N + row, tl.cast(tl.where(sib < BLOCK, sib, -1), tl.int64))


@triton.jit
def walk_kernel(parent_ptr, tok_ptr, target_ptr, acc_ptr, len_ptr, bonus_ptr, N: tl.constexpr, L: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    idx = tl.arange(0, BLOCK)
    parents = tl.load(parent_ptr + b * N + idx, mask=idx < N, other=-2)
    tokens = tl.load(tok_ptr + b * (N - 1) + idx - 1, mask=(idx >= 1) & (idx < N), other=-1)
    current = tl.cast(0, tl.int64)
    length = tl.cast(0, tl.int64)
    tl.store(acc_ptr + b * (L + 1), current)
    for step in range(L):
        want = tl.load(target_ptr + b * N + current)
        hit = (parents == current) & (tokens == want)
        child = tl.cast(tl.min(tl.where(hit, idx, BLOCK), 0), tl.int64)
        found = child < BLOCK
        tl.store(acc_ptr + b * (L + 1) + step + 1, tl.where(found, child, -1))
        current = tl.where(found, child, current)
        length = length + tl.cast(found, tl.int64)
    tl.store(len_ptr + b, length)
    tl.store(bonus_ptr + b, tl.load(target_ptr + b * N + current))


@triton.jit
def lse_kernel(x_ptr, out_ptr, V: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + tl.cast(row, tl.int64) * V
    m = tl.full([BLOCK_V], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_V], tl.float32)
    for c0 in range(0, V, BLOCK_V):
        col = c0 + tl.arange(0, BLOCK_V)
        x = tl.cast(tl.load(base + col, mask=col < V, other=float("-inf")), tl.float32)
        new_m = tl.maximum(m, x)
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        s = s * tl.exp(m - safe) + tl.exp(x - safe)
        m = new_m
    top = tl.max(m, 0)
    total = tl.sum(s * tl.exp(m - tl.where(top == float("-inf"), 0.0, top)), 0)
    tl.store(out_ptr + row, top + tl.log(total))


@triton.jit
def _ordered_bf16(x):
    """bf16 values -> int32 keys in [0, 65535] with the same order; -0.0 and +0.0 share a key."""
    bits = tl.cast(x.to(tl.int16, bitcast=True), tl.int32) & 0xFFFF
    bits = tl.where(bits == 0x8000, 0, bits)
    return tl.where((bits & 0x8000) != 0, 0xFFFF - bits, bits | 0x8000)


@triton.jit
def chunk_topk_kernel(x_ptr, cand_ptr, max_ptr, sum_ptr, V, K, S,
                      CH: tl.constexpr, KP: tl.constexpr):
    """Per (row, chunk): the chunk's exact top-K keys (unsorted) and its (max, sum exp(x - max))."""
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    offs = tl.arange(0, CH)
    gid = chunk * CH + offs
    valid = gid < V
    x = tl.load(x_ptr + tl.cast(row, tl.int64) * V + gid, mask=valid, other=float("-inf"))
    xf = tl.cast(x, tl.float32)
    top = tl.max(xf, 0)
    total = tl.sum(tl.where(valid, tl.exp(xf - top), 0.0), 0)
    tl.store(max_ptr + row * S + chunk, top)
    tl.store(sum_ptr + row * S + chunk, total)

    u = tl.where(valid, _ordered_bf16(x), -1)  # xf is dead from here on
    n_valid = tl.sum(tl.cast(valid, tl.int32), 0)
    want = tl.minimum(K, n_valid)
    # Largest t with count(u >= t) >= want: binary search over the 16-bit keys.
    lo = tl.cast(0, tl.int32)
    hi = tl.cast(65535, tl.int32)
    for _ in range(16):
        mid = (lo + hi + 1) // 2
        enough = tl.sum(tl.cast(u >= mid, tl.int32), 0) >= want
        lo = tl.where(enough, mid, lo)
        hi = tl.where(enough, hi, mid - 1)
    above = u > lo
    need = want - tl.sum(tl.cast(above, tl.int32), 0)
    tie = u == lo
    tie_rank = tl.cumsum(tl.cast(tie, tl.int32), 0) - 1  # ids ascending: the smallest ids first
    chosen = above | (tie & (tie_rank < need))
    slot = tl.cumsum(tl.cast(chosen, tl.int32), 0) - 1
    key = (tl.cast(u, tl.int64) << 32) | (0xFFFFFFFF - tl.cast(gid, tl.int64))
    base = cand_ptr + (tl.cast(row, tl.int64) * S + chunk) * KP
    kslot = tl.arange(0, KP)
    tl.store(base + kslot, tl.full([KP], -1, tl.int64), mask=kslot >= want)
    tl.store(base + slot, key, mask=chosen)


@triton.jit
def merge_topk_kernel(x_ptr, cand_ptr, max_ptr, sum_ptr, lp_ptr, ids_ptr, V, K, S,
                      M: tl.constexpr, KP: tl.constexpr, SP: tl.constexpr):
    """Per row: the exact top-K of the chunks' candidates, sorted by (value desc, id asc), as log-probs."""
    row = tl.program_id(0)
    offs = tl.arange(0, M)
    keys = tl.load(cand_ptr + tl.cast(row, tl.int64) * S * KP + offs, mask=offs < S * KP, other=-1)
    # Keys are unique: the K-th largest by binary search over their 48-bit range.
    lo = tl.cast(0, tl.int64)
    hi = tl.cast((1 << 48) - 1, tl.int64)
    for _ in range(48):
        mid = (lo + hi + 1) // 2
        enough = tl.sum(tl.cast(keys >= mid, tl.int32), 0) >= K
        lo = tl.where(enough, mid, lo)
        hi = tl.where(enough, hi, mid - 1)
    chosen = keys >= lo
    slot = tl.cumsum(tl.cast(chosen, tl.int32), 0) - 1
    scratch = cand_ptr + tl.cast(row, tl.int64) * S * KP  # reuse the row's candidate area
    tl.debug_barrier()
    tl.store(scratch + slot, keys, mask=chosen)
    tl.debug_barrier()
    kslot = tl.arange(0, KP)
    best = tl.load(scratch + kslot, mask=kslot < K, other=-1)
    best = tl.sort(best, 0, descending=True)
    ids = 0xFFFFFFFF - (best & 0xFFFFFFFF)
    ok = kslot < K
    value = tl.cast(tl.load(x_ptr + tl.cast(row, tl.int64) * V + ids, mask=ok, other=0.0), tl.float32)
    c = tl.arange(0, SP)
    cm = tl.load(max_ptr + row * S + c, mask=c < S, other=float("-inf"))
    cs = tl.load(sum_ptr + row * S + c, mask=c < S, other=0.0)
    top = tl.max(cm, 0)
    log_z = top + tl.log(tl.sum(cs * tl.exp(cm - top), 0))
    tl.store(lp_ptr + row * K + kslot, value - log_z, mask=ok)
    tl.store(ids_ptr + row * K + kslot, ids, mask=ok)


def _pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


class Tree:
    """Same fields as DDTreeBatch (duck-typed so the module's verify-input functions accept it)."""

    def __init__(self, node_token_ids, depths, parents, num_nodes, visibility, depth_limit):
        self.node_token_ids, self.depths, self.parents = node_token_ids, depths, parents
        self.num_nodes, self.visibility, self.depth_limit = num_nodes, visibility, depth_limit

    batch_size = property(lambda self: self.parents.shape[0])
    budget = property(lambda self: self.node_token_ids.shape[1])
    num_verify_tokens = property(lambda self: self.parents.shape[1])
    max_depth = property(lambda self: self.depth_limit)


def heap_warps(block: int) -> int:
    """Warps for the heap kernel: as few as fit, since every pop is a chain of block-wide reductions."""
    return 1 if block <= 256 else 2 if block <= 512 else 4


def build_tree(top_log_probs: torch.Tensor, top_token_ids: torch.Tensor, budget: int, num_warps: int | None = None) -> Tree:
    """The reference heap's tree for every request, in one launch."""
    bs, depth, k = top_log_probs.shape
    assert 0 < budget <= MAX_BUDGET and depth <= MAX_DEPTH and k >= 1, "prototype limits: 0 < B <= 1021, L <= 18"
    lp = top_log_probs.float().contiguous()
    ids = top_token_ids.long().contiguous()
    n, device = budget + 1, lp.device
    tokens = torch.empty(bs, budget, dtype=torch.int64, device=device)
    depths = torch.empty_like(tokens)
    parents = torch.empty(bs, n, dtype=torch.int64, device=device)
    num_nodes = torch.empty(bs, dtype=torch.int64, device=device)
    vis = torch.empty(bs, n, n, dtype=torch.int8, device=device)
    block = _pow2(n)
    heap_tree_kernel[(bs,)](lp, ids, tokens, depths, parents, num_nodes, vis, k, depth * k,
                            BUDGET=budget, L=depth, BLOCK=block, VIS_ROWS=max(1, 4096 // block), num_warps=num_warps or heap_warps(block))
    return Tree(tokens, depths, parents, num_nodes, vis.view(torch.bool), depth)


def verify_inputs(tree: Tree, seq_lens: torch.Tensor, seq_lens_sum: int, max_seq_len: int):
    """(positions, flat FULL_MASK, retrieve_index, retrieve_next_token, retrieve_next_sibling) in one launch."""
    bs, n = tree.parents.shape
    device = tree.parents.device
    seq = seq_lens.long().contiguous()
    positions = torch.empty(bs, n, dtype=torch.int64, device=device)
    mask = torch.empty(n * seq_lens_sum + bs * n * n, dtype=torch.int8, device=device)
    ridx, rnext, rsib = (torch.empty(bs, n, dtype=torch.int64, device=device) for _ in range(3))
    verify_inputs_kernel[(bs, n)](tree.parents, tree.depths, tree.visibility.view(torch.int8), seq, positions, mask, ridx, rnext, rsib, bs,
                                  N=n, BLOCK=_pow2(n), BS_BLOCK=max(64, _pow2(bs)), CHUNK=1024, MAX_SEQ=max(max_seq_len, 1), num_warps=4)
    return positions, mask.view(torch.bool), ridx, rnext, rsib


def follow_verified(tree: Tree, target_tokens: torch.Tensor):
    """(accept_index [bs, L+1], accept_length [bs], bonus [bs]) in one launch."""
    bs, n = tree.parents.shape
    device = tree.parents.device
    depth = tree.depth_limit
    acc = torch.empty(bs, depth + 1, dtype=torch.int64, device=device)
    length = torch.empty(bs, dtype=torch.int64, device=device)
    bonus = torch.empty(bs, dtype=torch.int64, device=device)
    walk_kernel[(bs,)](tree.parents, tree.node_token_ids, target_tokens.long().contiguous(), acc, length, bonus, N=n, L=depth, BLOCK=_pow2(n), num_warps=4)
    return acc, length, bonus


def log_normaliser(logits: torch.Tensor) -> torch.Tensor:
    """fp32 log-sum-exp over the last dim, one program per row."""
    rows = logits.reshape(-1, logits.shape[-1]).contiguous()
    out = torch.empty(rows.shape[0], dtype=torch.float32, device=logits.device)
    lse_kernel[(rows.shape[0],)](rows, out, V=rows.shape[1], BLOCK_V=2048, num_warps=8)
    return out.view(logits.shape[:-1])


def exact_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k by (value desc, id asc) with 16-bit and 32-bit radix selects instead of 64-bit keys."""
    vocab = logits.shape[-1]
    kth = torch.topk(logits, k, dim=-1, sorted=False).values.amin(dim=-1, keepdim=True)
    ids = torch.arange(vocab, device=logits.device, dtype=torch.int32)
    key = torch.where(logits > kth, vocab, torch.where(logits == kth, vocab - 1 - ids, -1))
    chosen = torch.topk(key, k, dim=-1, sorted=False).indices
    values = logits.gather(-1, chosen).float() + 0.0  # -0.0 and 0.0 must tie
    bits = values.view(torch.int32).to(torch.int64)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    order = torch.sort((ordered << 32) | (0xFFFFFFFF - chosen), dim=-1, descending=True).indices
    return values.gather(-1, order), chosen.gather(-1, order)


def topk_log_probs_torch(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-depth top-K log-probs with torch.topk selects (the first prototype; slower than the fused kernels)."""
    values, ids = exact_topk(logits, min(k, logits.shape[-1]))
    return values - log_normaliser(logits).unsqueeze(-1), ids


TOPK_CHUNK = 8192


def topk_log_probs(logits: torch.Tensor, k: int, chunk: int | None = None, num_warps: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """The prototype's per-depth top-K log-probs [bs, L, k] (fp32, exact (value desc, id asc)) and token ids.

    Two launches: per vocabulary chunk, an exact chunk top-K (binary search on 16-bit keys, ties by
    id) and the chunk's (max, sum exp); per row, the exact top-K of the candidates (unique 48-bit
    keys), sorted, with the fp32 log-normaliser merged from the chunks. bf16 logits only.
    """
    assert logits.dtype == torch.bfloat16, "the fused top-K takes bf16 logits"
    vocab = logits.shape[-1]
    k = min(k, vocab)
    rows = logits.reshape(-1, vocab).contiguous()
    chunk = chunk or TOPK_CHUNK
    n_rows, chunks, kp = rows.shape[0], triton.cdiv(vocab, chunk), _pow2(k)
    assert k <= chunk
    device = logits.device
    cand = torch.empty(n_rows, chunks, kp, dtype=torch.int64, device=device)
    chunk_max = torch.empty(n_rows, chunks, dtype=torch.float32, device=device)
    chunk_sum = torch.empty_like(chunk_max)
    chunk_topk_kernel[(n_rows, chunks)](rows, cand, chunk_max, chunk_sum, vocab, k, chunks, CH=chunk, KP=kp, num_warps=num_warps)
    lp = torch.empty(n_rows, k, dtype=torch.float32, device=device)
    ids = torch.empty(n_rows, k, dtype=torch.int64, device=device)
    merge_topk_kernel[(n_rows,)](rows, cand, chunk_max, chunk_sum, lp, ids, vocab, k, chunks,
                                 M=_pow2(chunks * kp), KP=kp, SP=_pow2(chunks), num_warps=8)
    return lp.view(*logits.shape[:-1], k), ids.view(*logits.shape[:-1], k)
