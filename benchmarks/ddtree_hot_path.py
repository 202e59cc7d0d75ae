"""DDTree hot path: the reference per-request heap against the patch set's batched builder.

One run measures, side by side, for every batch size and budget asked for:

* the tree builder: the reference best-first heap (written here from the algorithm in the
  DDTree notes, one Python heap per request, with its blocking device-to-host copies) against the
  patch set's ``build_ddtree_tree_from_topk``, eager and captured in a CUDA graph; the trees are
  checked for equality node by node;
* the whole round overhead: per-depth top-K and log-normaliser from bf16 draft logits
  ``[bs, 15, V]``, tree build, positions / mask / retrieve tensors and the verify walk, for the
  reference per-request flow and for the patch set (eager and graph), with a host-sync check;
* the verify forward of a Qwen3-8B-shaped target over ``bs x (B+1)`` tokens with a 1024-token
  context: its roofline on an H200 and a measured forward (random bf16 weights, tree mask applied,
  a few layers timed and scaled to the full depth).

The module under test is loaded by file path from a patched SGLang tree (``--tree DIR`` or the
environment variable PATCHKIT_TARGET), so nothing of SGLang beyond that one file is imported.

    python benchmarks/ddtree_hot_path.py --tree PATCHED_TREE --out table.md
    python benchmarks/ddtree_hot_path.py --tree PATCHED_TREE --device cpu --quick
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

MODULE_PATH = Path("python/sglang/srt/speculative/ddtree_utils.py")
WHEEL_MODULE_PATH = Path("sglang/srt/speculative/ddtree_utils.py")

# H200 ceilings named by the issue (datasheet HBM bandwidth, measured dense bf16 matmul rate).
H200_BYTES_PER_S = 4.8e12
H200_FLOPS_PER_S = 790e12

# Goals of the issue.
GOAL_BUILDER_SPEEDUP = 100.0
GOAL_OVERHEAD_FRACTION = 0.05
GOAL_CELL = (64, 128)  # (bs, B) where the builder speedup is judged


# --------------------------------------------------------------------------- module under test


def load_ddtree_utils(tree: Path) -> ModuleType:
    """Import ``ddtree_utils.py`` from a patched tree (repo layout or wheel layout) by file path."""
    for relative in (MODULE_PATH, WHEEL_MODULE_PATH, Path("ddtree_utils.py")):
        path = tree / relative
        if path.is_file():
            spec = importlib.util.spec_from_file_location("ddtree_utils_under_test", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
            spec.loader.exec_module(module)
            return module
    raise SystemExit(f"{tree}: no {MODULE_PATH} in this tree; pass --tree PATCHED_TREE (a tree with the DDTree patch set applied)")


# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    """Median and spread of repeated measurements, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    repeats: int


def _summarise(samples: list[float]) -> Timing:
    return Timing(statistics.median(samples), min(samples), max(samples), len(samples))


def time_device(fn: Callable[[], object], device: torch.device, warmup: int, repeat: int) -> Timing:
    """Time device work with CUDA events (host clock on CPU); each repeat starts from an idle device.

    Events include launch gaps, so an eager sequence of small kernels is charged its host dispatch time.
    """
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        return time_host(fn, device, 0, repeat)
    samples = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return _summarise(samples)


def time_host(fn: Callable[[], object], device: torch.device, warmup: int, repeat: int) -> Timing:
    """Wall-clock time from an idle device to an idle device (for flows that block on the host)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        _synchronize(device)
        t0 = time.perf_counter()
        fn()
        _synchronize(device)
        samples.append((time.perf_counter() - t0) * 1e3)
    return _summarise(samples)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def repeats_for(estimate_ms: float, budget_ms: float, lo: int, hi: int) -> int:
    """How many repeats fit a time budget, clamped to [lo, hi]."""
    return int(max(lo, min(hi, budget_ms / max(estimate_ms, 1e-3))))


# --------------------------------------------------------------------------- draft logits


def make_draft_logits(bs: int, depth: int, vocab: int, device: torch.device, seed: int) -> torch.Tensor:
    """Drafter-like bf16 logits [bs, depth, vocab]: a Gaussian floor plus a few spiked tokens per depth.

    The spikes get weaker with depth, like a block drafter's marginals; bf16 rounding makes exact
    ties common, which is what the tie-break of the exact builder has to get right.
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    logits = torch.randn(bs, depth, vocab, generator=gen, device=device, dtype=torch.float32) * 2.0
    spikes = 8
    ids = torch.randint(0, vocab, (bs, depth, spikes), generator=gen, device=device)
    decay = torch.linspace(1.0, 0.35, depth, device=device).view(1, depth, 1)
    heights = torch.linspace(14.0, 6.0, spikes, device=device).view(1, 1, spikes) * decay
    logits.scatter_add_(2, ids, heights.expand(bs, depth, spikes).contiguous())
    return logits.to(torch.bfloat16)


# --------------------------------------------------------------------------- reference (per request)


@dataclass
class ReferenceTree:
    """One request's tree as the reference heap builds it (node 0 is the root)."""

    node_token_ids: list[int]
    node_depths: list[int]
    parents: list[int]
    child_maps: list[dict[int, int]]
    visibility: np.ndarray


def reference_heap_tree(top_log_probs: np.ndarray, top_token_ids: np.ndarray, budget: int) -> ReferenceTree:
    """Best-first heap over rank tuples, exactly as the reference ``build_ddtree_tree`` does it.

    Entries are ``(-score, ranks, parent, depth, rank, score)``; Python compares whole tuples, so on an
    exact score tie the lexicographically smaller rank tuple pops first. Scores are Python floats
    updated incrementally (sibling: minus this rank's log-prob plus the next one's).
    """
    depth_limit, topk = top_log_probs.shape
    lp = top_log_probs.tolist()
    ids = top_token_ids.tolist()
    tokens, depths, parents, child_maps = [], [], [-1], [{}]
    heap = [(-lp[0][0], (0,), 0, 1, 0, lp[0][0])] if budget > 0 else []
    while heap and len(tokens) < budget:
        _, ranks, parent, depth, rank, logw = heapq.heappop(heap)
        index = len(tokens) + 1
        token = ids[depth - 1][rank]
        tokens.append(token)
        depths.append(depth)
        parents.append(parent)
        child_maps.append({})
        child_maps[parent][token] = index
        if rank + 1 < topk:
            sibling = logw - lp[depth - 1][rank] + lp[depth - 1][rank + 1]
            heapq.heappush(heap, (-sibling, ranks[:-1] + (rank + 1,), parent, depth, rank + 1, sibling))
        if depth < depth_limit:
            child = logw + lp[depth][0]
            heapq.heappush(heap, (-child, ranks + (0,), index, depth + 1, 0, child))
    return ReferenceTree(tokens, depths, parents, child_maps, reference_visibility(parents))


def reference_visibility(parents: list[int]) -> np.ndarray:
    """Ancestor-or-self mask: each row copies its parent's row and marks itself."""
    size = len(parents)
    vis = np.zeros((size, size), dtype=bool)
    vis[0, 0] = True
    for i in range(1, size):
        vis[i, :i] = vis[parents[i], :i]
        vis[i, i] = True
    return vis


