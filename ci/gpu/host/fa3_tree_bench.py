"""The target verify's attention on FA3, chain against tree, without a server.

Per round and per model shape (36 or 28 layers of paged KV, page size 1, bf16), for bs requests
with a committed prefix of P tokens and a verify window of N tokens each, one CUDA graph of
every layer's attention call(s), replayed and timed with CUDA events:

- chain:     DFLASH's verify: one FA3 call, causal over prefix + N (what fa3 runs today);
- tree_fa3:  FA3's own topk > 1 cascade (EAGLE's): a non-causal prefix pass with its
             log-sum-exp, an expand pass with one query per row over the keys its mask row
             allows (page table sorted by the mask, built once per round), merge_state_v2;
- tree_tail: the prefix pass, then the set's fused tree kernel (ddtree_tree_attention.py:
             the tree keys under the compact [bs, N, N] mask, merged in place): one launch.

Correctness first (bf16 on the GPU against an fp32 torch reference of one softmax over prefix
and ancestors), then timings. Usage:

    python3 fa3_tree_bench.py --tree-attention TREE/python/sglang/srt/layers/attention/ddtree_tree_attention.py \
        [--json OUT.json] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time

import torch

SHAPES = {  # layers, query heads, KV heads, head dim (Qwen3 target shapes)
    "qwen3-8b": (36, 32, 8, 128),
    "qwen3-1.7b": (28, 16, 8, 128),
}


def load_tree_attention(path: str):
    spec = importlib.util.spec_from_file_location("ddtree_tree_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_tree_mask(bs: int, n: int, gen: torch.Generator, branching: float = 0.5) -> torch.Tensor:
    """Ancestor masks of random trees in DDTree's node order (a parent precedes its children)."""
    mask = torch.zeros(bs, n, n, dtype=torch.bool)
    for b in range(bs):
        parent = [-1] * n
        for i in range(1, n):
            # mostly deepen the previous node, sometimes branch off an earlier one
            parent[i] = i - 1 if torch.rand(1, generator=gen).item() > branching else int(
                torch.randint(0, i, (1,), generator=gen)
            )
        for i in range(n):
            j = i
            while j >= 0:
                mask[b, i, j] = True
                j = parent[j]
    return mask


class Case:
    """One batch: per-layer paged KV caches, page table, queries, the tree tokens' own K/V."""

    def __init__(self, shape, bs, prefix, n, layers=None, seed=0, device="cuda"):
        n_layers, hq, hkv, d = SHAPES[shape]
        self.layers = layers or n_layers
        self.bs, self.prefix, self.n, self.hq, self.hkv, self.d = bs, prefix, n, hq, hkv, d
        gen = torch.Generator().manual_seed(seed)
        total = prefix + n
        slots = bs * total + 1  # slot 0 unused, as in SGLang
        dt = torch.bfloat16
        self.k_cache = [torch.randn(slots, 1, hkv, d, device=device, dtype=dt) for _ in range(self.layers)]
        self.v_cache = [torch.randn(slots, 1, hkv, d, device=device, dtype=dt) for _ in range(self.layers)]
        # Each request's prefix, then its N window slots.
        self.page_table = (torch.arange(bs * total, device=device, dtype=torch.int32) + 1).view(bs, total)
        self.window = self.page_table[:, prefix:].reshape(-1).to(torch.int64)
        self.q = torch.randn(bs * n, hq, d, device=device, dtype=dt)
        self.mask = random_tree_mask(bs, n, gen).to(device)
        self.scale = 1.0 / math.sqrt(d)
        self.seq_lens = torch.full((bs,), prefix, device=device, dtype=torch.int32)
        self.cu_q = torch.arange(0, bs * n + 1, n, device=device, dtype=torch.int32)
        # Once per round in the backend (init_forward_metadata), not per layer.
        self.seqlens_chain = self.seq_lens + n
        self.cu_k_chain = torch.nn.functional.pad(torch.cumsum(self.seqlens_chain, 0, dtype=torch.int32), (1, 0))
        self.cu_k_prefix = torch.nn.functional.pad(torch.cumsum(self.seq_lens, 0, dtype=torch.int32), (1, 0))

    def tree_kv(self, layer):
        """The tree tokens' K/V rows as the forward holds them (written to the window slots)."""
        return self.k_cache[layer][self.window, 0], self.v_cache[layer][self.window, 0]


