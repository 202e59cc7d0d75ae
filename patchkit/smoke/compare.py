"""Token-for-token comparison of the baseline and speculative outputs, and the summary numbers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean

from patchkit.smoke.client import Generation

#: How many tokens of each continuation a mismatch report shows.
CONTINUATION_TOKENS = 8


@dataclass(frozen=True)
class PromptComparison:
    """One prompt: equal or not, and where the outputs first differ."""

    prompt_id: str
    matched: bool
    baseline_tokens: int
    ddtree_tokens: int
    first_mismatch: int | None
    baseline_continuation: tuple[int, ...]
    ddtree_continuation: tuple[int, ...]
    accept_length: float | None


def first_mismatch(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token; a shorter output differs where it ends; None if equal."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(prompt_id: str, baseline: Generation, ddtree: Generation) -> PromptComparison:
    at = first_mismatch(baseline.output_ids, ddtree.output_ids)
    window = slice(at, None if at is None else at + CONTINUATION_TOKENS)
    return PromptComparison(
        prompt_id=prompt_id,
        matched=at is None,
        baseline_tokens=len(baseline.output_ids),
        ddtree_tokens=len(ddtree.output_ids),
        first_mismatch=at,
        baseline_continuation=() if at is None else tuple(baseline.output_ids[window]),
        ddtree_continuation=() if at is None else tuple(ddtree.output_ids[window]),
        accept_length=ddtree.accept_length,
    )


@dataclass(frozen=True)
class ServerStats:
    """Speed of one server over the prompt set (means over prompts)."""

    prompts: int
    output_tokens: int
    tokens_per_s: float
    ttft_s: float
    accept_length: float | None
    verify_ct: int | None


def summarize(generations: Sequence[Generation]) -> ServerStats:
    """Mean tokens/s and TTFT; accept length as total tokens over total verify steps."""
    if not generations:
        return ServerStats(0, 0, 0.0, 0.0, None, None)
    tokens = sum(len(g.output_ids) for g in generations)
    verify = [g.verify_ct for g in generations if g.verify_ct]
    verified_tokens = sum(len(g.output_ids) for g in generations if g.verify_ct)
    return ServerStats(
        prompts=len(generations),
        output_tokens=tokens,
        tokens_per_s=mean(g.tokens_per_s for g in generations),
        ttft_s=mean(g.ttft_s for g in generations),
        accept_length=verified_tokens / sum(verify) if verify else None,
        verify_ct=sum(verify) if verify else None,
    )