def reference_trees_from_topk(top_log_probs: torch.Tensor, top_token_ids: torch.Tensor, budget: int) -> list[ReferenceTree]:
    """The reference builder as the ports call it: per request, copy its top-K to the host, run the heap."""
    trees = []
    for b in range(top_log_probs.shape[0]):
        lp = top_log_probs[b].to("cpu").numpy()  # blocking device-to-host copy, per request
        ids = top_token_ids[b].to("cpu").numpy()
        trees.append(reference_heap_tree(lp, ids, budget))
    return trees


def reference_walk(tree: ReferenceTree, target: list[int]) -> tuple[list[int], int]:
    """Greedy verify walk: follow the child whose token is the target's token at the current node."""
    accepted, current, nxt = [0], 0, target[0]
    while nxt in tree.child_maps[current]:
        current = tree.child_maps[current][nxt]
        accepted.append(current)
        nxt = target[current]
    return accepted, nxt


@dataclass
class HostRoundTensors:
    """What a round hands to the verify forward and to the commit step, built on the host."""

    positions: np.ndarray  # [bs, N]
    mask: np.ndarray  # flat, per request N x (seq_len + N)
    retrieve_index: np.ndarray
    retrieve_next_token: np.ndarray
    retrieve_next_sibling: np.ndarray


def host_round_tensors(trees: list[ReferenceTree], seq_lens: list[int], width: int) -> HostRoundTensors:
    """Positions, FULL_MASK and EAGLE-style retrieve tensors from per-request trees, on the host."""
    bs = len(trees)
    positions = np.zeros((bs, width), dtype=np.int64)
    next_token = np.full((bs, width), -1, dtype=np.int64)
    next_sibling = np.full((bs, width), -1, dtype=np.int64)
    blocks = []
    for b, tree in enumerate(trees):
        n = len(tree.parents)
        positions[b, :n] = seq_lens[b] + np.asarray([0] + tree.node_depths)
        block = np.zeros((width, seq_lens[b] + width), dtype=bool)
        block[:, : seq_lens[b]] = True
        block[:n, seq_lens[b] : seq_lens[b] + n] = tree.visibility
        blocks.append(block.reshape(-1))
        last_child = {}
        for node in range(1, n):
            parent = tree.parents[node]
            if parent in last_child:
                next_sibling[b, last_child[parent]] = node
            else:
                next_token[b, parent] = node
            last_child[parent] = node
    retrieve_index = np.arange(bs * width, dtype=np.int64).reshape(bs, width)
    return HostRoundTensors(positions, np.concatenate(blocks), retrieve_index, next_token, next_sibling)


def reference_round(logits: torch.Tensor, budget: int, seq_lens: list[int], target_tokens: torch.Tensor) -> tuple:
    """The public ports' per-request flow: top-K + LSE per request, blocking copy, heap, host tensors, walk."""
    device = logits.device
    k = min(budget, logits.shape[-1])
    trees = []
    for b in range(logits.shape[0]):
        request = logits[b].float()
        top_logits, top_ids = torch.topk(request, k, dim=-1)
        log_z = torch.logsumexp(request, dim=-1, keepdim=True)
        lp = (top_logits - log_z).to("cpu").numpy()
        trees.append(reference_heap_tree(lp, top_ids.to("cpu").numpy(), budget))
    host = host_round_tensors(trees, seq_lens, budget + 1)
    verify_inputs = [torch.from_numpy(a).to(device) for a in (host.positions, host.mask, host.retrieve_next_token, host.retrieve_next_sibling)]
    targets = target_tokens.to("cpu").tolist()
    walks = [reference_walk(tree, row) for tree, row in zip(trees, targets)]
    accept_length = torch.tensor([len(acc) - 1 for acc, _ in walks], device=device)
    bonus = torch.tensor([nxt for _, nxt in walks], device=device)
    return verify_inputs, accept_length, bonus


# --------------------------------------------------------------------------- the patch set's round


@dataclass
class RoundInputs:
    """Static inputs of one batched round (kept alive so a captured graph can replay on them)."""

    logits: torch.Tensor
    top_log_probs: torch.Tensor
    top_token_ids: torch.Tensor
    seq_lens: torch.Tensor
    seq_lens_sum: int
    target_tokens: torch.Tensor
    budget: int


def batched_build(mod: ModuleType, inputs: RoundInputs):
    return mod.build_ddtree_tree_from_topk(inputs.top_log_probs, inputs.top_token_ids, inputs.budget)


def batched_round(mod: ModuleType, inputs: RoundInputs) -> dict[str, torch.Tensor]:
    """One DDTree round with the patch set: top-K + LSE, tree, positions, mask, retrieve tensors, walk."""
    k = min(inputs.budget, inputs.logits.shape[-1])
    top_log_probs, top_token_ids = mod.ddtree_topk_from_logits(inputs.logits, k)
    tree = mod.build_ddtree_tree_from_topk(top_log_probs, top_token_ids, inputs.budget)
    return round_after_tree(mod, tree, inputs) | {"top_log_probs": top_log_probs, "top_token_ids": top_token_ids}


def round_after_tree(mod: ModuleType, tree, inputs: RoundInputs) -> dict[str, torch.Tensor]:
    """Everything in the round that follows the tree build."""
    positions = mod.ddtree_positions(tree, inputs.seq_lens)
    mask = mod.ddtree_custom_mask(tree, inputs.seq_lens, inputs.seq_lens_sum)
    retrieve_index, next_token, next_sibling = mod.ddtree_retrieve_tensors(tree)
    accept_index, accept_length, bonus = mod.ddtree_follow_verified(tree, inputs.target_tokens)
    return {
        "parents": tree.parents, "node_token_ids": tree.node_token_ids, "depths": tree.depths,
        "num_nodes": tree.num_nodes, "visibility": tree.visibility,
        "positions": positions, "mask": mask, "retrieve_index": retrieve_index,
        "retrieve_next_token": next_token, "retrieve_next_sibling": next_sibling,
        "accept_index": accept_index, "accept_length": accept_length, "bonus": bonus,
    }


@dataclass
class Captured:
    """A CUDA graph with its static outputs, or the reason capture failed."""

    graph: torch.cuda.CUDAGraph | None
    outputs: object
    error: str | None