def fa3():
    from sgl_kernel.flash_attn import flash_attn_with_kvcache

    return flash_attn_with_kvcache


def chain_call(c: Case, layer: int):
    f = fa3()
    return f(
        q=c.q, k_cache=c.k_cache[layer], v_cache=c.v_cache[layer], page_table=c.page_table,
        cache_seqlens=c.seqlens_chain, cu_seqlens_q=c.cu_q, cu_seqlens_k_new=c.cu_k_chain, max_seqlen_q=c.n,
        softmax_scale=c.scale, causal=True,
    )


def prefix_call(c: Case, layer: int):
    f = fa3()
    out, lse, *_ = f(
        q=c.q, k_cache=c.k_cache[layer], v_cache=c.v_cache[layer], page_table=c.page_table,
        cache_seqlens=c.seq_lens, cu_seqlens_q=c.cu_q, cu_seqlens_k_new=c.cu_k_prefix, max_seqlen_q=c.n,
        softmax_scale=c.scale, causal=False, return_softmax_lse=True,
    )
    return out, lse


class ExpandMeta:
    """FA3's topk > 1 expand metadata from a compact mask (SGLang's construction, per round)."""

    def __init__(self, c: Case):
        n = c.n
        cols = torch.arange(n, device=c.q.device).expand(c.bs * n, n)
        keys = torch.where(c.mask.view(-1, n), cols, cols + n)
        order = torch.sort(keys, dim=1).indices
        window = c.page_table[:, c.prefix:].repeat_interleave(n, dim=0)
        self.page_table = window.gather(1, order).to(torch.int32)
        self.cache_seqlens = c.mask.view(-1, n).sum(1).to(torch.int32)
        self.cu_k = torch.nn.functional.pad(torch.cumsum(self.cache_seqlens, 0, dtype=torch.int32), (1, 0))
        self.cu_q = torch.arange(0, c.bs * n + 1, device=c.q.device, dtype=torch.int32)


def tree_fa3_call(c: Case, layer: int, meta: ExpandMeta):
    from sgl_kernel import merge_state_v2

    f = fa3()
    o, lse = prefix_call(c, layer)
    o2, lse2, *_ = f(
        q=c.q, k_cache=c.k_cache[layer], v_cache=c.v_cache[layer], page_table=meta.page_table,
        cache_seqlens=meta.cache_seqlens, cu_seqlens_q=meta.cu_q, cu_seqlens_k_new=meta.cu_k, max_seqlen_q=1,
        softmax_scale=c.scale, causal=False, return_softmax_lse=True,
    )
    merged, _ = merge_state_v2(o, lse.T.contiguous(), o2, lse2.T.contiguous())
    return merged


def tree_tail_call(c: Case, layer: int, tail, k, v):
    o, lse = prefix_call(c, layer)
    return tail.ddtree_merge_tree_attention(c.q, k, v, c.mask, o, lse, c.scale)


def reference(c: Case, layer: int, tree: bool) -> torch.Tensor:
    bs, n, p, g = c.bs, c.n, c.prefix, c.hq // c.hkv
    keys = c.k_cache[layer][c.page_table.reshape(-1).long(), 0].float().view(bs, p + n, c.hkv, c.d)
    vals = c.v_cache[layer][c.page_table.reshape(-1).long(), 0].float().view(bs, p + n, c.hkv, c.d)
    keys, vals = keys.repeat_interleave(g, 2), vals.repeat_interleave(g, 2)
    q = c.q.float().view(bs, n, c.hq, c.d)
    s = torch.einsum("bnhd,bkhd->bhnk", q, keys) * c.scale
    tail = c.mask if tree else torch.tril(torch.ones(n, n, dtype=torch.bool, device=q.device)).expand(bs, n, n)
    allow = torch.cat([torch.ones(bs, n, p, dtype=torch.bool, device=q.device), tail], 2)
    s = s.masked_fill(~allow[:, None], float("-inf"))
    return torch.einsum("bhnk,bkhd->bnhd", torch.softmax(s, -1), vals).reshape(bs * n, c.hq, c.d)


