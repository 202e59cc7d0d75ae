"""The sampling check's power calculation (:mod:`patchkit.bench.power`): the chi-square pieces against
known values and simulation, the power of the check's own token test against simulated runs, the sample
count it picks, and the stated distortion recomputed from the tree-friendly test models."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from patchkit.bench import power
from patchkit.bench.chisquare import chi2_sf, homogeneity


@pytest.mark.parametrize(("alpha", "df", "expected"), [(0.05, 1, 3.841459), (0.001, 4, 18.46683), (0.01, 10, 23.20925)])
def test_the_critical_value_is_the_chi_square_quantile(alpha, df, expected):
    critical = power.chi2_critical(alpha, df)
    assert critical == pytest.approx(expected, abs=1e-4)
    assert chi2_sf(critical, df) == pytest.approx(alpha, rel=1e-9)


def test_the_critical_value_refuses_what_has_none():
    for alpha, df in ((0.0, 3), (1.0, 3), (0.05, 0)):
        with pytest.raises(ValueError, match="critical value needs"):
            power.chi2_critical(alpha, df)


@pytest.mark.parametrize(("x", "df", "lam"), [(15.0, 3, 10.0), (33.2, 9, 55.9), (4.0, 1, 1.5)])
def test_the_noncentral_tail_matches_numpys_noncentral_draws(x, df, lam):
    numpy = pytest.importorskip("numpy")
    draws = numpy.random.default_rng(7).noncentral_chisquare(df, lam, 200_000)
    assert power.noncentral_chi2_sf(x, df, lam) == pytest.approx(float((draws > x).mean()), abs=0.004)
    assert power.noncentral_chi2_sf(x, df, 0.0) == chi2_sf(x, df)


def test_columns_pool_on_expected_counts_as_the_test_pools_observed_ones():
    p, q = (0.5, 0.3, 0.15, 0.04, 0.01), (0.4, 0.3, 0.2, 0.05, 0.05)
    # n = 100: expected 45, 30, 17.5, 4.5, 3 per row -> the last two pool into one column of 7.5
    assert power.pooled_columns(p, q, 100) == [(0.5, 0.4), (0.3, 0.3), (0.15, 0.2), (pytest.approx(0.05), 0.1)]
    # n = 20: the first two keep 5 expected; the rest pools into one column of 5
    assert power.pooled_columns(p, q, 20) == [(0.5, 0.4), (0.3, 0.3), (pytest.approx(0.2), pytest.approx(0.3))]
    # an "other" column below 5 itself joins the smallest kept column
    assert power.pooled_columns((0.9, 0.1), (0.8, 0.2), 20) == [(pytest.approx(1.0), pytest.approx(1.0))]


def _simulated_power(distortion: power.Distortion, samples: int, alpha: float, reps: int, seed: int) -> float:
    """The share of simulated checks whose token test (the bench's own) rejects: draws from each side's columns."""
    rng = random.Random(seed)
    columns = range(len(distortion.baseline))
    fails = 0
    for _ in range(reps):
        a = rng.choices(columns, distortion.baseline, k=samples)
        b = rng.choices(columns, distortion.distorted, k=samples)
        fails += homogeneity(a, b).p_value < alpha
    return fails / reps


@pytest.mark.parametrize(("samples", "alpha", "reps", "tolerance"), [(128, 0.001 / 4, 400, 0.08),
                                                                      (128, 0.001 / 8, 400, 0.08)])
def test_the_calculated_power_is_what_the_bench_test_does(samples, alpha, reps, tolerance):
    # At 128 samples (the count the GPU run used) the token test catches the broken rule at position 1 only
    # about 6 times in 10: the calculation and the simulated test agree.
    calculated = power.power(power.BROKEN_RULE, samples, alpha)
    assert 0.55 < calculated.power < 0.72 and calculated.df >= 5
    assert _simulated_power(power.BROKEN_RULE, samples, alpha, reps, seed=3) == pytest.approx(calculated.power,
                                                                                              abs=tolerance)


def test_the_default_count_reaches_the_target_power_in_the_simulated_test():
    alpha = 0.001 / 8  # 4 tokens, log-probs scored: the stricter threshold
    samples = power.samples_for_power(power.BROKEN_RULE, alpha)
    assert power.power(power.BROKEN_RULE, samples, alpha).power >= power.TARGET_POWER
    assert power.power(power.BROKEN_RULE, samples - 1, alpha).power < power.TARGET_POWER
    assert _simulated_power(power.BROKEN_RULE, samples, alpha, 500, seed=5) >= 0.975  # 0.99 within the noise


def test_the_smallest_count_is_searched_and_bounded():
    strong = power.Distortion(name="strong", what="half the mass moved", baseline=(0.5, 0.5), distorted=(1.0, 0.0))
    assert power.samples_for_power(strong, 0.001) == power.MIN_SAMPLES  # caught at the fewest the check allows
    faint = power.Distortion(name="faint", what="almost nothing", baseline=(0.5, 0.5), distorted=(0.5001, 0.4999))
    with pytest.raises(ValueError, match="needs more than"):
        power.samples_for_power(faint, 0.001)
    same = power.Distortion(name="none", what="no change", baseline=(1.0,), distorted=(1.0,))
    assert power.power(same, 100, 0.001).power == 0.0  # one column: no test, no power


def test_a_distortion_must_be_two_distributions_over_the_same_columns():
    for baseline, distorted in (((0.5, 0.5), (1.0,)), ((0.5, 0.6), (0.5, 0.5)), ((), ()), ((1.5, -0.5), (0.5, 0.5))):
        with pytest.raises(ValueError):
            power.Distortion(name="bad", what="", baseline=baseline, distorted=distorted)
    assert power.BROKEN_RULE.total_variation == pytest.approx(0.316, abs=0.001)
    assert power.BROKEN_RULE.effect == pytest.approx(0.258, abs=0.001)


def test_the_stated_distortion_is_the_broken_rules_on_the_tree_friendly_models():
    # Recomputed from the models: P1 = sum over x0 of P(x0) P(. | x0); the rule gives each root's draw, with
    # probability 1/2, the root's first child's token, which pop order makes the draft's depth-1 top-1.
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hostprep" / "testmodels"))
    import reference as ref

    from patchkit.hostprep import testmodels as tm

    torch.set_num_threads(1)
    target, draft = tm.build_tree_weights(0)
    target = {k: v.to(torch.bfloat16).float() for k, v in target.items()}  # as written to disk
    draft = {k: v.to(torch.bfloat16).float() for k, v in draft.items()}
    prompt = [195]
    with torch.no_grad():
        p0 = torch.softmax(ref.target_logits(target, prompt)[-1].double(), -1)
        contexts = torch.tensor([[*prompt, x0] for x0 in range(tm.VOCAB)])
        after = torch.func.vmap(lambda ids: ref.target_logits(target, ids)[-1])(contexts)
        p1 = p0 @ torch.softmax(after.double(), -1)
        bonuses = torch.arange(tm.ORDINARY)
        depth1 = torch.func.vmap(lambda bonus: ref.draft_block_logits(target, draft, len(prompt), bonus)[0])(bonuses)
        d1 = torch.zeros(tm.VOCAB, dtype=torch.float64).index_add_(0, depth1.argmax(-1), p0[: tm.ORDINARY])
    q1 = p1 / 2 + d1 / 2
    numbers = power.BROKEN_RULE_ROWS.split()
    rows = {int(numbers[i]): (float(numbers[i + 1]), float(numbers[i + 2])) for i in range(0, len(numbers), 3)}
    kept = {t for t in range(tm.VOCAB) if (p1[t] + q1[t]) / 2 >= 0.0025}
    assert set(rows) == kept
    for token, (p, q) in rows.items():
        assert (p, q) == (pytest.approx(float(p1[token]), abs=2e-5), pytest.approx(float(q1[token]), abs=2e-5)), token