def capture_graph(fn: Callable[[], object]) -> Captured:
    """Capture ``fn`` in a CUDA graph after warming it up on a side stream (the documented recipe)."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = fn()
        graph.replay()
        torch.cuda.synchronize()
        return Captured(graph, outputs, None)
    except Exception as exc:  # capture failure is a result to report, not a crash
        torch.cuda.synchronize()
        return Captured(None, None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


def host_sync_check(fn: Callable[[], object], device: torch.device) -> str:
    """Run ``fn`` with CUDA sync debugging set to error; return 'none' or the first sync found."""
    if device.type != "cuda":
        return "n/a (cpu)"
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
        return "none"
    except RuntimeError as exc:
        return f"SYNC: {str(exc).splitlines()[0][:160]}"
    finally:
        torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()


# --------------------------------------------------------------------------- equality checks


def tree_mismatches(batched, trees: list[ReferenceTree], budget: int) -> list[str]:
    """Node-by-node comparison of a DDTreeBatch with the reference trees; empty when identical."""
    tokens = batched.node_token_ids.cpu().numpy()
    depths = batched.depths.cpu().numpy()
    parents = batched.parents.cpu().numpy()
    num_nodes = batched.num_nodes.cpu().numpy()
    visibility = batched.visibility.cpu().numpy()
    problems = []
    for b, tree in enumerate(trees):
        n = len(tree.node_token_ids)
        checks = {
            "num_nodes": num_nodes[b] == n,
            "tokens": np.array_equal(tokens[b, :n], tree.node_token_ids),
            "depths": np.array_equal(depths[b, :n], tree.node_depths),
            "parents": np.array_equal(parents[b, : n + 1], tree.parents),
            "visibility": np.array_equal(visibility[b, : n + 1, : n + 1], tree.visibility),
        }
        problems += [f"request {b}: {name}" for name, ok in checks.items() if not ok]
    return problems


def round_mismatches(out: dict[str, torch.Tensor], trees: list[ReferenceTree], seq_lens: list[int], targets: list[list[int]], budget: int) -> list[str]:
    """Compare the batched round's positions, mask, retrieve tensors and walk with host-built ones."""
    host = host_round_tensors(trees, seq_lens, budget + 1)
    expected = {
        "positions": host.positions, "mask": host.mask, "retrieve_index": host.retrieve_index,
        "retrieve_next_token": host.retrieve_next_token, "retrieve_next_sibling": host.retrieve_next_sibling,
    }
    problems = [name for name, value in expected.items() if not np.array_equal(out[name].cpu().numpy(), value)]
    walks = [reference_walk(tree, row) for tree, row in zip(trees, targets)]
    accept_index = out["accept_index"].cpu().numpy()
    for b, (accepted, bonus) in enumerate(walks):
        got = accept_index[b][accept_index[b] >= 0].tolist()
        if got != accepted or int(out["accept_length"][b]) != len(accepted) - 1 or int(out["bonus"][b]) != bonus:
            problems.append(f"walk of request {b}")
    return problems


def outputs_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(a[key], b[key]) for key in a)


def make_target_tokens(trees: list[ReferenceTree], width: int, vocab: int, seed: int) -> list[list[int]]:
    """Target tokens per node that mostly follow a drafted child, so the walk goes several levels deep."""
    rng = np.random.default_rng(seed)
    rows = []
    for tree in trees:
        row = rng.integers(0, vocab, size=width).tolist()
        for node, children in enumerate(tree.child_maps):
            if children and rng.random() < 0.85:
                row[node] = list(children)[int(rng.integers(len(children)))]
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- verify forward


