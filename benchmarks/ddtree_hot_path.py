"""DDTree hot path: the round after the draft forward, as the server runs it, against the verify forward.

The module under test is the patch set's ``python/sglang/srt/speculative/ddtree_utils.py``, imported
by file path (``--module FILE``, or ``--tree DIR`` / PATCHKIT_TARGET holding it), twice: as is (on
CUDA its fused Triton kernels) and with SGLANG_DDTREE_TRITON=0 (its torch path, the oracle). For
every batch size and budget asked for (default bs 1/16/64 x B 16/64/128/512, bf16 draft logits
[bs, 15, 151936], 1024-token context):

* the round as the server runs it: ``ddtree_draft_round`` (top-K + log-normaliser, tree, positions,
  FULL_MASK into a caller-owned buffer at device-computed offsets, retrieve tensors) and
  ``ddtree_verify_round`` from the target's tokens (the walk), eager (host launches included: CUDA
  events from an idle device) and replayed as one CUDA graph; the same for the torch path;
* every output compared bit for bit with the torch path, and with host-built tensors from the
  reference per-request heap (written here from the algorithm); graph replay compared with eager;
  a host-sync check (sync debug mode "error") and the kernel launches of one round (profiler);
* the stages one by one (top-K, tree, verify inputs, walk), eager and as graphs;
* the tree builder against the reference heap with its per-request device-to-host copies;
* the verify forward of a Qwen3-8B-shaped target over bs x (B + 1) tokens: its H200 roofline
  (the goal's yardstick) and, unless --no-verify, a measured forward (random weights, tree mask).

The goal: round overhead < 5% of the roofline verify in every cell, eager and graph.

    python benchmarks/ddtree_hot_path.py --tree PATCHED_TREE --out table.md --json results.json
    python benchmarks/ddtree_hot_path.py --module path/to/ddtree_utils.py --device cpu --quick
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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
import torch.nn.functional as F

MODULE_PATH = Path("python/sglang/srt/speculative/ddtree_utils.py")
WHEEL_MODULE_PATH = Path("sglang/srt/speculative/ddtree_utils.py")
TRITON_ENV = "SGLANG_DDTREE_TRITON"

# H200 ceilings named by the issue (datasheet HBM bandwidth, measured dense bf16 matmul rate).
H200_BYTES_PER_S = 4.8e12
H200_FLOPS_PER_S = 790e12

# Goals of the issues.
GOAL_OVERHEAD_FRACTION = 0.05  # the round < 5% of the roofline verify, every cell
GOAL_BUILDER_SPEEDUP = 100.0  # the builder >= 100x the reference heap at GOAL_CELL
GOAL_CELL = (64, 128)

STAGES = ("topk", "build", "inputs", "walk")


# --------------------------------------------------------------------------- module under test


def find_module(tree: Path | None, module: Path | None) -> Path:
    """The module file: ``--module`` itself, or ddtree_utils.py inside ``--tree`` (repo or wheel layout)."""
    if module is not None:
        if not module.is_file():
            raise SystemExit(f"{module}: no such file; pass --module PATH/TO/ddtree_utils.py")
        return module
    for relative in (MODULE_PATH, WHEEL_MODULE_PATH, Path("ddtree_utils.py")):
        if (tree / relative).is_file():
            return tree / relative
    raise SystemExit(f"{tree}: no {MODULE_PATH} in this tree; pass --tree PATCHED_TREE or --module FILE")


def load_module(path: Path, name: str, triton: bool) -> ModuleType:
    """Import the module by path under ``name``; ``triton=False`` imports it with the off switch set."""
    saved = os.environ.get(TRITON_ENV)
    if triton:
        os.environ.pop(TRITON_ENV, None)
    else:
        os.environ[TRITON_ENV] = "0"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses resolve their module through sys.modules
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            os.environ.pop(TRITON_ENV, None)
        else:
            os.environ[TRITON_ENV] = saved
    for needed in ("ddtree_draft_round", "ddtree_verify_round", "ddtree_verify_inputs", "ddtree_mask_size"):
        if not hasattr(module, needed):
            raise SystemExit(f"{path}: no {needed}(): this benchmark measures the v2 module's fused round")
    return module


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
    walks = [reference_walk(tree, row) for tree, row in zip(trees, targets, strict=True)]
    accept_length = torch.tensor([len(acc) - 1 for acc, _ in walks], device=device)
    bonus = torch.tensor([nxt for _, nxt in walks], device=device)
    return verify_inputs, accept_length, bonus



# --------------------------------------------------------------------------- the round as the server runs it


@dataclass
class RoundInputs:
    """Static inputs of one batched round (kept alive so a captured graph can replay on them)."""

    logits: torch.Tensor
    seq_lens: torch.Tensor
    seq_lens_sum: int
    target_tokens: torch.Tensor
    budget: int
    mask: torch.Tensor  # the caller-owned FULL_MASK buffer (exactly one round's size here)

    @property
    def k(self) -> int:
        return min(self.budget, self.logits.shape[-1])


def server_round(mod: ModuleType, inputs: RoundInputs) -> dict[str, torch.Tensor]:
    """Draft side then verify side, the v2 server's calls: mask into the graph buffer, no host total."""
    draft = mod.ddtree_draft_round(inputs.logits, inputs.budget, inputs.seq_lens, mask_out=inputs.mask)
    accept = mod.ddtree_verify_round(draft.tree, target_tokens=inputs.target_tokens)
    return round_outputs(draft, accept)


