"""``patchkit bench --sampling``: at temperature 1 the speculative server must sample exactly like the
baseline.

Each server (the baseline, then every selected speculative variant) answers ``samples`` requests for
the same prompt, request i with ``sampling_seed = seed + i``, temperature 1, top-p 1, top-k off,
``max_new_tokens = tokens``. At every output position the two token samples are compared with a
two-sample chi-square test of homogeneity (:mod:`patchkit.bench.chisquare`). The check fails when any
position's p-value is below ``ALPHA / positions`` (Bonferroni: a correct server fails with probability
at most ALPHA = 0.001 per variant; with fixed seeds a run is repeatable, so a pass is not luck that a
re-run could undo). Per-request seeds reach SGLang's sampler only with
``--enable-deterministic-inference``; without it the server's ``--random-seed`` fixes the stream, and
the test is the same.

Position 0 comes from the prefill (no speculation); positions 1.. from verify rounds, where DDTREE's
sample-and-match decides. A wrong acceptance rule shifts mass toward the draft's tokens there; the
stand-in's ``SGLANG_STANDIN_BROKEN_ACCEPT`` does that and the tests check the check catches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from patchkit.bench import measure
from patchkit.bench.chisquare import ChiSquare, homogeneity
from patchkit.errors import BadInput
from patchkit.smoke.client import Generation
from patchkit.smoke.launch import Launch, Served, ServerUI, serve, server_argv
from patchkit.smoke.prompts import Prompt
from patchkit.smoke.server import ServerGroup

if TYPE_CHECKING:
    from patchkit.bench.profile import Variant, VariantSpec
    from patchkit.smoke.launch import Status

ALPHA = 1e-3
MIN_SAMPLES = 64  # below this the pooled test has almost no categories and no power


@dataclass(frozen=True, kw_only=True)
class PositionTest:
    position: int
    test: ChiSquare
    distinct_baseline: int
    distinct_variant: int


@dataclass(frozen=True, kw_only=True)
class VariantSampling:
    variant: str
    label: str
    positions: tuple[PositionTest, ...]
    threshold: float
    same_as_baseline: int  # requests whose whole output equals the baseline's for the same seed
    ok: bool


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


def _collect(variant: Variant, launch: Launch, prompt: Prompt, samples: int, tokens: int, seed: int, concurrency: int,
             ui: ServerUI) -> tuple[Served, list[tuple[int, ...]]]:
    jobs = [measure.Job(index=i, prompt=prompt, sampling=sampling_params(seed + i)) for i in range(samples)]
    outputs: list[Generation] = []

    def work(server: ServerGroup, status: Status) -> None:
        status.update(f"{variant.name}: {samples} samples of {tokens} tokens at T=1")
        outputs.extend(measure.run_batch(server, jobs, concurrency, tokens, launch.request_timeout_s))

    served = serve(f"{variant.name}-sampling", server_argv(launch, variant.args(), variant.spec.uses_draft), launch,
                   ui, work)
    return served, [g.output_ids for g in outputs]


def compare(baseline: list[tuple[int, ...]], other: list[tuple[int, ...]], tokens: int) -> tuple[PositionTest, ...]:
    tests = []
    for position in range(tokens):
        a = [o[position] for o in baseline if len(o) > position]
        b = [o[position] for o in other if len(o) > position]
        tests.append(PositionTest(position=position, test=homogeneity(a, b), distinct_baseline=len(set(a)),
                                  distinct_variant=len(set(b))))
    return tuple(tests)


def run_sampling(variants: Sequence[Variant], launch: Launch, prompt: Prompt, samples: int, tokens: int, seed: int,
                 concurrency: int, ui: ServerUI) -> SamplingCheck:
    servers: list[Served] = []
    failures: list[str] = []
    results: list[VariantSampling] = []
    reference: list[tuple[int, ...]] = []
    ordered = sorted(variants, key=lambda v: v.spec.kind != "baseline")
    for variant in ordered:
        served, outputs = _collect(variant, launch, prompt, samples, tokens, seed, concurrency, ui)
        servers.append(served)
        if not served.ok:
            failures.append(f"{variant.label}: {served.failure or 'processes left alive'}")
            if variant.spec.kind == "baseline":
                break
            continue
        if variant.spec.kind == "baseline":
            reference = outputs
            continue
        threshold = ALPHA / tokens
        positions = compare(reference, outputs, tokens)
        ok = all(p.test.p_value >= threshold for p in positions)
        same = sum(a == b for a, b in zip(reference, outputs, strict=True))
        results.append(VariantSampling(variant=variant.name, label=variant.label, positions=positions,
                                       threshold=threshold, same_as_baseline=same, ok=ok))
        if not ok:
            worst = min(positions, key=lambda p: p.test.p_value)
            failures.append(f"{variant.label}: token distribution at position {worst.position} differs from the "
                            f"baseline's (chi-square {worst.test.statistic:.1f}, df {worst.test.df}, "
                            f"p = {worst.test.p_value:.2e} < {threshold:.1e})")
    return SamplingCheck(prompt_id=prompt.id, samples=samples, tokens=tokens, seed=seed, alpha=ALPHA,
                         servers=tuple(servers), variants=tuple(results), failures=tuple(failures))