@dataclass(frozen=True)
class TargetShape:
    """A dense decoder's shape; the default is Qwen3-8B."""

    hidden: int = 4096
    intermediate: int = 12288
    layers: int = 36
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    vocab: int = 151936

    def layer_params(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        return attention + 3 * self.hidden * self.intermediate

    def weight_bytes(self) -> int:
        """bf16 bytes read by one forward: every layer plus the lm_head (embeddings are a gather)."""
        return 2 * (self.layers * self.layer_params() + self.vocab * self.hidden)


QWEN3_8B = TargetShape()
TINY_TARGET = TargetShape(hidden=256, intermediate=512, layers=36, heads=4, kv_heads=2, head_dim=64, vocab=4096)


@dataclass(frozen=True)
class Roofline:
    """Lower bound of one verify forward on an H200: max(weight bytes / bandwidth, FLOPs / matmul rate)."""

    tokens: int
    weight_ms: float
    flop_ms: float
    kv_ms: float  # reading the context's KV cache; shown, not part of the roofline

    @property
    def ms(self) -> float:
        return max(self.weight_ms, self.flop_ms)


def verify_roofline(shape: TargetShape, bs: int, width: int, context: int) -> Roofline:
    tokens = bs * width
    linear = 2 * tokens * (shape.layers * shape.layer_params() + shape.vocab * shape.hidden)
    attention = shape.layers * 4 * tokens * (context + width) * shape.heads * shape.head_dim
    kv_bytes = bs * (context + width) * shape.layers * 2 * shape.kv_heads * shape.head_dim * 2
    return Roofline(
        tokens,
        shape.weight_bytes() / H200_BYTES_PER_S * 1e3,
        (linear + attention) / H200_FLOPS_PER_S * 1e3,
        kv_bytes / H200_BYTES_PER_S * 1e3,
    )


class RandomTarget:
    """A few decoder layers with random bf16 weights (Qwen3 layout: GQA, q/k norm, RoPE, SwiGLU) and an lm_head."""

    def __init__(self, shape: TargetShape, layers: int, device: torch.device, dtype: torch.dtype):
        gen = torch.Generator(device=device).manual_seed(0)

        def weight(rows: int, cols: int) -> torch.Tensor:
            return (torch.randn(rows, cols, generator=gen, device=device, dtype=dtype) * cols**-0.5).contiguous()

        qkv_rows = shape.head_dim * (shape.heads + 2 * shape.kv_heads)
        self.shape, self.dtype = shape, dtype
        self.layers = [
            {"qkv": weight(qkv_rows, shape.hidden), "o": weight(shape.hidden, shape.heads * shape.head_dim),
             "gate_up": weight(2 * shape.intermediate, shape.hidden), "down": weight(shape.hidden, shape.intermediate)}
            for _ in range(layers)
        ]
        self.lm_head = weight(shape.vocab, shape.hidden)

    def layer(self, weights: dict, x: torch.Tensor, cache: tuple, mask: torch.Tensor, rope: tuple, context: int, bs: int, width: int) -> torch.Tensor:
        s = self.shape
        group = s.heads // s.kv_heads
        q, k, v = (F.rms_norm(x, (s.hidden,)) @ weights["qkv"].T).split([s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1)
        q = _rotate(F.rms_norm(q.view(bs, width, s.heads, s.head_dim), (s.head_dim,)), *rope)
        k = _rotate(F.rms_norm(k.view(bs, width, s.kv_heads, s.head_dim), (s.head_dim,)), *rope)
        k_cache, v_cache = cache
        k_cache[:, :, context:].copy_(k.transpose(1, 2))
        v_cache[:, :, context:].copy_(v.view(bs, width, s.kv_heads, s.head_dim).transpose(1, 2))
        # GQA folded into the query length: the heads of one KV group share the tree mask.
        q = q.view(bs, width, s.kv_heads, group, s.head_dim).permute(0, 2, 3, 1, 4).reshape(bs, s.kv_heads, group * width, s.head_dim)
        o = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)
        o = o.reshape(bs, s.kv_heads, group, width, s.head_dim).permute(0, 3, 1, 2, 4).reshape(bs * width, s.heads * s.head_dim)
        x = x + o @ weights["o"].T
        gate, up = (F.rms_norm(x, (s.hidden,)) @ weights["gate_up"].T).chunk(2, dim=-1)
        return x + (F.silu(gate) * up) @ weights["down"].T

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.shape.hidden,)) @ self.lm_head.T


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def tree_attention_mask(visibility: torch.Tensor, context: int, group: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [bs, 1, group*N, context+N]: the context is visible, the tree block is ancestor-only.

    The last dimension is allocated padded to 16 elements so the memory-efficient kernel takes it as is.
    """
    bs, width, _ = visibility.shape
    total = context + width
    padded = -(-total // 16) * 16
    mask = torch.zeros(bs, 1, group * width, padded, dtype=dtype, device=visibility.device)[..., :total]
    blocked = (~visibility).repeat(1, group, 1).unsqueeze(1)
    mask[..., context:].masked_fill_(blocked, float("-inf"))
    return mask


@dataclass(frozen=True)
class MeasuredVerify:
    """A measured verify forward: layers timed and scaled to the full depth, plus the lm_head."""

    layers_timed: int
    layers_ms: float
    head_ms: float
    total_ms: float
    total_graph_ms: float = math.nan  # the same forward replayed as CUDA graphs


def measure_verify(target: RandomTarget, visibility: torch.Tensor, context: int, device: torch.device, budget_ms: float) -> MeasuredVerify:
    """Time ``len(target.layers)`` layers over bs x N tokens with a tree mask, and the lm_head; scale layers to the full depth."""
    s = target.shape
    bs, width, _ = visibility.shape
    dtype = target.dtype
    gen = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(bs * width, s.hidden, generator=gen, device=device, dtype=dtype)
    caches = [tuple(torch.randn(bs, s.kv_heads, context + width, s.head_dim, generator=gen, device=device, dtype=dtype) for _ in range(2)) for _ in target.layers]
    mask = tree_attention_mask(visibility, context, s.heads // s.kv_heads, dtype)
    depth = visibility.sum(-1).to(dtype=torch.float32) - 1  # depth of each node = ancestors
    positions = (context + depth).view(bs, width, 1, 1)
    inv_freq = 1e6 ** (-torch.arange(0, s.head_dim // 2, device=device, dtype=torch.float32) / (s.head_dim // 2))
    angles = torch.cat([positions * inv_freq] * 2, dim=-1)
    rope = (angles.cos().to(dtype), angles.sin().to(dtype))

    def layers() -> torch.Tensor:
        h = x
        for weights, cache in zip(target.layers, caches):
            h = target.layer(weights, h, cache, mask, rope, context, bs, width)
        return h

    layers_t = time_device(layers, device, warmup=1, repeat=repeats_for(5.0, budget_ms / 2, 3, 10))
    head_t = time_device(lambda: target.head(x), device, warmup=1, repeat=repeats_for(5.0, budget_ms / 2, 3, 10))
    scaled = layers_t.median_ms * s.layers / len(target.layers)
    graph_total = math.nan
    if device.type == "cuda":  # an engine replays the verify forward as a CUDA graph
        graph_layers, graph_head = capture_graph(layers), capture_graph(lambda: target.head(x))
        if graph_layers.graph is not None and graph_head.graph is not None:
            gl = time_device(graph_layers.graph.replay, device, 1, repeats_for(5.0, budget_ms / 2, 3, 10)).median_ms
            gh = time_device(graph_head.graph.replay, device, 1, repeats_for(5.0, budget_ms / 2, 3, 10)).median_ms
            graph_total = gl * s.layers / len(target.layers) + gh
        del graph_layers, graph_head
    return MeasuredVerify(len(target.layers), layers_t.median_ms, head_t.median_ms, scaled + head_t.median_ms, graph_total)


# --------------------------------------------------------------------------- one cell


@dataclass
class CellResult:
    """Everything measured for one (batch size, budget) cell."""

    bs: int
    budget: int
    ref_build_ms: float = math.nan
    build_eager_ms: float = math.nan
    build_graph_ms: float = math.nan
    trees_identical: bool = False
    tree_problems: list[str] = field(default_factory=list)
    graph_identical: bool | None = None
    build_capture_error: str | None = None
    ref_round_ms: float = math.nan
    round_eager_ms: float = math.nan
    round_graph_ms: float = math.nan
    round_capture_error: str | None = None
    round_problems: list[str] = field(default_factory=list)
    stage_ms: dict[str, float] = field(default_factory=dict)
    host_sync: str = "not checked"
    topk_max_abs_diff: float = math.nan
    roofline: dict = field(default_factory=dict)
    verify: dict = field(default_factory=dict)
    proto: dict = field(default_factory=dict)  # --triton-proto measurements


def run_cell(mod: ModuleType, bs: int, budget: int, args, target: RandomTarget | None, device: torch.device) -> CellResult:
    """Measure one (bs, B) cell: builder, round, checks and the verify forward."""
    cell = CellResult(bs, budget)
    width, vocab = budget + 1, args.vocab
    seq_lens_list = [args.context] * bs
    logits = make_draft_logits(bs, args.depth, vocab, device, seed=args.seed + 97 * bs + budget)
    top_log_probs, top_token_ids = mod.ddtree_topk_from_logits(logits, min(budget, vocab))
    inputs = RoundInputs(logits, top_log_probs, top_token_ids, torch.tensor(seq_lens_list, device=device), sum(seq_lens_list), None, budget)
    cell.topk_max_abs_diff = topk_difference(logits, top_log_probs, top_token_ids)

    trees = reference_trees_from_topk(top_log_probs, top_token_ids, budget)
    targets = make_target_tokens(trees, width, vocab, seed=args.seed + bs)
    inputs.target_tokens = torch.tensor(targets, device=device, dtype=torch.int64)

    measure_builder(mod, cell, inputs, trees, device, args)
    measure_round(mod, cell, inputs, trees, targets, seq_lens_list, device, args)
    if args.triton_proto:
        cell.proto = measure_proto(mod, cell, inputs, trees, seq_lens_list, device, args)
    cell.roofline = asdict(verify_roofline(QWEN3_8B, bs, width, args.context)) | {"ms": verify_roofline(QWEN3_8B, bs, width, args.context).ms}
    if target is not None:
        visibility = torch.as_tensor(np.stack([t.visibility for t in trees]), device=device)
        cell.verify = asdict(measure_verify(target, visibility, args.context, device, args.time_budget_ms))
        del visibility
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return cell


def topk_difference(logits: torch.Tensor, top_log_probs: torch.Tensor, top_token_ids: torch.Tensor) -> float:
    """Largest |log-prob| difference against torch.topk - logsumexp in fp32, and the ids must pick equal logits."""
    reference = logits.float()
    values, _ = torch.topk(reference, top_log_probs.shape[-1], dim=-1)
    expected = values - torch.logsumexp(reference, dim=-1, keepdim=True)
    picked = reference.gather(-1, top_token_ids) - torch.logsumexp(reference, dim=-1, keepdim=True)
    return max(float((top_log_probs - expected).abs().max()), float((picked - expected).abs().max()))


def measure_builder(mod: ModuleType, cell: CellResult, inputs: RoundInputs, trees: list[ReferenceTree], device: torch.device, args) -> None:
    """Reference heap (with its per-request copies) vs the batched builder, eager and graph; trees compared."""
    ref = time_host(lambda: reference_trees_from_topk(inputs.top_log_probs, inputs.top_token_ids, inputs.budget), device, 1, repeats_for(cell.bs * 0.5, args.time_budget_ms, 3, 15))
    cell.ref_build_ms = ref.median_ms
    eager_tree = batched_build(mod, inputs)
    cell.tree_problems = tree_mismatches(eager_tree, trees, inputs.budget)
    cell.trees_identical = not cell.tree_problems
    cell.build_eager_ms = time_device(lambda: batched_build(mod, inputs), device, 3, repeats_for(1.0, args.time_budget_ms, 10, 100)).median_ms
    if device.type != "cuda":
        cell.build_capture_error = "n/a (cpu)"
        return
    captured = capture_graph(lambda: batched_build(mod, inputs))
    cell.build_capture_error = captured.error
    if captured.graph is not None:
        cell.build_graph_ms = time_device(captured.graph.replay, device, 3, repeats_for(0.2, args.time_budget_ms, 20, 200)).median_ms
        cell.graph_identical = all(torch.equal(getattr(captured.outputs, f), getattr(eager_tree, f)) for f in ("node_token_ids", "depths", "parents", "num_nodes", "visibility"))


def measure_round(mod: ModuleType, cell: CellResult, inputs: RoundInputs, trees, targets, seq_lens_list, device: torch.device, args) -> None:
    """Whole round: reference per-request flow vs the patch set eager and graph; stage split; sync check."""
    cell.ref_round_ms = time_host(lambda: reference_round(inputs.logits, inputs.budget, seq_lens_list, inputs.target_tokens), device, 1, repeats_for(cell.bs * 1.0, args.time_budget_ms, 3, 10)).median_ms
    eager = batched_round(mod, inputs)
    cell.round_problems = round_mismatches(eager, trees, seq_lens_list, targets, inputs.budget)
    if not torch.equal(eager["parents"], batched_build(mod, inputs).parents):
        cell.round_problems.append("round tree differs from builder tree")
    cell.round_eager_ms = time_device(lambda: batched_round(mod, inputs), device, 3, repeats_for(2.0, args.time_budget_ms, 10, 50)).median_ms
    cell.stage_ms = stage_split(mod, inputs, device, args)
    if device.type != "cuda":
        cell.round_capture_error, cell.host_sync = "n/a (cpu)", "n/a (cpu)"
        return
    cell.host_sync = host_sync_check(lambda: batched_round(mod, inputs), device)
    captured = capture_graph(lambda: batched_round(mod, inputs))
    cell.round_capture_error = captured.error
    if captured.graph is not None:
        cell.round_graph_ms = time_device(captured.graph.replay, device, 3, repeats_for(0.5, args.time_budget_ms, 20, 100)).median_ms
        if not outputs_equal(captured.outputs, eager):
            cell.round_problems.append("graph replay differs from eager")


def stage_split(mod: ModuleType, inputs: RoundInputs, device: torch.device, args) -> dict[str, float]:
    """Eager time of each stage of the round, to show where the time goes."""
    k = min(inputs.budget, inputs.logits.shape[-1])
    tree = batched_build(mod, inputs)
    repeats = repeats_for(1.0, args.time_budget_ms / 4, 10, 50)
    stages = {
        "topk": lambda: mod.ddtree_topk_from_logits(inputs.logits, k),
        "build": lambda: batched_build(mod, inputs),
        "pos+mask+retrieve": lambda: (mod.ddtree_positions(tree, inputs.seq_lens), mod.ddtree_custom_mask(tree, inputs.seq_lens, inputs.seq_lens_sum), mod.ddtree_retrieve_tensors(tree)),
        "walk": lambda: mod.ddtree_follow_verified(tree, inputs.target_tokens),
    }
    return {name: time_device(fn, device, 2, repeats).median_ms for name, fn in stages.items()}


# --------------------------------------------------------------------------- triton prototype


def proto_round(proto: ModuleType, inputs: RoundInputs, max_seq_len: int) -> dict[str, torch.Tensor]:
    """The round with the prototype's fused kernels: top-K + LSE, heap kernel, verify-inputs kernel, walk kernel."""
    top_log_probs, top_token_ids = proto.topk_log_probs(inputs.logits, min(inputs.budget, inputs.logits.shape[-1]))
    tree = proto.build_tree(top_log_probs, top_token_ids, inputs.budget)
    positions, mask, retrieve_index, next_token, next_sibling = proto.verify_inputs(tree, inputs.seq_lens, inputs.seq_lens_sum, max_seq_len)
    accept_index, accept_length, bonus = proto.follow_verified(tree, inputs.target_tokens)
    return {
        "parents": tree.parents, "node_token_ids": tree.node_token_ids, "depths": tree.depths,
        "num_nodes": tree.num_nodes, "visibility": tree.visibility, "positions": positions, "mask": mask,
        "retrieve_index": retrieve_index, "retrieve_next_token": next_token, "retrieve_next_sibling": next_sibling,
        "accept_index": accept_index, "accept_length": accept_length, "bonus": bonus,
        "top_log_probs": top_log_probs, "top_token_ids": top_token_ids,
    }


def measure_proto(mod: ModuleType, cell: CellResult, inputs: RoundInputs, trees, seq_lens_list, device: torch.device, args) -> dict:
    """Time and check the triton prototype: builder against the reference heap, round against host-built tensors."""
    proto = load_triton_proto()
    result: dict = {}
    module_ids = inputs.top_token_ids  # the module's exact top-K ids of these logits
    tree = proto.build_tree(inputs.top_log_probs, inputs.top_token_ids, inputs.budget)
    result["tree_problems"] = tree_mismatches(tree, trees, inputs.budget)
    module_tree = batched_build(mod, inputs)
    result["equals_module_tree"] = all(torch.equal(getattr(tree, f), getattr(module_tree, f)) for f in ("node_token_ids", "depths", "parents", "num_nodes", "visibility"))
    build = lambda: proto.build_tree(inputs.top_log_probs, inputs.top_token_ids, inputs.budget)
    result["build_eager_ms"] = time_device(build, device, 3, repeats_for(0.2, args.time_budget_ms / 2, 10, 100)).median_ms
    max_seq = max(seq_lens_list)
    out = proto_round(proto, inputs, max_seq)
    proto_trees = reference_trees_from_topk(out["top_log_probs"], out["top_token_ids"], inputs.budget)
    targets = inputs.target_tokens.cpu().tolist()
    result["round_problems"] = tree_mismatches(_tree_view(out), proto_trees, inputs.budget) + round_mismatches(out, proto_trees, seq_lens_list, targets, inputs.budget)
    result["topk_ids_equal_module"] = bool(torch.equal(out["top_token_ids"], module_ids))
    result["topk_lp_max_diff_vs_module"] = float((out["top_log_probs"] - inputs.top_log_probs).abs().max())
    result["round_eager_ms"] = time_device(lambda: proto_round(proto, inputs, max_seq), device, 3, repeats_for(0.3, args.time_budget_ms / 2, 10, 100)).median_ms
    result["stage_ms"] = {
        "topk": time_device(lambda: proto.topk_log_probs(inputs.logits, min(inputs.budget, inputs.logits.shape[-1])), device, 2, 20).median_ms,
        "build": result["build_eager_ms"],
        "pos+mask+retrieve": time_device(lambda: proto.verify_inputs(tree, inputs.seq_lens, inputs.seq_lens_sum, max_seq), device, 2, 20).median_ms,
        "walk": time_device(lambda: proto.follow_verified(tree, inputs.target_tokens), device, 2, 20).median_ms,
    }
    if device.type != "cuda":
        result.update(build_graph_ms=math.nan, round_graph_ms=math.nan, host_sync="n/a (cpu)", capture_error="n/a (cpu)")
        return result
    if (cell.bs, cell.budget) in PROTO_SWEEP_CELLS and device.type == "cuda":
        result["heap_warps_graph_ms"] = heap_warps_sweep(proto, inputs, device, args)
    if (cell.bs, cell.budget) in TOPK_SWEEP_CELLS and device.type == "cuda":
        result["topk_config_graph_ms"] = topk_config_sweep(proto, inputs, module_ids, device)
    captured_build = capture_graph(build)
    result["build_graph_ms"] = time_device(captured_build.graph.replay, device, 3, repeats_for(0.1, args.time_budget_ms / 2, 20, 200)).median_ms if captured_build.graph else math.nan
    result["host_sync"] = host_sync_check(lambda: proto_round(proto, inputs, max_seq), device)
    captured = capture_graph(lambda: proto_round(proto, inputs, max_seq))
    result["capture_error"] = captured.error or captured_build.error
    if captured.graph is not None:
        result["round_graph_ms"] = time_device(captured.graph.replay, device, 3, repeats_for(0.2, args.time_budget_ms / 2, 20, 100)).median_ms
        if not outputs_equal(captured.outputs, out):
            result["round_problems"].append("graph replay differs from eager")
    else:
        result["round_graph_ms"] = math.nan
    return result


PROTO_SWEEP_CELLS = {(1, 128), (64, 128), (64, 512)}
TOPK_SWEEP_CELLS = {(1, 128), (64, 16), (64, 128), (64, 512)}
TOPK_CONFIGS = ((8192, 8), (8192, 16), (4096, 4), (4096, 8), (2048, 4), (2048, 2))


def topk_config_sweep(proto: ModuleType, inputs: RoundInputs, module_ids: torch.Tensor, device: torch.device) -> dict[str, str]:
    """Graph time of the fused top-K per (vocabulary chunk, warps); 'ids!' marks a config that disagrees."""
    k = min(inputs.budget, inputs.logits.shape[-1])
    times = {}
    for chunk, warps in TOPK_CONFIGS:
        if chunk < k or -(-inputs.logits.shape[-1] // chunk) * (1 << (k - 1).bit_length()) > 16384:
            continue  # the merge kernel holds every chunk's candidates of a row in registers
        fn = lambda: proto.topk_log_probs(inputs.logits, k, chunk=chunk, num_warps=warps)
        same = torch.equal(fn()[1], module_ids)
        captured = capture_graph(fn)
        ms = time_device(captured.graph.replay, device, 3, 20).median_ms if captured.graph else math.nan
        times[f"{chunk}/{warps}w"] = f"{fmt(ms)}" + ("" if same else " ids!")
    return times


def heap_warps_sweep(proto: ModuleType, inputs: RoundInputs, device: torch.device, args) -> dict[int, float]:
    """Graph time of the heap kernel per warp count: each pop is a chain of block reductions."""
    times = {}
    for warps in (1, 2, 4, 8):
        captured = capture_graph(lambda: proto.build_tree(inputs.top_log_probs, inputs.top_token_ids, inputs.budget, num_warps=warps))
        times[warps] = time_device(captured.graph.replay, device, 3, 30).median_ms if captured.graph else math.nan
    return times


def _tree_view(out: dict[str, torch.Tensor]):
    """A round's output dict seen as a tree (for tree_mismatches)."""
    from types import SimpleNamespace

    return SimpleNamespace(**{f: out[f] for f in ("node_token_ids", "depths", "parents", "num_nodes", "visibility")})


def load_triton_proto() -> ModuleType:
    """Import the triton prototype that sits beside this file."""
    path = Path(__file__).with_name("ddtree_triton_proto.py")
    if "ddtree_triton_proto" not in sys.modules:
        spec = importlib.util.spec_from_file_location("ddtree_triton_proto", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["ddtree_triton_proto"]


def proto_table(cells: list[CellResult]) -> list[str]:
    lines = [
        "| bs | B | heap kernel eager (ms) | heap kernel graph (ms) | speedup vs reference (graph) | trees identical to reference | == module tree | round eager (ms) | round graph (ms) | graph % roofline | topk / build / inputs / walk eager (ms) | host sync | round == reference |",
        "|---:|---:|---:|---:|---:|:---:|:---:|---:|---:|---:|---:|:---:|:---:|",
    ]
    for c in cells:
        p = c.proto
        if not p:
            continue
        st = p["stage_ms"]
        lines.append(
            f"| {c.bs} | {c.budget} | {fmt(p['build_eager_ms'])} | {fmt(p['build_graph_ms'])} | {fmt(ratio(c.ref_build_ms, p['build_graph_ms']), 1)}x | "
            f"{'yes' if not p['tree_problems'] else 'NO'} | {'yes' if p['equals_module_tree'] else 'NO'} | {fmt(p['round_eager_ms'])} | {fmt(p['round_graph_ms'])} | "
            f"{fmt(100 * ratio(p['round_graph_ms'], c.roofline['ms']), 2)}% | {fmt(st['topk'])} / {fmt(st['build'])} / {fmt(st['pos+mask+retrieve'])} / {fmt(st['walk'])} | "
            f"{p['host_sync']} | {'yes' if not p['round_problems'] else 'NO'} |"
        )
    return lines


def proto_goal_lines(cells: list[CellResult]) -> list[str]:
    measured = [c for c in cells if c.proto]
    if not measured:
        return []
    lines = []
    goal = next((c for c in measured if (c.bs, c.budget) == GOAL_CELL), None)
    if goal is not None:
        r = ratio(goal.ref_build_ms, goal.proto["build_graph_ms"])
        lines.append(f"- prototype heap kernel vs reference heap at bs={goal.bs}, B={goal.budget} (graph): {fmt(r, 1)}x -> " + ("MET" if r >= GOAL_BUILDER_SPEEDUP else f"MISSED by {GOAL_BUILDER_SPEEDUP / r:.2f}x"))
    worst = max(measured, key=lambda c: ratio(c.proto["round_graph_ms"], c.roofline["ms"]) if not math.isnan(c.proto["round_graph_ms"]) else -1)
    frac = ratio(worst.proto["round_graph_ms"], worst.roofline["ms"])
    missed = [c for c in measured if ratio(c.proto["round_graph_ms"], c.roofline["ms"]) >= GOAL_OVERHEAD_FRACTION]
    verdict = "not measured" if math.isnan(frac) else "MET" if not missed else f"MISSED in {len(missed)}/{len(measured)} cells ({frac / GOAL_OVERHEAD_FRACTION:.2f}x the goal at worst)"
    lines.append(f"- prototype round < 5% of the roofline (graph): worst {fmt(100 * frac, 2)}% at bs={worst.bs} B={worst.budget} -> {verdict}")
    bad = [c for c in measured if c.proto["tree_problems"] or c.proto["round_problems"] or not c.proto["equals_module_tree"] or not c.proto["topk_ids_equal_module"]]
    lines.append("- prototype trees, top-K ids and round outputs identical (reference heap, module builder and top-K, host-built tensors): " + ("MET" if not bad else "MISSED: " + "; ".join(f"bs={c.bs} B={c.budget}: {(c.proto['tree_problems'] + c.proto['round_problems'])[:3]}" for c in bad)))
    syncs = [c for c in measured if c.proto["host_sync"] not in ("none", "n/a (cpu)") or (c.proto["capture_error"] and not c.proto["capture_error"].startswith("n/a"))]
    lines.append("- prototype round free of host syncs and capturable: " + ("MET" if not syncs else "MISSED: " + "; ".join(f"bs={c.bs} B={c.budget}: {c.proto['host_sync']} / {c.proto['capture_error']}" for c in syncs[:3])))
    return lines


# --------------------------------------------------------------------------- launch profile


def kernel_profile(fn: Callable[[], object], device: torch.device, top: int = 8) -> dict:
    """Count the device kernels one call launches and list the costliest (needs the CUDA profiler)."""
    if device.type != "cuda":
        return {"error": "n/a (cpu)"}
    try:
        from torch.profiler import ProfilerActivity, profile

        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
        by_name: dict[str, list[float]] = {}
        for e in kernels:
            by_name.setdefault(e.name[:70], []).append(_event_device_us(e))
        ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
        return {
            "kernels": len(kernels),
            "device_us": sum(sum(v) for v in by_name.values()),
            "top": [(name, len(v), sum(v)) for name, v in ranked],
        }
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}


def _event_device_us(event) -> float:
    time_range = getattr(event, "time_range", None)
    if time_range is not None:
        return float(time_range.elapsed_us())
    return float(getattr(event, "device_time_total", 0.0) or 0.0)


# --------------------------------------------------------------------------- report


def fmt(value: float, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def builder_table(cells: list[CellResult]) -> list[str]:
    lines = [
        "| bs | B | reference heap + D2H (ms) | batched eager (ms) | batched graph (ms) | speedup eager | speedup graph | trees identical | graph == eager |",
        "|---:|---:|---:|---:|---:|---:|---:|:---:|:---:|",
    ]
    for c in cells:
        lines.append(
            f"| {c.bs} | {c.budget} | {fmt(c.ref_build_ms)} | {fmt(c.build_eager_ms)} | {fmt(c.build_graph_ms)} | "
            f"{fmt(ratio(c.ref_build_ms, c.build_eager_ms), 1)}x | {fmt(ratio(c.ref_build_ms, c.build_graph_ms), 1)}x | "
            f"{'yes' if c.trees_identical else 'NO'} | {_yes_no(c.graph_identical, c.build_capture_error)} |"
        )
    return lines


def _yes_no(flag: bool | None, error: str | None) -> str:
    if flag is None:
        return "n/a" if error and error.startswith("n/a") else ("capture failed" if error else "-")
    return "yes" if flag else "NO"


def round_table(cells: list[CellResult]) -> list[str]:
    lines = [
        "| bs | B | verify tokens | roofline verify (ms) | measured verify eager / graph (ms) | reference round (ms) | ref % roofline | round eager (ms) | eager % roofline | round graph (ms) | graph % roofline | host sync | round == reference |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|:---:|",
    ]
    for c in cells:
        roof = c.roofline["ms"]
        lines.append(
            f"| {c.bs} | {c.budget} | {c.roofline['tokens']} | {fmt(roof)} | {fmt(c.verify.get('total_ms', math.nan), 2)} / {fmt(c.verify.get('total_graph_ms', math.nan), 2)} | "
            f"{fmt(c.ref_round_ms, 2)} | {fmt(100 * ratio(c.ref_round_ms, roof), 1)}% | {fmt(c.round_eager_ms)} | "
            f"{fmt(100 * ratio(c.round_eager_ms, roof), 1)}% | {fmt(c.round_graph_ms)} | {fmt(100 * ratio(c.round_graph_ms, roof), 1)}% | "
            f"{'none' if c.host_sync == 'none' else c.host_sync} | {'yes' if not c.round_problems else 'NO'} |"
        )
    return lines


def stage_table(cells: list[CellResult]) -> list[str]:
    names = list(cells[0].stage_ms) if cells else []
    lines = ["| bs | B | " + " | ".join(f"{n} (ms)" for n in names) + " | roofline weight / FLOP / KV (ms) |", "|---:|---:|" + "---:|" * (len(names) + 1)]
    for c in cells:
        r = c.roofline
        lines.append(f"| {c.bs} | {c.budget} | " + " | ".join(fmt(c.stage_ms[n]) for n in names) + f" | {fmt(r['weight_ms'], 2)} / {fmt(r['flop_ms'], 2)} / {fmt(r['kv_ms'], 2)} |")
    return lines


def goal_lines(cells: list[CellResult], device: torch.device) -> list[str]:
    """One line per goal: met, or missed and by how much."""
    lines = []
    goal = next((c for c in cells if (c.bs, c.budget) == GOAL_CELL), None)
    if goal is None:
        lines.append(f"- builder speedup at bs={GOAL_CELL[0]}, B={GOAL_CELL[1]}: cell not measured in this run")
    else:
        for label, ms in (("graph", goal.build_graph_ms), ("eager", goal.build_eager_ms)):
            r = ratio(goal.ref_build_ms, ms)
            verdict = "MET" if r >= GOAL_BUILDER_SPEEDUP else f"MISSED by {GOAL_BUILDER_SPEEDUP / r:.2f}x (needs {goal.ref_build_ms / GOAL_BUILDER_SPEEDUP:.3f} ms)" if not math.isnan(r) else "not measured"
            lines.append(f"- builder >= {GOAL_BUILDER_SPEEDUP:.0f}x the reference heap at bs={goal.bs}, B={goal.budget} ({label}): {fmt(r, 1)}x -> {verdict}")
    identical = all(c.trees_identical for c in cells)
    lines.append(f"- trees identical to the reference heap in every cell: {'MET' if identical else 'MISSED: ' + '; '.join(f'bs={c.bs} B={c.budget}: {c.tree_problems[:3]}' for c in cells if not c.tree_problems == [])}")
    for label, attr in (("graph", "round_graph_ms"), ("eager", "round_eager_ms")):
        worst = max(cells, key=lambda c: ratio(getattr(c, attr), c.roofline["ms"]) if not math.isnan(getattr(c, attr)) else -1)
        frac = ratio(getattr(worst, attr), worst.roofline["ms"])
        missed = [c for c in cells if ratio(getattr(c, attr), c.roofline["ms"]) >= GOAL_OVERHEAD_FRACTION]
        verdict = "MET" if not missed and not math.isnan(frac) else ("not measured" if math.isnan(frac) else f"MISSED in {len(missed)}/{len(cells)} cells; worst bs={worst.bs} B={worst.budget} at {100 * frac:.1f}% ({frac / GOAL_OVERHEAD_FRACTION:.2f}x the goal)")
        lines.append(f"- round overhead < {100 * GOAL_OVERHEAD_FRACTION:.0f}% of the roofline verify ({label}): worst {fmt(100 * frac, 2)}% -> {verdict}")
    syncs = [c for c in cells if c.host_sync != "none"]
    captures = [c for c in cells if c.round_capture_error]
    if device.type != "cuda":
        lines.append("- no host sync inside the round: not checkable on cpu")
    else:
        verdict = "MET" if not syncs and not captures else "MISSED: " + "; ".join(f"bs={c.bs} B={c.budget}: {c.host_sync} / capture {c.round_capture_error}" for c in (syncs + captures)[:3])
        lines.append(f"- no host sync inside the round (sync debug mode 'error' + whole-round graph capture): {verdict}")
    lines.append(f"- round outputs (mask, positions, retrieve, walk) equal host-built ones from the reference trees: {'MET' if all(not c.round_problems for c in cells) else 'MISSED: ' + '; '.join(f'bs={c.bs} B={c.budget}: {c.round_problems[:3]}' for c in cells if c.round_problems)}")
    return lines


def environment_lines(device: torch.device, args, mod_path: str) -> list[str]:
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return [
        f"- device: {gpu}; torch {torch.__version__}; python {platform.python_version()}; numpy {np.__version__}",
        f"- module under test: `{mod_path}`",
        f"- draft logits bf16 [bs, {args.depth}, {args.vocab}]; context {args.context} tokens; K = min(B, V); seed {args.seed}",
        f"- roofline: Qwen3-8B shape, weights {QWEN3_8B.weight_bytes() / 1e9:.2f} GB bf16 / {H200_BYTES_PER_S / 1e12:.1f} TB/s vs FLOPs / {H200_FLOPS_PER_S / 1e12:.0f} TFLOP/s (max of the two; KV read shown apart)",
        f"- measured verify: {args.verify_layers} of {args.target_shape.layers} layers with random bf16 weights, timed and scaled x{args.target_shape.layers / max(args.verify_layers, 1):.0f}, plus the lm_head over all tokens; eager PyTorch, SDPA with the additive tree mask"
        + ("" if args.target_shape == QWEN3_8B else f" (shrunk shape {args.target_shape} for this dev run)"),
        "- times: medians of repeats after warm-up; CUDA events for device work, wall clock (idle to idle) for flows that block on the host",
    ]


def render_report(cells: list[CellResult], device: torch.device, args, mod_path: str, profiles: dict) -> str:
    out = ["# DDTree hot path", "", *environment_lines(device, args, mod_path), "", "## Tree builder: reference heap vs batched", "", *builder_table(cells), ""]
    out += ["## Round overhead vs the verify forward", "", *round_table(cells), "", "## Stages of the batched round (eager) and the roofline terms", "", *stage_table(cells), ""]
    out += ["## Goals", "", *goal_lines(cells, device), *proto_goal_lines(cells), ""]
    if any(c.proto for c in cells):
        out[out.index("## Goals"):out.index("## Goals")] = ["## Triton prototype (benchmarks/ddtree_triton_proto.py, --triton-proto)", "", *proto_table(cells), ""]
    sweeps = [c for c in cells if c.proto.get("heap_warps_graph_ms")]
    if sweeps:
        out += ["## Prototype heap kernel: graph time (ms) by warps per request", ""]
        out += [f"- bs={c.bs} B={c.budget}: " + ", ".join(f"{w} warps {fmt(ms)}" for w, ms in c.proto["heap_warps_graph_ms"].items()) for c in sweeps]
        out.append("")
    topk_sweeps = [c for c in cells if c.proto.get("topk_config_graph_ms")]
    if topk_sweeps:
        out += ["## Prototype fused top-K: graph time (ms) by vocabulary chunk / warps", ""]
        out += [f"- bs={c.bs} B={c.budget}: " + ", ".join(f"{cfg} {ms}" for cfg, ms in c.proto["topk_config_graph_ms"].items()) for c in topk_sweeps]
        out.append("")
    if profiles:
        out += ["## Kernel launches (one call, torch profiler)", ""]
        for label, prof in profiles.items():
            if "error" in prof:
                out.append(f"- {label}: {prof['error']}")
                continue
            out.append(f"- {label}: {prof['kernels']} device activities, {prof['device_us']:.0f} us of device time; costliest: " + "; ".join(f"{name} x{n} = {us:.0f} us" for name, n, us in prof["top"]))
        out.append("")
    failures = [c for c in cells if c.build_capture_error and not c.build_capture_error.startswith("n/a") or c.round_capture_error and not c.round_capture_error.startswith("n/a")]
    for c in failures:
        out.append(f"- graph capture failed at bs={c.bs} B={c.budget}: builder: {c.build_capture_error}; round: {c.round_capture_error}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=os.environ.get("PATCHKIT_TARGET"), help="patched SGLang tree holding python/sglang/srt/speculative/ddtree_utils.py (default: $PATCHKIT_TARGET)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="small sizes for a development run (CPU)")
    parser.add_argument("--batches", type=int, nargs="+", default=None)
    parser.add_argument("--budgets", type=int, nargs="+", default=None)
    parser.add_argument("--vocab", type=int, default=None)
    parser.add_argument("--depth", type=int, default=15, help="drafted depths L = block_size - 1")
    parser.add_argument("--context", type=int, default=None)
    parser.add_argument("--verify-layers", type=int, default=None, help="decoder layers timed for the measured verify (scaled to 36)")
    parser.add_argument("--no-verify", action="store_true", help="skip the measured verify forward")
    parser.add_argument("--no-profile", action="store_true", help="skip the kernel-launch profile")
    parser.add_argument("--time-budget-ms", type=float, default=None, help="rough time budget per measurement")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--triton-proto", action="store_true", help="also measure the fused triton prototype (ddtree_triton_proto.py)")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    parser.add_argument("--json", type=Path, default=None, help="write raw numbers here")
    args = parser.parse_args(argv)
    if args.tree is None:
        parser.error("--tree is required (or set PATCHKIT_TARGET)")
    quick = args.quick
    args.batches = args.batches or ([1, 4] if quick else [1, 16, 64])
    args.budgets = args.budgets or ([16, 64] if quick else [16, 64, 128, 512])
    args.vocab = args.vocab or (4096 if quick else 151936)
    args.context = args.context or (64 if quick else 1024)
    args.verify_layers = args.verify_layers or (1 if quick else 2)
    args.time_budget_ms = args.time_budget_ms or (100.0 if quick else 400.0)
    args.target_shape = TINY_TARGET if quick else QWEN3_8B
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    mod = load_ddtree_utils(Path(args.tree))
    target = None
    if not args.no_verify:
        target = RandomTarget(args.target_shape, args.verify_layers, device, torch.bfloat16 if device.type == "cuda" else torch.float32)
    cells = []
    for bs in args.batches:
        for budget in args.budgets:
            t0 = time.perf_counter()
            cell = run_cell(mod, bs, budget, args, target, device)
            cells.append(cell)
            if args.out:  # partial report after every cell, in case the run is cut short
                args.out.write_text(render_report(cells, device, args, str(Path(args.tree) / MODULE_PATH), {}))
            print(f"[cell bs={bs} B={budget}] {time.perf_counter() - t0:.1f}s ref={fmt(cell.ref_build_ms)} eager={fmt(cell.build_eager_ms)} graph={fmt(cell.build_graph_ms)} round={fmt(cell.round_eager_ms)}/{fmt(cell.round_graph_ms)} identical={cell.trees_identical} sync={cell.host_sync}", flush=True)
    profiles = {} if args.no_profile else profile_goal_cell(mod, args, device)
    report = render_report(cells, device, args, str(Path(args.tree) / MODULE_PATH), profiles)
    print(report)
    if args.out:
        args.out.write_text(report)
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in cells], indent=1, default=str))
    return 0