def round_outputs(draft, accept) -> dict[str, torch.Tensor]:
    tree, verify = draft.tree, draft.verify
    return {
        "top_log_probs": draft.top_log_probs, "top_token_ids": draft.top_token_ids,
        "node_token_ids": tree.node_token_ids, "depths": tree.depths, "parents": tree.parents,
        "num_nodes": tree.num_nodes, "visibility": tree.visibility,
        "positions": verify.positions, "mask": verify.custom_mask, "retrieve_index": verify.retrieve_index,
        "retrieve_next_token": verify.retrieve_next_token, "retrieve_next_sibling": verify.retrieve_next_sibling,
        "accept_index": accept.accept_index, "accept_length": accept.accept_length, "bonus": accept.bonus_tokens,
    }


def stage_calls(mod: ModuleType, inputs: RoundInputs) -> dict[str, Callable[[], object]]:
    """The round's four stages as separate calls, on fixed inputs of the earlier stages."""
    top = mod.ddtree_topk_from_logits(inputs.logits, inputs.k)
    tree = mod.build_ddtree_tree_from_topk(*top, inputs.budget)
    return {
        "topk": lambda: mod.ddtree_topk_from_logits(inputs.logits, inputs.k),
        "build": lambda: mod.build_ddtree_tree_from_topk(*top, inputs.budget),
        "inputs": lambda: mod.ddtree_verify_inputs(tree, inputs.seq_lens, mask_out=inputs.mask),
        "walk": lambda: mod.ddtree_verify_round(tree, target_tokens=inputs.target_tokens),
    }


