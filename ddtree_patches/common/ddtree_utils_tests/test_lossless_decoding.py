"""End to end: DDTree decoding on a tiny KV-cached transformer is lossless.

The target sees the tree exactly as SGLang's TARGET_VERIFY pass would give it:
verify tokens [root, nodes...], rotary positions seq_len + depth, and the flat
FULL_MASK sliced per request. After the walk, the accepted path's K/V is
compacted into place. Greedy tree decoding must then reproduce greedy
autoregressive decoding token for token, and at T > 0 the committed tokens must
follow the target's own distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Tuple

import torch

Cache = List[Tuple[torch.Tensor, torch.Tensor]]  # per layer: K, V [len, heads, head_dim]


class TinyDecoder:
    """A few pre-norm attention + MLP layers with rotary positions, in float64
    so that tree and sequential evaluation agree far below any argmax gap."""

    def __init__(self, vocab: int, dim: int = 32, heads: int = 2, layers: int = 2, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)

        def weight(*shape: int, scale: float) -> torch.Tensor:
            return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

        self.heads, self.head_dim = heads, dim // heads
        self.embed = weight(vocab, dim, scale=1.0)
        self.layers = [
            {
                "qkv": weight(dim, 3 * dim, scale=dim**-0.5),
                "out": weight(dim, dim, scale=dim**-0.5),
                "up": weight(dim, 4 * dim, scale=dim**-0.5),
                "down": weight(4 * dim, dim, scale=(4 * dim) ** -0.5),
            }
            for _ in range(layers)
        ]
        self.head = weight(dim, vocab, scale=3 * dim**-0.5)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        half = self.head_dim // 2
        freq = 1.0 / (100.0 ** (torch.arange(half, dtype=torch.float64) / half))
        angle = positions.double()[:, None, None] * freq
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat(
            [x1 * angle.cos() - x2 * angle.sin(), x1 * angle.sin() + x2 * angle.cos()], -1
        )

    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, cache: Cache, mask: torch.Tensor
    ) -> Tuple[torch.Tensor, Cache]:
        """Logits for ``tokens`` and the cache with their K/V appended.

        ``mask`` is [q, cached + q] bool, True where the query may attend.
        """
        hidden = self.embed[tokens]
        new_cache = []
        for layer, (past_k, past_v) in zip(self.layers, cache):
            normed = hidden / hidden.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
            q, k, v = (
                (normed @ layer["qkv"]).view(len(tokens), 3, self.heads, self.head_dim).unbind(1)
            )
            keys = torch.cat([past_k, self.rotate(k, positions)])
            values = torch.cat([past_v, v])
            scores = (
                torch.einsum("qhd,khd->hqk", self.rotate(q, positions), keys) / self.head_dim**0.5
            )
            attn = scores.masked_fill(~mask, float("-inf")).softmax(-1)
            out = torch.einsum("hqk,khd->qhd", attn, values).reshape(len(tokens), -1)
            hidden = hidden + out @ layer["out"]
            normed = hidden / hidden.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
            hidden = hidden + torch.nn.functional.gelu(normed @ layer["up"]) @ layer["down"]
            new_cache.append((keys, values))
        return hidden @ self.head, new_cache

    def empty_cache(self) -> Cache:
        empty = torch.zeros(0, self.heads, self.head_dim, dtype=torch.float64)
        return [(empty, empty) for _ in self.layers]

    def prefill(self, tokens: List[int]) -> Tuple[torch.Tensor, Cache]:
        n = len(tokens)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        return self.forward(torch.tensor(tokens), torch.arange(n), self.empty_cache(), causal)

    def next_logits(self, tokens: List[int]) -> torch.Tensor:
        return self.prefill(tokens)[0][-1]


def greedy_autoregressive(
    model: TinyDecoder, prompt: List[int], count: int
) -> Tuple[List[int], Cache]:
    logits, cache = model.prefill(prompt)
    out = [int(logits[-1].argmax())]
    while len(out) < count:
        position = torch.tensor([len(prompt) + len(out) - 1])
        mask = torch.ones(1, cache[0][0].shape[0] + 1, dtype=torch.bool)
        logits, cache = model.forward(torch.tensor(out[-1:]), position, cache, mask)
        out.append(int(logits[-1].argmax()))
    return out, cache


@dataclass
class Request:
    tokens: List[int]  # everything committed, the root (not yet in the cache) last
    cache: Cache
    accepted: List[int] = field(default_factory=list)


def verify_round(ddtree_utils, model, requests, draft_logits, budget, temperatures, generator=None):
    """One DDTree round for a batch: build, verify with the flat mask, walk, compact."""
    top = ddtree_utils.ddtree_topk_from_logits(draft_logits, min(budget, draft_logits.shape[-1]))
    tree = ddtree_utils.build_ddtree_tree_from_topk(*top, budget)
    seq_lens = torch.tensor([r.cache[0][0].shape[0] for r in requests])
    positions = ddtree_utils.ddtree_positions(tree, seq_lens)
    flat_mask = ddtree_utils.ddtree_custom_mask(tree, seq_lens, int(seq_lens.sum()))
    roots = torch.tensor([[r.tokens[-1]] for r in requests])
    verify_ids = torch.cat([roots, tree.node_token_ids], dim=1)
    n = tree.num_verify_tokens

    logits, extended, offset = [], [], 0
    for b, request in enumerate(requests):
        width = int(seq_lens[b]) + n
        mask = flat_mask[offset : offset + n * width].view(n, width)
        offset += n * width
        out, cache = model.forward(verify_ids[b], positions[b], request.cache, mask)
        logits.append(out)
        extended.append(cache)
    target = ddtree_utils.ddtree_sample_target_tokens(torch.stack(logits), temperatures, generator)
    accept_index, accept_length, bonus = ddtree_utils.ddtree_follow_verified(tree, target)

    for b, request in enumerate(requests):
        path = accept_index[b, : int(accept_length[b]) + 1]
        start = int(seq_lens[b])
        # Move the accepted nodes' K/V (root first) to the front of the tail.
        request.cache = [
            (torch.cat([k[:start], k[start + path]]), torch.cat([v[:start], v[start + path]]))
            for k, v in extended[b]
        ]
        request.tokens += verify_ids[b, path[1:]].tolist() + [int(bonus[b])]
        request.accepted.append(int(accept_length[b]))
    return tree


def perturbed_target_drafts(model, contexts, depth, noise, gen):
    """Drafter: the target's own next-token logits along its greedy path, plus noise."""
    drafts = []
    for context in contexts:
        context, rows = list(context), []
        for _ in range(depth):
            logits = model.next_logits(context)
            rows.append(
                logits + torch.randn(logits.shape, generator=gen, dtype=torch.float64) * noise
            )
            context.append(int(logits.argmax()))
        drafts.append(torch.stack(rows))
    return torch.stack(drafts).float()