def check(tail) -> list:
    rows = []
    for shape, bs, prefix, n in [("qwen3-8b", 3, 100, 16), ("qwen3-1.7b", 2, 37, 33), ("qwen3-8b", 5, 300, 65)]:
        c = Case(shape, bs, prefix, n, layers=1, seed=bs)
        meta = ExpandMeta(c)
        k, v = c.tree_kv(0)
        for name, out, tree in (
            ("chain", chain_call(c, 0), False),
            ("tree_fa3", tree_fa3_call(c, 0, meta), True),
            ("tree_tail", tree_tail_call(c, 0, tail, k, v), True),
        ):
            if isinstance(out, tuple):
                out = out[0]
            ref = reference(c, 0, tree)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            rows.append({"check": name, "shape": shape, "bs": bs, "prefix": prefix, "n": n, "rel_err": err,
                         "ok": bool(err < 1e-2 and torch.isfinite(out).all().item())})
            print(f"check {name:9s} {shape:10s} bs={bs} P={prefix} N={n}: rel err {err:.2e} "
                  f"{'ok' if rows[-1]['ok'] else 'FAIL'}", flush=True)
    return rows


def time_graph(fn, reps: int = 30) -> float:
    """Median ms of one replay of a CUDA graph of fn()."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def bench(tail, quick: bool) -> list:
    rows = []
    shapes = ["qwen3-8b"] if quick else list(SHAPES)
    for shape in shapes:
        for prefix in (256, 4096):
            for n in (16, 64):
                for bs in (1, 8, 16, 32):
                    if n == 64 and bs > 16:
                        continue
                    t0 = time.time()
                    try:
                        c = Case(shape, bs, prefix, n)
                        kv = [c.tree_kv(i) for i in range(c.layers)]

                        def chain():
                            for i in range(c.layers):
                                chain_call(c, i)

                        def tree_fa3():
                            meta = ExpandMeta(c)  # once per round, as in the backend
                            for i in range(c.layers):
                                tree_fa3_call(c, i, meta)

                        def tree_tail():
                            for i in range(c.layers):
                                tree_tail_call(c, i, tail, *kv[i])

                        def prefix_only():
                            for i in range(c.layers):
                                prefix_call(c, i)

                        r = {"shape": shape, "prefix": prefix, "n": n, "bs": bs}
                        for name, fn in (("chain", chain), ("tree_fa3", tree_fa3), ("tree_tail", tree_tail),
                                         ("prefix_only", prefix_only)):
                            r[name] = time_graph(fn)
                        rows.append(r)
                        print(f"{shape:10s} P={prefix:5d} N={n:3d} bs={bs:2d}: chain {r['chain']:.3f} ms  "
                              f"tree_fa3 {r['tree_fa3']:.3f} ({r['tree_fa3'] / r['chain']:.2f}x)  "
                              f"tree_tail {r['tree_tail']:.3f} ({r['tree_tail'] / r['chain']:.2f}x)  "
                              f"prefix {r['prefix_only']:.3f}  [{time.time() - t0:.1f} s]", flush=True)
                        del c, kv
                        torch.cuda.empty_cache()
                    except Exception as error:  # report and go on: device time is scarce
                        print(f"{shape} P={prefix} N={n} bs={bs}: ERROR {type(error).__name__}: {error}", flush=True)
                        rows.append({"shape": shape, "prefix": prefix, "n": n, "bs": bs, "error": str(error)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree-attention", required=True)
    parser.add_argument("--json")
    parser.add_argument("--quick", action="store_true", help="time the Qwen3-8B shape only")
    parser.add_argument("--check-only", action="store_true", help="the correctness checks, no timing")
    args = parser.parse_args()
    t0 = time.time()
    from sgl_kernel import flash_ops  # noqa: F401  (fails clearly when FA3 is missing)

    tail = load_tree_attention(args.tree_attention)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"CUDA_MODULE_LOADING={__import__('os').environ.get('CUDA_MODULE_LOADING')}", flush=True)
    checks = check(tail)
    rows = [] if args.check_only else bench(tail, args.quick)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "checks": checks, "rows": rows,
              "seconds": time.time() - t0}
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
    return 0 if all(r["ok"] for r in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