def differences(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> list[str]:
    """Names of the outputs that differ in dtype, shape or any bit (floats compared as bits)."""
    bad = []
    for name, want in expected.items():
        got = actual[name]
        if got.dtype != want.dtype or got.shape != want.shape:
            bad.append(f"{name} (dtype/shape)")
        elif got.is_floating_point():
            bits = {torch.float32: torch.int32, torch.float64: torch.int64}[got.dtype]
            same = torch.equal(got.isnan(), want.isnan()) and torch.equal(
                got.nan_to_num(0.0, float("inf"), float("-inf")).view(bits),
                want.nan_to_num(0.0, float("inf"), float("-inf")).view(bits))
            if not same:
                bad.append(name)
        elif not torch.equal(got, want):
            bad.append(name)
    return bad


def reference_mismatches(out: dict[str, torch.Tensor], trees: list[ReferenceTree], seq_lens: list[int],
                         targets: list[list[int]], budget: int) -> list[str]:
    """The round's tree, positions, mask, retrieve tensors and walk against host-built ones."""
    problems = tree_mismatches(_TreeView(out), trees, budget)
    host = host_round_tensors(trees, seq_lens, budget + 1)
    expected = {"positions": host.positions, "mask": host.mask, "retrieve_index": host.retrieve_index,
                "retrieve_next_token": host.retrieve_next_token, "retrieve_next_sibling": host.retrieve_next_sibling}
    problems += [name for name, value in expected.items() if not np.array_equal(out[name].cpu().numpy(), value)]
    accept_index = out["accept_index"].cpu().numpy()
    for b, (tree, row) in enumerate(zip(trees, targets, strict=True)):
        accepted, bonus = reference_walk(tree, row)
        got = accept_index[b][accept_index[b] >= 0].tolist()
        if got != accepted or int(out["accept_length"][b]) != len(accepted) - 1 or int(out["bonus"][b]) != bonus:
            problems.append(f"walk of request {b}")
    return problems


class _TreeView:
    def __init__(self, out: dict[str, torch.Tensor]):
        for name in ("node_token_ids", "depths", "parents", "num_nodes", "visibility"):
            setattr(self, name, out[name])


# --------------------------------------------------------------------------- graphs and checks


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
        for weights, cache in zip(target.layers, caches, strict=True):
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


# --------------------------------------------------------------------------- one cell


@dataclass
class CellResult:
    """Everything measured for one (batch size, budget) cell; times in ms."""

    bs: int
    budget: int
    ref_build_ms: float = math.nan
    build_eager_ms: float = math.nan
    build_graph_ms: float = math.nan
    torch_build_graph_ms: float = math.nan
    trees_identical: bool = False
    tree_problems: list[str] = field(default_factory=list)
    ref_round_ms: float = math.nan
    round_eager_ms: float = math.nan
    round_graph_ms: float = math.nan
    torch_round_eager_ms: float = math.nan
    torch_round_graph_ms: float = math.nan
    equals_torch_path: list[str] = field(default_factory=list)  # differing outputs (empty: identical)
    equals_reference: list[str] = field(default_factory=list)
    graph_equals_eager: list[str] = field(default_factory=list)
    capture_error: str | None = None
    host_sync: str = "not checked"
    stage_eager_ms: dict[str, float] = field(default_factory=dict)
    stage_graph_ms: dict[str, float] = field(default_factory=dict)
    roofline: dict = field(default_factory=dict)
    verify: dict = field(default_factory=dict)
    sweeps: dict = field(default_factory=dict)
    host_enqueue_ms: float = math.nan  # host time to issue one eager round (no wait for the device)
    kernels: dict = field(default_factory=dict)  # profiler: the kernels of one fused round


PROFILE_CELLS = {(1, 16), (1, 128), (1, 512), (16, 16), (64, 16), (64, 128), (64, 512)}


def host_enqueue(fn: Callable[[], object], device: torch.device, repeat: int = 20) -> float:
    """Median host time to issue ``fn`` (the device is idle before each call and is not waited for)."""
    samples = []
    for _ in range(repeat):
        _synchronize(device)
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    _synchronize(device)
    return statistics.median(samples)


def make_inputs(mod: ModuleType, bs: int, budget: int, args, device, targets=None) -> RoundInputs:
    """A cell's round inputs: drafter-like logits, a full context per request, the mask buffer."""
    logits = make_draft_logits(bs, args.depth, args.vocab, device, seed=args.seed + 97 * bs + budget)
    total = args.context * bs
    target = torch.zeros(bs, budget + 1, dtype=torch.int64) if targets is None else torch.tensor(targets)
    return RoundInputs(
        logits, torch.full((bs,), args.context, device=device), total, target.to(device),
        budget, torch.zeros(mod.ddtree_mask_size(total, bs, budget + 1), dtype=torch.bool, device=device))


def run_cell(fused: ModuleType, oracle: ModuleType, bs: int, budget: int, args, target, device) -> CellResult:
    cell = CellResult(bs, budget)
    width, vocab = budget + 1, args.vocab
    seq_lens_list = [args.context] * bs
    inputs = make_inputs(fused, bs, budget, args, device)
    logits = inputs.logits
    top = fused.ddtree_topk_from_logits(logits, min(budget, vocab))
    trees = reference_trees_from_topk(*top, budget)
    targets = make_target_tokens(trees, width, vocab, seed=args.seed + bs)
    inputs.target_tokens = torch.tensor(targets, device=device)
    oracle_inputs = RoundInputs(**{**vars(inputs), "mask": torch.zeros_like(inputs.mask)})

    # Correctness first: the fused round against the torch path and the reference heap.
    out = server_round(fused, inputs)
    expected = server_round(oracle, oracle_inputs)
    cell.equals_torch_path = differences(out, expected)
    cell.equals_reference = reference_mismatches(out, trees, seq_lens_list, targets, budget)
    cell.tree_problems = tree_mismatches(_TreeView(out), trees, budget)
    cell.trees_identical = not cell.tree_problems

    budget_ms = args.time_budget_ms
    if not args.no_reference:
        cell.ref_build_ms = time_host(lambda: reference_trees_from_topk(*top, budget), device, 1,
                                      repeats_for(bs * 0.5, budget_ms, 3, 15)).median_ms
        cell.ref_round_ms = time_host(lambda: reference_round(logits, budget, seq_lens_list, inputs.target_tokens),
                                      device, 1, repeats_for(bs * 1.0, budget_ms, 3, 10)).median_ms
    cell.round_eager_ms = time_device(lambda: server_round(fused, inputs), device, 3,
                                      repeats_for(0.3, budget_ms, 20, 200)).median_ms
    cell.torch_round_eager_ms = time_device(lambda: server_round(oracle, oracle_inputs), device, 2,
                                            repeats_for(10.0, budget_ms, 5, 30)).median_ms
    stages = stage_calls(fused, inputs)
    for name, fn in stages.items():
        cell.stage_eager_ms[name] = time_device(fn, device, 3, repeats_for(0.1, budget_ms / 4, 20, 200)).median_ms
    cell.build_eager_ms = cell.stage_eager_ms["build"]
    if device.type != "cuda":
        cell.capture_error, cell.host_sync = "n/a (cpu)", "n/a (cpu)"
    else:
        cell.host_enqueue_ms = host_enqueue(lambda: server_round(fused, inputs), device)
        if (bs, budget) in PROFILE_CELLS and not args.no_profile:
            cell.kernels = kernel_profile(lambda: server_round(fused, inputs), device, top=12)
        cell.host_sync = host_sync_check(lambda: server_round(fused, inputs), device)
        captured = capture_graph(lambda: server_round(fused, inputs))
        cell.capture_error = captured.error
        if captured.graph is not None:
            cell.round_graph_ms = time_device(captured.graph.replay, device, 3, repeats_for(0.1, budget_ms, 30, 300)).median_ms
            cell.graph_equals_eager = differences(captured.outputs, out)
        del captured
        oracle_graph = capture_graph(lambda: server_round(oracle, oracle_inputs))
        if oracle_graph.graph is not None:
            cell.torch_round_graph_ms = time_device(oracle_graph.graph.replay, device, 2, repeats_for(5.0, budget_ms, 5, 50)).median_ms
        del oracle_graph
        for name, fn in stages.items():
            graph = capture_graph(fn)
            cell.stage_graph_ms[name] = time_device(graph.graph.replay, device, 3, repeats_for(0.05, budget_ms / 4, 30, 300)).median_ms if graph.graph else math.nan
            del graph
        cell.build_graph_ms = cell.stage_graph_ms["build"]
        oracle_build = capture_graph(lambda: oracle.build_ddtree_tree_from_topk(*top, budget))
        if oracle_build.graph is not None:
            cell.torch_build_graph_ms = time_device(oracle_build.graph.replay, device, 2, repeats_for(2.0, budget_ms, 5, 50)).median_ms
        del oracle_build
        if args.sweep and (bs, budget) in SWEEP_CELLS:
            cell.sweeps = sweep(fused, inputs, out, device)
    roof = verify_roofline(QWEN3_8B, bs, width, args.context)
    cell.roofline = asdict(roof) | {"ms": roof.ms}
    if target is not None:
        visibility = torch.as_tensor(np.stack([t.visibility for t in trees]), device=device)
        cell.verify = asdict(measure_verify(target, visibility, args.context, device, budget_ms))
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return cell


# --------------------------------------------------------------------------- tunable sweeps


SWEEP_CELLS = {(1, 128), (1, 512), (16, 16), (64, 16), (64, 512)}
TOPK_CONFIGS = ((512, 4), (256, 4), (1024, 4), (512, 8), (1024, 8))  # (tile, warps)
HEAP_WARPS = (1, 2, 4, 8)


@contextlib.contextmanager
def patched(module: ModuleType, **values):
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def sweep(mod: ModuleType, inputs: RoundInputs, out: dict[str, torch.Tensor], device) -> dict:
    """Graph times of the top-K per (tile, warps) and of the heap kernel per warp count.

    Each configuration's outputs are checked against the default's ('!' marks a difference).
    """
    result: dict = {"topk": {}, "heap": {}}

    def topk():
        return mod.ddtree_topk_from_logits(inputs.logits, inputs.k)

    def build():
        return mod.build_ddtree_tree_from_topk(out["top_log_probs"], out["top_token_ids"], inputs.budget)

    for tile, warps in TOPK_CONFIGS:
        with patched(mod, _TOPK_TILE=tile, _TOPK_WARPS=warps):
            same = all(torch.equal(a, out[b]) for a, b in zip(topk(), ("top_log_probs", "top_token_ids"), strict=True))
            result["topk"][f"{tile}/{warps}w"] = graph_ms(topk, device) + ("" if same else " !")
    for warps in HEAP_WARPS:
        with patched(mod, _heap_warps=lambda block, w=warps: w):
            same = torch.equal(build().parents, out["parents"])
            result["heap"][f"{warps}w"] = graph_ms(build, device) + ("" if same else " !")
    return result


def graph_ms(fn: Callable[[], object], device) -> str:
    graph = capture_graph(fn)
    return fmt(time_device(graph.graph.replay, device, 3, 30).median_ms) if graph.graph else "capture failed"


# --------------------------------------------------------------------------- report


def fmt(value: float, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def pct(a: float, roof: float) -> str:
    r = ratio(a, roof)
    return "-" if math.isnan(r) else f"{100 * r:.2f}%"


def _ok(problems: list[str]) -> str:
    return "yes" if not problems else "NO: " + ", ".join(problems[:4])


def round_table(cells: list[CellResult]) -> list[str]:
    lines = [
        "| bs | B | roofline verify (ms) | round graph (ms) | graph % roofline | round eager (ms) | eager % roofline | "
        "torch path graph / eager (ms) | reference round (ms) | measured verify eager / graph (ms) | host sync | == torch path | == reference | graph == eager |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|:---:|:---:|:---:|",
    ]
    for c in cells:
        roof = c.roofline["ms"]
        lines.append(
            f"| {c.bs} | {c.budget} | {fmt(roof)} | {fmt(c.round_graph_ms)} | {pct(c.round_graph_ms, roof)} | "
            f"{fmt(c.round_eager_ms)} | {pct(c.round_eager_ms, roof)} | {fmt(c.torch_round_graph_ms)} / {fmt(c.torch_round_eager_ms)} | "
            f"{fmt(c.ref_round_ms, 2)} | {fmt(c.verify.get('total_ms', math.nan), 2)} / {fmt(c.verify.get('total_graph_ms', math.nan), 2)} | "
            f"{c.host_sync if c.host_sync != 'none' else 'none'} | {_ok(c.equals_torch_path)} | {_ok(c.equals_reference)} | "
            f"{_ok(c.graph_equals_eager) if not c.capture_error else ('n/a' if c.capture_error.startswith('n/a') else 'capture failed')} |"
        )
    return lines


def stage_table(cells: list[CellResult]) -> list[str]:
    head = " | ".join(f"{s} eager / graph (ms)" for s in STAGES)
    lines = [f"| bs | B | {head} | sum of graphs % roofline | host issue of an eager round (ms) | roofline weight / FLOP / KV (ms) |",
             "|---:|---:|" + "---:|" * (len(STAGES) + 3)]
    for c in cells:
        r = c.roofline
        cols = " | ".join(f"{fmt(c.stage_eager_ms.get(s, math.nan))} / {fmt(c.stage_graph_ms.get(s, math.nan))}" for s in STAGES)
        graph_sum = sum(c.stage_graph_ms.get(s, math.nan) for s in STAGES)
        lines.append(f"| {c.bs} | {c.budget} | {cols} | {pct(graph_sum, r['ms'])} | {fmt(c.host_enqueue_ms)} | "
                     f"{fmt(r['weight_ms'], 2)} / {fmt(r['flop_ms'], 2)} / {fmt(r['kv_ms'], 2)} |")
    return lines


def kernel_lines(cells: list[CellResult]) -> list[str]:
    """Per profiled cell: the kernels of one fused round with their device time."""
    lines = []
    for c in cells:
        prof = c.kernels
        if not prof:
            continue
        if "error" in prof:
            lines.append(f"- bs={c.bs} B={c.budget}: {prof['error']}")
            continue
        lines.append(f"- bs={c.bs} B={c.budget}: {prof['kernels']} kernels, {prof['device_us']:.0f} us on the device "
                     f"(graph round {1e3 * c.round_graph_ms:.0f} us): "
                     + "; ".join(f"{name} x{n} {us:.1f} us" for name, n, us in prof["top"]))
    return lines


def builder_table(cells: list[CellResult]) -> list[str]:
    lines = [
        "| bs | B | reference heap + D2H (ms) | fused eager (ms) | fused graph (ms) | torch path graph (ms) | speedup vs reference (graph) | trees identical to reference |",
        "|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for c in cells:
        lines.append(
            f"| {c.bs} | {c.budget} | {fmt(c.ref_build_ms)} | {fmt(c.build_eager_ms)} | {fmt(c.build_graph_ms)} | "
            f"{fmt(c.torch_build_graph_ms)} | {fmt(ratio(c.ref_build_ms, c.build_graph_ms), 1)}x | {'yes' if c.trees_identical else 'NO'} |"
        )
    return lines


def goal_lines(cells: list[CellResult], device: torch.device) -> list[str]:
    """One line per goal: MET, or MISSED with the cells and by how much."""
    lines = []
    for label, attr in (("graph", "round_graph_ms"), ("eager", "round_eager_ms")):
        fractions = [(ratio(getattr(c, attr), c.roofline["ms"]), c) for c in cells]
        measured = [(f, c) for f, c in fractions if not math.isnan(f)]
        if not measured:
            lines.append(f"- round overhead < {100 * GOAL_OVERHEAD_FRACTION:.0f}% of the roofline verify ({label}): not measured")
            continue
        worst, wc = max(measured, key=lambda fc: fc[0])
        missed = [c for f, c in measured if f >= GOAL_OVERHEAD_FRACTION]
        verdict = "MET" if not missed and len(measured) == len(cells) else (
            f"MISSED in {len(missed)}/{len(cells)} cells: " + ", ".join(
                f"bs={c.bs} B={c.budget} {100 * ratio(getattr(c, attr), c.roofline['ms']):.1f}%" for c in missed))
        lines.append(f"- round overhead < {100 * GOAL_OVERHEAD_FRACTION:.0f}% of the roofline verify in every cell ({label}): "
                     f"worst {100 * worst:.2f}% at bs={wc.bs} B={wc.budget} -> {verdict}")
    bad = [c for c in cells if c.equals_torch_path or c.equals_reference or c.graph_equals_eager]
    lines.append("- fused round bit-identical to the torch path and to host-built reference tensors, graph == eager: "
                 + ("MET" if not bad else "MISSED: " + "; ".join(
                     f"bs={c.bs} B={c.budget}: torch {c.equals_torch_path[:3]} ref {c.equals_reference[:3]} graph {c.graph_equals_eager[:3]}" for c in bad)))
    if device.type == "cuda":
        syncs = [c for c in cells if c.host_sync != "none" or c.capture_error]
        lines.append("- no host sync in the round (sync debug mode 'error') and whole-round graph capture: "
                     + ("MET" if not syncs else "MISSED: " + "; ".join(f"bs={c.bs} B={c.budget}: {c.host_sync} / {c.capture_error}" for c in syncs[:4])))
    goal = next((c for c in cells if (c.bs, c.budget) == GOAL_CELL), None)
    if goal is not None and not math.isnan(goal.ref_build_ms):
        r = ratio(goal.ref_build_ms, goal.build_graph_ms)
        lines.append(f"- builder >= {GOAL_BUILDER_SPEEDUP:.0f}x the reference heap at bs={goal.bs}, B={goal.budget} (graph): "
                     f"{fmt(r, 1)}x -> " + ("MET" if r >= GOAL_BUILDER_SPEEDUP else "MISSED" if not math.isnan(r) else "not measured"))
    return lines


def environment_lines(device: torch.device, args, mod_path: Path, fused: ModuleType) -> list[str]:
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    triton_version = getattr(getattr(fused, "triton", None), "__version__", "missing")
    return [
        f"- device: {gpu}; torch {torch.__version__}; triton {triton_version}; python {platform.python_version()}",
        f"- module under test: `{mod_path}` (fused kernels: {'on' if fused._DDTREE_TRITON_ENABLED and fused.triton is not None else 'OFF'}; oracle: the same file with {TRITON_ENV}=0)",
        f"- draft logits bf16 [bs, {args.depth}, {args.vocab}]; context {args.context} tokens; K = min(B, V); seed {args.seed}",
        "- round = ddtree_draft_round(logits, B, seq_lens, mask_out=buffer) + ddtree_verify_round(tree, target_tokens=...)",
        f"- roofline: Qwen3-8B shape, weights {QWEN3_8B.weight_bytes() / 1e9:.2f} GB bf16 / {H200_BYTES_PER_S / 1e12:.1f} TB/s vs FLOPs / {H200_FLOPS_PER_S / 1e12:.0f} TFLOP/s (max of the two; KV read shown apart)",
        "- times: medians of repeats after warm-up; CUDA events from an idle device (eager includes the host's launches); wall clock for the reference flows",
    ]


def render_report(cells: list[CellResult], device, args, mod_path: Path, fused: ModuleType, profiles: dict) -> str:
    out = ["# DDTree hot path", "", *environment_lines(device, args, mod_path, fused), "",
           "## Goals", "", *goal_lines(cells, device), "",
           "## Round overhead vs the verify forward", "", *round_table(cells), "",
           "## Stages of the fused round", "", *stage_table(cells), "",
           "## Tree builder vs the reference heap", "", *builder_table(cells), ""]
    kernels = kernel_lines(cells)
    if kernels:
        out += ["## Kernels of one fused round (torch profiler, device time)", "", *kernels, ""]
    sweeps = [c for c in cells if c.sweeps]
    if sweeps:
        out += ["## Tunables (graph ms; '!' = outputs differ from the default)", ""]
        out += [f"- bs={c.bs} B={c.budget}: top-K tile/warps " + ", ".join(f"{k} {v}" for k, v in c.sweeps["topk"].items())
                + "; heap warps " + ", ".join(f"{k} {v}" for k, v in c.sweeps["heap"].items()) for c in sweeps]
        out.append("")
    if profiles:
        out += ["## Kernel launches of one round (torch profiler)", ""]
        for label, prof in profiles.items():
            if "error" in prof:
                out.append(f"- {label}: {prof['error']}")
                continue
            out.append(f"- {label}: {prof['kernels']} kernels, {prof['device_us']:.0f} us of device time; "
                       + "; ".join(f"{name} x{n} = {us:.0f} us" for name, n, us in prof["top"]))
        out.append("")
    return "\n".join(out) + "\n"


def cell_summary(c: CellResult) -> str:
    roof = c.roofline.get("ms", math.nan)
    stages = " ".join(f"{s}={fmt(c.stage_eager_ms.get(s, math.nan))}/{fmt(c.stage_graph_ms.get(s, math.nan))}" for s in STAGES)
    return (f"round graph {fmt(c.round_graph_ms)} ({pct(c.round_graph_ms, roof)}) eager {fmt(c.round_eager_ms)} "
            f"({pct(c.round_eager_ms, roof)}) torch {fmt(c.torch_round_graph_ms)}/{fmt(c.torch_round_eager_ms)} | {stages} | "
            f"torch==: {_ok(c.equals_torch_path)} ref==: {_ok(c.equals_reference)} sync: {c.host_sync}")


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=os.environ.get("PATCHKIT_TARGET"),
                        help="tree holding python/sglang/srt/speculative/ddtree_utils.py (default: $PATCHKIT_TARGET)")
    parser.add_argument("--module", type=Path, default=None, help="the module file itself (instead of --tree)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="small sizes for a development run (CPU)")
    parser.add_argument("--batches", type=int, nargs="+", default=None)
    parser.add_argument("--budgets", type=int, nargs="+", default=None)
    parser.add_argument("--vocab", type=int, default=None)
    parser.add_argument("--depth", type=int, default=15, help="drafted depths L = block_size - 1")
    parser.add_argument("--context", type=int, default=None)
    parser.add_argument("--verify-layers", type=int, default=None, help="decoder layers timed for the measured verify")
    parser.add_argument("--no-verify", action="store_true", help="skip the measured verify forward (the roofline stays)")
    parser.add_argument("--no-reference", action="store_true", help="skip timing the per-request reference flows")
    parser.add_argument("--no-profile", action="store_true", help="skip the kernel-launch profile")
    parser.add_argument("--sweep", action="store_true", help="also time the kernels' tunables at a few cells")
    parser.add_argument("--time-budget-ms", type=float, default=None, help="rough time budget per measurement")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    parser.add_argument("--json", type=Path, default=None, help="write raw numbers here")
    parser.add_argument("--warm-only", action="store_true", help="only compile the run's kernel variants, in --jobs processes")
    parser.add_argument("--jobs", type=int, default=4, help="processes for --warm-only")
    args = parser.parse_args(argv)
    if args.tree is None and args.module is None:
        parser.error("pass --tree DIR or --module FILE (or set PATCHKIT_TARGET)")
    quick = args.quick
    args.batches = args.batches or ([1, 4] if quick else [1, 16, 64])
    args.budgets = args.budgets or ([16, 64] if quick else [16, 64, 128, 512])
    args.vocab = args.vocab or (4096 if quick else 151936)
    args.context = args.context or (64 if quick else 1024)
    args.verify_layers = args.verify_layers or (1 if quick else 2)
    args.time_budget_ms = args.time_budget_ms or (100.0 if quick else 300.0)
    args.target_shape = TINY_TARGET if quick else QWEN3_8B
    return args


def profile_round(fused: ModuleType, oracle: ModuleType, args, device: torch.device) -> dict:
    """Kernel launches of one fused round and one torch-path round at the goal cell (or the largest)."""
    bs = GOAL_CELL[0] if GOAL_CELL[0] in args.batches else args.batches[-1]
    budget = GOAL_CELL[1] if GOAL_CELL[1] in args.budgets else args.budgets[-1]
    inputs = make_inputs(fused, bs, budget, args, device)
    return {
        f"fused round bs={bs} B={budget}": kernel_profile(lambda: server_round(fused, inputs), device),
        f"torch-path round bs={bs} B={budget}": kernel_profile(lambda: server_round(oracle, inputs), device),
    }


def warm_cell(task: tuple) -> str:
    """In a worker process: every fused call of one cell once, so Triton compiles (and caches) its variants."""
    mod_path, bs, budget, args = task
    device = torch.device(args.device)
    mod = load_module(Path(mod_path), "ddtree_utils_warm", triton=True)
    t0 = time.perf_counter()
    inputs = make_inputs(mod, bs, budget, args, device)
    out = server_round(mod, inputs)
    for fn in stage_calls(mod, inputs).values():
        fn()
    if args.sweep and (bs, budget) in SWEEP_CELLS:
        for tile, warps in TOPK_CONFIGS:
            with patched(mod, _TOPK_TILE=tile, _TOPK_WARPS=warps):
                mod.ddtree_topk_from_logits(inputs.logits, inputs.k)
        for warps in HEAP_WARPS:
            with patched(mod, _heap_warps=lambda block, w=warps: w):
                mod.build_ddtree_tree_from_topk(out["top_log_probs"], out["top_token_ids"], budget)
    torch.cuda.synchronize(device) if device.type == "cuda" else None
    return f"warm bs={bs} B={budget}: {time.perf_counter() - t0:.1f}s"


def warm_all(mod_path: Path, args) -> int:
    """Compile every kernel variant of the run in ``--jobs`` processes (Triton's cache is shared on disk)."""
    import multiprocessing

    tasks = [(str(mod_path), bs, budget, args) for bs in args.batches for budget in args.budgets]
    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(max(1, args.jobs)) as pool:
        for line in pool.imap_unordered(warm_cell, tasks):
            print(line, flush=True)
    print(f"warm-up of {len(tasks)} cells in {time.perf_counter() - t0:.1f}s", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    mod_path = find_module(args.tree, args.module)
    if args.warm_only:
        return warm_all(mod_path, args)
    fused = load_module(mod_path, "ddtree_utils_fused", triton=True)
    oracle = load_module(mod_path, "ddtree_utils_torch_path", triton=False)
    target = None
    if not args.no_verify:
        target = RandomTarget(args.target_shape, args.verify_layers, device, torch.bfloat16 if device.type == "cuda" else torch.float32)
    cells: list[CellResult] = []
    for bs in args.batches:
        for budget in args.budgets:
            t0 = time.perf_counter()
            cell = run_cell(fused, oracle, bs, budget, args, target, device)
            cells.append(cell)
            if args.out:  # partial report after every cell, in case the run is cut short
                args.out.write_text(render_report(cells, device, args, mod_path, fused, {}))
            if args.json:
                args.json.write_text(json.dumps([asdict(c) for c in cells], indent=1, default=str))
            print(f"[cell bs={bs} B={budget}] {time.perf_counter() - t0:.1f}s {cell_summary(cell)}", flush=True)
    profiles = {} if args.no_profile else profile_round(fused, oracle, args, device)
    report = render_report(cells, device, args, mod_path, fused, profiles)
    print(report)
    if args.out:
        args.out.write_text(report)
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in cells], indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