def test_greedy_tree_decoding_equals_autoregressive(ddtree_utils):
    vocab, depth, budget, new_tokens = 16, 4, 12, 40
    model = TinyDecoder(vocab, seed=1)
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5, 8, 9, 7], [2, 7]]
    gen = torch.Generator().manual_seed(0)

    requests = []
    for prompt in prompts:
        logits, cache = model.prefill(prompt)
        requests.append(Request(prompt + [int(logits[-1].argmax())], cache))
    greedy = torch.zeros(len(prompts))
    while min(len(r.tokens) - len(p) for r, p in zip(requests, prompts)) < new_tokens:
        drafts = perturbed_target_drafts(model, [r.tokens for r in requests], depth, 1.5, gen)
        verify_round(ddtree_utils, model, requests, drafts, budget, greedy)

    for request, prompt in zip(requests, prompts):
        expected, expected_cache = greedy_autoregressive(model, prompt, new_tokens)
        assert request.tokens[len(prompt) : len(prompt) + new_tokens] == expected
        # The compacted cache equals the sequential one for the committed prefix.
        cached = min(request.cache[0][0].shape[0], expected_cache[0][0].shape[0])
        for (k, v), (k_ref, v_ref) in zip(request.cache, expected_cache):
            torch.testing.assert_close(k[:cached], k_ref[:cached], rtol=0, atol=1e-10)
            torch.testing.assert_close(v[:cached], v_ref[:cached], rtol=0, atol=1e-10)
    accepted = [a for r in requests for a in r.accepted]
    # Without real speculation this test would prove little.
    assert sum(accepted) / len(accepted) > 1.0
    assert max(accepted) >= 3


