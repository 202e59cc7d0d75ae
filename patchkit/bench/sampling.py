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

How many samples: by default the smallest count whose token test has power >= 0.99, at the threshold
of a run whose log-probs are scored (the stricter one), against the distortion the check must catch:
the set's test-only broken acceptance rule at output position 1 of the tree-friendly test models
(:mod:`patchkit.bench.power`). Each variant's result carries the power the run had at its own
threshold, so a run with fewer samples says how likely it was to miss that distortion.

Did the tree take part? A speculative server writes one line per decode round when
``SGLANG_SPEC_PHASE_TIMING`` names a file (the v2 set's phase timer); a DDTREE round of a worker that counts
them (``ddtree_tree_usage``) adds ``tree``: requests whose verified tree branched, requests whose accepted path
left the draft's top-1 chain, the drafted tokens accepted from there on, and all drafted tokens
accepted. The check sums them over the sampling requests' rounds (:class:`TreeUsage`), so a pass whose
rounds never left the chain shows as such.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit.bench import measure, phases, power
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
MIN_SAMPLES = power.MIN_SAMPLES  # below this the pooled test has almost no categories and no power
#: The distortion the sample count is chosen for, and the power each run reports against.
DISTORTION = power.BROKEN_RULE
#: The order of the counts in a DDTREE round's ``tree`` field (the worker's TREE_USAGE_FIELDS).
TREE_FIELDS = ("branched", "off_chain", "off_chain_tokens", "accepted_tokens")
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
class TreeUsage:
    """A DDTREE server's decode rounds during the sampling requests, from its phase timing lines."""

    rounds: int  # decode rounds (each verifies a batch)
    request_rounds: int  # rounds x their batch sizes: one per request per round
    branched: int  # request-rounds whose verified tree branched (not a chain)
    off_chain: int  # request-rounds whose accepted path left the draft's top-1 chain
    off_chain_tokens: int  # drafted tokens accepted from that node on (a chain would not have)
    accepted_tokens: int  # drafted tokens accepted in all rounds

    @property
    def exercised(self) -> bool:
        """A round accepted a token through the tree that a chain could not have."""
        return self.off_chain_tokens > 0


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
    power: float | None = None  # the token test's power against DISTORTION at this threshold and sample count
    tree: TreeUsage | None = None  # what of the server's rounds went through a tree; None: not counted
    tree_note: str | None = None  # why the tree use was not counted; None when it was


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
    distortion: str = DISTORTION.name  # what each variant's power is against (patchkit.bench.power)
    target_power: float = power.TARGET_POWER  # the default sample count's aim against it

    @property
    def ok(self) -> bool:
        return not self.failures


def default_samples(tokens: int) -> int:
    """The smallest sample count with power >= TARGET_POWER against DISTORTION at the threshold of a run
    that scores log-probs (2 tests per position: the stricter threshold)."""
    return power.samples_for_power(DISTORTION, ALPHA / (2 * tokens))


def check_options(samples: int, tokens: int, specs: Sequence[VariantSpec]) -> None:
    if samples < MIN_SAMPLES:
        raise BadInput(f"--samples {samples}: at least {MIN_SAMPLES} are needed for the chi-square test")
    if tokens < 1:
        raise BadInput("--sample-tokens must be at least 1")
    kinds = {s.kind for s in specs}
    if "baseline" not in kinds or kinds == {"baseline"}:
        raise BadInput("--sampling compares a speculative variant with the baseline: select both with --variants")


def tree_usage(records: Sequence[dict[str, Any]]) -> TreeUsage | None:
    """The sum of the rounds' ``tree`` counts; None when no round carries them."""
    counted = [r for r in records if isinstance(r.get("tree"), list) and len(r["tree"]) == len(TREE_FIELDS)]
    if not counted:
        return None
    sums = [sum(int(r["tree"][i]) for r in counted) for i in range(len(TREE_FIELDS))]
    return TreeUsage(rounds=len(counted), request_rounds=sum(int(r["bs"]) for r in counted),
                     **dict(zip(TREE_FIELDS, sums, strict=True)))


def sampling_params(seed: int) -> dict[str, Any]:
    return {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "sampling_seed": seed}


@dataclass(kw_only=True)
class _Collected:
    """One server's samples; on the baseline also the scores of every server's samples, by variant."""

    outputs: Outputs
    scores: dict[str, Scores]
    score_note: str | None = None
    rounds: phases.Window | None = None  # the wall-clock span of the sampling requests (speculative servers)


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
    timed = variant.spec.kind == "tree"
    env = {phases.PHASE_TIMING_ENV: str(round_file(launch, variant).resolve())} if timed else {}
    if timed:
        round_file(launch, variant).unlink(missing_ok=True)

    def work(server: ServerGroup, status: Status) -> None:
        status.update(f"{variant.name}: {samples} samples of {tokens} tokens at T=1")
        start = time.time()
        generations: list[Generation] = measure.run_batch(server, jobs, concurrency, tokens, launch.request_timeout_s)
        collected.outputs.extend(g.output_ids for g in generations)
        if timed:
            collected.rounds = phases.Window(concurrency=concurrency, start=start, end=time.time())
            status.update(f"{variant.name}: writing the round records")
            _flush_rounds(server, prompt, launch.request_timeout_s)
        if to_score is not None:
            everyone = {**to_score, variant.name: collected.outputs}
            status.update(f"{variant.name}: scoring {samples * len(everyone)} samples (log-probs of the drawn tokens)")
            collected.scores, collected.score_note = score_all(server, prompt, everyone, concurrency,
                                                               launch.request_timeout_s)

    served = serve(f"{variant.name}-sampling", server_argv(launch, variant.args(), variant.spec.uses_draft), launch,
                   ui, work, extra_env=env)
    return served, collected


def round_file(launch: Launch, variant: Variant) -> Path:
    """Where a speculative server writes its rounds (``SGLANG_SPEC_PHASE_TIMING``) during the check."""
    return phases.phase_file(launch.logs, f"{variant.name}-sampling")


def _flush_rounds(server: ServerGroup, prompt: Prompt, timeout_s: float) -> None:
    """The server writes the rounds it has read back at its first round after an idle spell: wait, then
    one short request (outside the sampling window), so the last sampling rounds reach the file."""
    time.sleep(phases.IDLE_FLUSH_S)
    measure.run_batch(server, [measure.Job(index=0, prompt=prompt)], 1, phases.PROBE_TOKENS, timeout_s)


def counted_rounds(launch: Launch, variant: Variant,
                   window: phases.Window | None) -> tuple[TreeUsage | None, str | None]:
    """The variant's tree use over the sampling window, or None and why it is not known."""
    if window is None:
        return None, "the server's rounds were not timed"
    records, _ = phases.read_records(round_file(launch, variant))
    inside = phases.in_window(records, window)
    if not inside:
        return None, ("the server wrote no round records (SGLANG_SPEC_PHASE_TIMING: a v2 set from "
                      "ddtree@2.2.0 writes them)")
    usage = tree_usage(inside)
    if usage is None:
        return None, "the server's rounds carry no tree counts (its DDTREE worker predates ddtree_tree_usage)"
    return usage, None


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


def _evaluate(variant: Variant, collected: _Collected, reference: _Collected, baseline_name: str,
              tokens: int, launch: Launch) -> VariantSampling:
    outputs = collected.outputs
    scores, own = reference.scores.get(variant.name), reference.scores.get(baseline_name)
    scored = scores is not None and own is not None
    tests = tokens * (2 if scored else 1)
    threshold = ALPHA / tests
    positions = compare(reference.outputs, outputs, tokens, own, scores)
    ok = not any(p.failed_tests(threshold) for p in positions)
    same = sum(a == b for a, b in zip(reference.outputs, outputs, strict=True))
    note = None if scored else reference.score_note or "not scored"
    tree, tree_note = (counted_rounds(launch, variant, collected.rounds) if variant.spec.kind == "tree"
                       else (None, "not a tree variant"))
    return VariantSampling(variant=variant.name, label=variant.label, positions=positions, threshold=threshold,
                           same_as_baseline=same, ok=ok, tests=tests, logprob_note=note,
                           power=power.power(DISTORTION, min(len(outputs), len(reference.outputs)), threshold).power,
                           tree=tree, tree_note=tree_note)


def run_sampling(variants: Sequence[Variant], launch: Launch, prompt: Prompt, samples: int, tokens: int, seed: int,
                 concurrency: int, ui: ServerUI) -> SamplingCheck:
    """The speculative variants sample first; the baseline last, so it can score every sample."""
    servers: list[Served] = []
    failures: list[str] = []
    results: list[VariantSampling] = []
    collected: dict[str, _Collected] = {}
    speculative = [v for v in variants if v.spec.kind != "baseline"]
    baseline = next(v for v in variants if v.spec.kind == "baseline")
    for variant in speculative:
        served, got = _collect(variant, launch, prompt, samples, tokens, seed, concurrency, ui)
        servers.append(served)
        if served.ok:
            collected[variant.name] = got
        else:
            failures.append(f"{variant.label}: {served.failure or 'processes left alive'}")
    if collected:
        served, reference = _collect(baseline, launch, prompt, samples, tokens, seed, concurrency, ui,
                                     to_score={name: got.outputs for name, got in collected.items()})
        servers.append(served)
        if not served.ok:
            failures.append(f"{baseline.label}: {served.failure or 'processes left alive'}")
        else:
            for variant in speculative:
                if variant.name in collected:
                    result = _evaluate(variant, collected[variant.name], reference, baseline.name, tokens, launch)
                    results.append(result)
                    if not result.ok:
                        failures.append(failure_line(variant.label, result.positions, result.threshold))
    return SamplingCheck(prompt_id=prompt.id, samples=samples, tokens=tokens, seed=seed, alpha=ALPHA,
                         servers=tuple(servers), variants=tuple(results), failures=tuple(failures))
