"""Plain, per-request definitions that the batched DDTree utilities must match.

Written from the algorithm's description (a best-first heap over rank tuples),
not from any implementation: clarity over speed.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import torch


@dataclass(frozen=True)
class ReferenceTree:
    tokens: List[int]  # token of node 1..n
    depths: List[int]  # depth of node 1..n
    parents: List[int]  # parent of node 0..n, parents[0] = -1


def heap_tree(
    log_probs: Sequence[Sequence[float]], token_ids: Sequence[Sequence[int]], budget: int
) -> ReferenceTree:
    """The B most probable prefixes, in best-first pop order.

    Heap entries are (-score, rank tuple, ...): equal scores pop the
    lexicographically smaller rank tuple first. Scores are Python floats (fp64)
    updated incrementally, sibling by swapping the last log-prob, child by adding.
    """
    depth_limit = len(log_probs)
    topk = min(len(log_probs[0]), budget) if depth_limit else 0
    tokens: List[int] = []
    depths: List[int] = []
    parents = [-1]
    if budget <= 0 or topk == 0:
        return ReferenceTree(tokens, depths, parents)
    first = float(log_probs[0][0])
    heap = [(-first, (0,), 0, 1, 0, first)]
    while heap and len(tokens) < budget:
        _, ranks, parent, depth, rank, score = heapq.heappop(heap)
        tokens.append(int(token_ids[depth - 1][rank]))
        depths.append(depth)
        parents.append(parent)
        node = len(tokens)
        if rank + 1 < topk:
            row = log_probs[depth - 1]
            sibling = score - float(row[rank]) + float(row[rank + 1])
            entry = (-sibling, ranks[:-1] + (rank + 1,), parent, depth, rank + 1, sibling)
            heapq.heappush(heap, entry)
        if depth < depth_limit:
            child = score + float(log_probs[depth][0])
            heapq.heappush(heap, (-child, ranks + (0,), node, depth + 1, 0, child))
    return ReferenceTree(tokens, depths, parents)


def ancestors_or_self(parents: Sequence[int], node: int) -> List[int]:
    chain = [node]
    while parents[chain[-1]] >= 0:
        chain.append(parents[chain[-1]])
    return chain


def visibility(parents: Sequence[int]) -> torch.Tensor:
    """vis[i, j] is True when node j is node i or one of its ancestors."""
    pairs = [(node, a) for node in range(len(parents)) for a in ancestors_or_self(parents, node)]
    vis = torch.zeros(len(parents), len(parents), dtype=torch.bool)
    rows, cols = zip(*pairs)
    vis[list(rows), list(cols)] = True
    return vis


def children(parents: Sequence[int]) -> Dict[int, List[int]]:
    kids: Dict[int, List[int]] = {node: [] for node in range(len(parents))}
    for node, parent in enumerate(parents):
        if parent >= 0:
            kids[parent].append(node)
    return kids


def follow(
    tokens: Sequence[int], parents: Sequence[int], target: Sequence[int]
) -> Tuple[List[int], int]:
    """Greedy / sample-and-match walk: follow the child carrying the target's token."""
    child_maps = {node: {} for node in range(len(parents))}
    for node in range(1, len(parents)):
        if parents[node] >= 0:
            child_maps[parents[node]][tokens[node - 1]] = node
    accepted, current = [0], 0
    while target[current] in child_maps[current]:
        current = child_maps[current][target[current]]
        accepted.append(current)
    return accepted, target[current]


def top_log_probs(logits: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Top-k by (logit desc, token id asc) with fp64 log-softmax, rows of [..., V]."""
    flat = logits.float().reshape(-1, logits.shape[-1])
    values, ids = [], []
    for row in flat.tolist():
        order = sorted(range(len(row)), key=lambda token: (-row[token], token))[:k]
        ids.append(order)
        values.append([row[token] for token in order])
    log_z = torch.logsumexp(flat.double(), dim=-1, keepdim=True)
    lp = (torch.tensor(values, dtype=torch.float64) - log_z).float()
    shape = (*logits.shape[:-1], len(ids[0]))
    return lp.reshape(shape), torch.tensor(ids, dtype=torch.int64).reshape(shape)