def profile_goal_cell(mod: ModuleType, args, device: torch.device) -> dict:
    """Kernel counts of the builder and of the whole round at the largest measured cell near the goal cell."""
    bs = GOAL_CELL[0] if GOAL_CELL[0] in args.batches else args.batches[-1]
    budget = GOAL_CELL[1] if GOAL_CELL[1] in args.budgets else args.budgets[-1]
    logits = make_draft_logits(bs, args.depth, args.vocab, device, seed=args.seed)
    top_log_probs, top_token_ids = mod.ddtree_topk_from_logits(logits, min(budget, args.vocab))
    seq_lens = torch.full((bs,), args.context, device=device)
    targets = torch.zeros(bs, budget + 1, dtype=torch.int64, device=device)
    inputs = RoundInputs(logits, top_log_probs, top_token_ids, seq_lens, args.context * bs, targets, budget)
    profiles = {
        f"builder bs={bs} B={budget}": kernel_profile(lambda: batched_build(mod, inputs), device),
        f"round bs={bs} B={budget}": kernel_profile(lambda: batched_round(mod, inputs), device),
    }
    if args.triton_proto:
        proto = load_triton_proto()
        profiles[f"prototype round bs={bs} B={budget}"] = kernel_profile(lambda: proto_round(proto, inputs, args.context), device)
    return profiles


if __name__ == "__main__":
    sys.exit(main())
