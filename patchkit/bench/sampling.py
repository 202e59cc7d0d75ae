"""``patchkit bench --sampling``: at temperature 1 the speculative server must sample exactly like the
baseline.

Each server answers ``samples`` requests for the same prompt, request i with ``sampling_seed = seed +
i``, temperature 1, top-p 1, top-k off, ``max_new_tokens = tokens``. The speculative variants run
first and the baseline last: after its own samples, the baseline server scores every sample (its own
and each variant's) with prefill-only requests that return the target's log-probability of each drawn
token given the prompt and the tokens before it (:func:`patchkit.smoke.client.score`). It must be the
baseline that scores: DDTREE servers refuse ``return_logprob``.

Two tests at every output position k, each a two-sample chi-square test of homogeneity
(:mod:`patchkit.bench.chisquare`):

* **tokens**: the drawn tokens themselves (rare tokens pooled). The strongest test where the marginal
  distribution is concentrated (position 0 and 1); from position 2 on it spreads over hundreds of
  tokens on real models, everything pools into one category (df 0, p = 1) and the test has no power.
* **log-probs**: log p(x_k | prompt, x_<k) under the target, binned into equal-frequency bins of the
  pooled values (:func:`logprob_bins`). If the variant samples from the target's distribution, the
  joint distribution of its outputs is the baseline's, so this statistic has the same distribution
  for both at every position; an acceptance rule biased toward the draft's (likely) tokens shifts it
  up. It has categories at every position however spread the tokens are.

The check fails when any p-value is below ``ALPHA / tests`` (Bonferroni over both tests at all
positions: a correct server fails with probability at most ALPHA = 0.001 per variant; with fixed
seeds a run is repeatable, so a pass is not luck that a re-run could undo). When scoring fails (the
server refuses ``return_logprob``, an answer lacks ``input_token_logprobs``, the prompt is text and
has no ids to extend), the log-prob test is reported as not scored, with the reason, and the token
test alone decides. Per-request seeds reach SGLang's sampler only with
``--enable-deterministic-inference``; without it the server's ``--random-seed`` fixes the stream, and
the test is the same.

Position 0 comes from the prefill (no speculation); positions 1.. from verify rounds, where DDTREE's
sample-and-match decides. The stand-in's ``SGLANG_STANDIN_BROKEN_ACCEPT`` keeps the draft's token too
often there, and the tests check that the log-prob test catches it at positions the token test cannot
see.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from patchkit.bench import measure
from patchkit.bench.chisquare import ChiSquare, homogeneity
from patchkit.errors import BadInput
from patchkit.smoke import client
from patchkit.smoke.client import Generation
from patchkit.smoke.launch import Launch, Served, ServerUI, serve, server_argv
from patchkit.smoke.prompts import Prompt
from patchkit.smoke.server import ServerGroup

if TYPE_CHECKING:
    from patchkit.bench.profile import Variant, VariantSpec
    from patchkit.smoke.launch import Status

ALPHA = 1e-3
MIN_SAMPLES = 64  # below this the pooled test has almost no categories and no power
LOGPROB_BINS = 8  # equal-frequency bins of the pooled log-probs per position (fewer where ties merge them)

Outputs = list[tuple[int, ...]]
Scores = list[tuple[float, ...]]


@dataclass(frozen=True, kw_only=True)
class PositionTest:
    position: int
    test: ChiSquare  # the drawn tokens
    distinct_baseline: int
    distinct_variant: int
    logprob_test: ChiSquare | None = None  # the target's log-probs of the drawn tokens, binned; None: not scored
    logprob_bins: int = 0  # bins before the chi-square pooled the small ones

    def failed_tests(self, threshold: float) -> tuple[str, ...]:
        failed = ["tokens"] if self.test.p_value < threshold else []
        if self.logprob_test is not None and self.logprob_test.p_value < threshold:
            failed.append("log-probs")
        return tuple(failed)


@dataclass(frozen=True, kw_only=True)
class VariantSampling:
    variant: str
    label: str
    positions: tuple[PositionTest, ...]
    threshold: float  # ALPHA / tests
    same_as_baseline: int  # requests whose whole output equals the baseline's for the same seed
    ok: bool
    tests: int = 0  # p-values compared with the threshold: tokens per position, plus log-probs when scored
    logprob_note: str | None = None  # why the log-prob test was not run; None when it was


@dataclass(frozen=True, kw_only=True)
class SamplingCheck:
    prompt_id: str
    samples: int
    tokens: int
    seed: int
    alpha: float
    servers: tuple[Served, ...]
    variants: tuple[VariantSampling, ...]
    failures: tuple[str, ...]
    logprob_bins: int = LOGPROB_BINS

    @property
    def ok(self) -> bool:
        return not self.failures


def check_options(samples: int, tokens: int, specs: Sequence[VariantSpec]) -> None:
    if samples < MIN_SAMPLES:
        raise BadInput(f"--samples {samples}: at least {MIN_SAMPLES} are needed for the chi-square test")
    if tokens < 1:
        raise BadInput("--sample-tokens must be at least 1")
    kinds = {s.kind for s in specs}
    if "baseline" not in kinds or kinds == {"baseline"}:
        raise BadInput("--sampling compares a speculative variant with the baseline: select both with --variants")


def sampling_params(seed: int) -> dict[str, Any]:
    return {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "sampling_seed": seed}


@dataclass(kw_only=True)
class _Collected:
    """One server's samples; on the baseline also the scores of every server's samples, by variant."""

    outputs: Outputs
    scores: dict[str, Scores]
    score_note: str | None = None


def score_all(server: ServerGroup, prompt: Prompt, samples: dict[str, Outputs], concurrency: int,
              timeout_s: float) -> tuple[dict[str, Scores], str | None]:
    """The server's log-probs of every sample's tokens, by variant; or no scores and why not."""
    if prompt.input_ids is None:
        return {}, f"prompt {prompt.id!r} is text; scoring extends the prompt's input_ids"
    ids = prompt.input_ids
    work = [(name, output) for name, outputs in samples.items() for output in outputs]
    try:
        scored = measure.run_parallel(work, concurrency,
                                      lambda item: client.score(server.base_url, ids, item[1], timeout_s))
    except client.RequestFailed as error:
        return {}, str(error)
    scores: dict[str, Scores] = {name: [] for name in samples}
    for (name, _), logprobs in zip(work, scored, strict=True):
        scores[name].append(logprobs)
    return scores, None


def _collect(variant: Variant, launch: Launch, prompt: Prompt, samples: int, tokens: int, seed: int, concurrency: int,
             ui: ServerUI, to_score: dict[str, Outputs] | None = None) -> tuple[Served, _Collected]:
    """Sample on ``variant``'s server; with ``to_score`` (the baseline), then score those samples and its own."""
    jobs = [measure.Job(index=i, prompt=prompt, sampling=sampling_params(seed + i)) for i in range(samples)]
    collected = _Collected(outputs=[], scores={})

    def work(server: ServerGroup, status: Status) -> None:
        status.update(f"{variant.name}: {samples} samples of {tokens} tokens at T=1")
        generations: list[Generation] = measure.run_batch(server, jobs, concurrency, tokens, launch.request_timeout_s)
        collected.outputs.extend(g.output_ids for g in generations)
        if to_score is not None:
            everyone = {**to_score, variant.name: collected.outputs}
            status.update(f"{variant.name}: scoring {samples * len(everyone)} samples (log-probs of the drawn tokens)")
            collected.scores, collected.score_note = score_all(server, prompt, everyone, concurrency,
                                                               launch.request_timeout_s)

    served = serve(f"{variant.name}-sampling", server_argv(launch, variant.args(), variant.spec.uses_draft), launch,
                   ui, work)
    return served, collected