def random_drafter(context: List[int], depth: int, vocab: int) -> torch.Tensor:
    """A drafter that knows nothing about the target but is a function of the context."""
    seed = hash(tuple(context)) % (2**31)
    return torch.randn(depth, vocab, generator=torch.Generator().manual_seed(seed)) * 2


def verify_once(ddtree_utils, model, tokens, cache, depth, budget):
    """Build the tree for ``tokens`` (root last) and run the target over it once."""
    draft = random_drafter(tokens, depth, model.embed.shape[0]).unsqueeze(0)
    top = ddtree_utils.ddtree_topk_from_logits(draft, budget)
    tree = ddtree_utils.build_ddtree_tree_from_topk(*top, budget)
    seq_lens = torch.tensor([cache[0][0].shape[0]])
    mask = ddtree_utils.ddtree_custom_mask(tree, seq_lens, int(seq_lens.sum()))
    verify_ids = torch.cat([torch.tensor(tokens[-1:]), tree.node_token_ids[0]])
    positions = ddtree_utils.ddtree_positions(tree, seq_lens)[0]
    n = tree.num_verify_tokens
    logits, _ = model.forward(verify_ids, positions, cache, mask.view(n, -1))
    return tree, verify_ids, logits


def sample_and_walk(ddtree_utils, tree, verify_ids, logits, trials, gen):
    """Independent per-node target samples for ``trials`` copies of one verified tree;
    returns each trial's committed tokens (accepted drafted nodes, then the bonus)."""
    copies = type(tree)(
        **{
            name: value.expand(trials, *value.shape[1:]) if torch.is_tensor(value) else value
            for name, value in vars(tree).items()
        }
    )
    n, vocab = logits.shape
    target = ddtree_utils.ddtree_sample_target_tokens(
        logits.expand(trials, n, vocab), torch.ones(trials), gen
    )
    accept_index, accept_length, bonus = ddtree_utils.ddtree_follow_verified(copies, target)
    committed = []
    for t in range(trials):
        path = accept_index[t, 1 : int(accept_length[t]) + 1]
        committed.append(verify_ids[path].tolist() + [int(bonus[t])])
    return committed


def test_sampled_tree_decoding_follows_target_distribution(ddtree_utils):
    vocab, depth, budget, trials = 5, 3, 8, 6000
    model = TinyDecoder(vocab, seed=2)
    prompt = [1, 4, 2, 0]
    gen = torch.Generator().manual_seed(1234)

    # Round 1 is identical for every trial until the target samples, so verify
    # once and draw each trial's per-node samples independently.
    _, cache = model.prefill(prompt[:-1])
    round_one = sample_and_walk(
        ddtree_utils, *verify_once(ddtree_utils, model, prompt, cache, depth, budget), trials, gen
    )
    pairs = [tuple(tokens[:2]) for tokens in round_one if len(tokens) >= 2]
    # Trials that committed only the bonus need a second round, whose context
    # depends only on that bonus token.
    only_bonus = [tokens[0] for tokens in round_one if len(tokens) == 1]
    _, cache = model.prefill(prompt)
    for token in sorted(set(only_bonus)):
        context = prompt + [token]
        verified = verify_once(ddtree_utils, model, context, cache, depth, budget)
        round_two = sample_and_walk(ddtree_utils, *verified, only_bonus.count(token), gen)
        pairs += [(token, tokens[0]) for tokens in round_two]
    assert len(pairs) == trials
    # The tree must matter: most trials take their first token from a drafted node.
    assert len(only_bonus) < trials / 2

    first = torch.softmax(model.next_logits(prompt), -1)
    expected = (
        torch.stack(
            [first[a] * torch.softmax(model.next_logits(prompt + [a]), -1) for a in range(vocab)]
        ).flatten()
        * trials
    )
    observed = torch.zeros(vocab * vocab, dtype=torch.float64)
    for a, b in pairs:
        observed[a * vocab + b] += 1
    # Pool the rare cells so every chi-square cell expects at least 5.
    rare = expected < 5
    expected = torch.cat([expected[~rare], expected[rare].sum().view(1)])
    observed = torch.cat([observed[~rare], observed[rare].sum().view(1)])
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    dof = len(expected) - 1
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2), torch.tensor(chi2 / 2)))
    assert p_value > 1e-3, (chi2, dof)