def logprob_bins(pooled: Sequence[float], bins: int = LOGPROB_BINS) -> tuple[float, ...]:
    """Cut points of ``bins`` equal-frequency bins of ``pooled``: value v falls in bin
    ``bisect_right(cuts, v)``. Tied values stay in one bin, so ties (a discrete distribution, a
    token that holds much of the mass) merge bins instead of splitting equal values at random."""
    ordered = sorted(pooled)
    n = len(ordered)
    if n == 0 or bins < 2:
        return ()
    cuts = {ordered[(j * n) // bins] for j in range(1, bins)}
    cuts.discard(ordered[0])  # a cut at the minimum would leave bin 0 empty
    return tuple(sorted(cuts))


def binned_homogeneity(baseline: Sequence[float], variant: Sequence[float],
                       bins: int = LOGPROB_BINS) -> tuple[ChiSquare, int]:
    """The chi-square test of homogeneity on equal-frequency bins of the pooled values, and the bins used."""
    cuts = logprob_bins([*baseline, *variant], bins)
    if not baseline or not variant:
        return ChiSquare(statistic=0.0, df=0, p_value=1.0, categories=0), len(cuts) + 1
    a = [bisect.bisect_right(cuts, v) for v in baseline]
    b = [bisect.bisect_right(cuts, v) for v in variant]
    return homogeneity(a, b), len(cuts) + 1


def compare(baseline: Outputs, other: Outputs, tokens: int, baseline_scores: Scores | None = None,
            other_scores: Scores | None = None) -> tuple[PositionTest, ...]:
    tests = []
    for position in range(tokens):
        a = [o[position] for o in baseline if len(o) > position]
        b = [o[position] for o in other if len(o) > position]
        logprob_test, bins = None, 0
        if baseline_scores is not None and other_scores is not None:
            logprob_test, bins = binned_homogeneity([s[position] for s in baseline_scores if len(s) > position],
                                                    [s[position] for s in other_scores if len(s) > position])
        tests.append(PositionTest(position=position, test=homogeneity(a, b), distinct_baseline=len(set(a)),
                                  distinct_variant=len(set(b)), logprob_test=logprob_test, logprob_bins=bins))
    return tuple(tests)


def failure_line(label: str, positions: Sequence[PositionTest], threshold: float) -> str:
    """Every failed test, by position, so a failure says which test saw it where."""
    clauses = []
    for p in positions:
        for name in p.failed_tests(threshold):
            test = p.test if name == "tokens" else p.logprob_test
            assert test is not None
            what = "token distribution" if name == "tokens" else "log-prob distribution"
            clauses.append(f"{what} at position {p.position} differs from the baseline's (chi-square "
                           f"{test.statistic:.1f}, df {test.df}, p = {test.p_value:.2e} < {threshold:.1e})")
    return f"{label}: " + "; ".join(clauses)


def _evaluate(variant: Variant, outputs: Outputs, reference: _Collected, baseline_name: str,
              tokens: int) -> VariantSampling:
    scores, own = reference.scores.get(variant.name), reference.scores.get(baseline_name)
    scored = scores is not None and own is not None
    tests = tokens * (2 if scored else 1)
    threshold = ALPHA / tests
    positions = compare(reference.outputs, outputs, tokens, own, scores)
    ok = not any(p.failed_tests(threshold) for p in positions)
    same = sum(a == b for a, b in zip(reference.outputs, outputs, strict=True))
    note = None if scored else reference.score_note or "not scored"
    return VariantSampling(variant=variant.name, label=variant.label, positions=positions, threshold=threshold,
                           same_as_baseline=same, ok=ok, tests=tests, logprob_note=note)


def run_sampling(variants: Sequence[Variant], launch: Launch, prompt: Prompt, samples: int, tokens: int, seed: int,
                 concurrency: int, ui: ServerUI) -> SamplingCheck:
    """The speculative variants sample first; the baseline last, so it can score every sample."""
    servers: list[Served] = []
    failures: list[str] = []
    results: list[VariantSampling] = []
    collected: dict[str, Outputs] = {}
    speculative = [v for v in variants if v.spec.kind != "baseline"]
    baseline = next(v for v in variants if v.spec.kind == "baseline")
    for variant in speculative:
        served, got = _collect(variant, launch, prompt, samples, tokens, seed, concurrency, ui)
        servers.append(served)
        if served.ok:
            collected[variant.name] = got.outputs
        else:
            failures.append(f"{variant.label}: {served.failure or 'processes left alive'}")
    if collected:
        served, reference = _collect(baseline, launch, prompt, samples, tokens, seed, concurrency, ui,
                                     to_score=collected)
        servers.append(served)
        if not served.ok:
            failures.append(f"{baseline.label}: {served.failure or 'processes left alive'}")
        else:
            for variant in speculative:
                if variant.name in collected:
                    result = _evaluate(variant, collected[variant.name], reference, baseline.name, tokens)
                    results.append(result)
                    if not result.ok:
                        failures.append(failure_line(variant.label, result.positions, result.threshold))
    return SamplingCheck(prompt_id=prompt.id, samples=samples, tokens=tokens, seed=seed, alpha=ALPHA,
                         servers=tuple(servers), variants=tuple(results), failures=tuple(failures))
