"""How many samples the T = 1 check (``bench --sampling``) needs to catch the distortion it must catch.

The check's token test at one output position is Pearson's two-sample chi-square test of homogeneity
(:mod:`patchkit.bench.chisquare`): n draws from the baseline, n from the speculative server, columns
whose expected count is below 5 pooled. When the server draws from Q instead of the baseline's P, the
statistic is approximately noncentral chi-square with df = columns - 1 and noncentrality

    lambda = n * sum over columns c of (p_c - q_c)^2 / (p_c + q_c)

(each row's expected count is n (p_c + q_c) / 2). The check fails at a position when the statistic
exceeds the central chi-square's upper ``alpha`` point, so its power against Q is
P(noncentral chi-square(df, lambda) > that point). Pooling here follows the test's own rule on the
expected counts, so df grows with n as it does in the test.

The distortion the check must catch is stated as data (:data:`BROKEN_RULE`): the effect of the set's
test-only broken acceptance rule (``SGLANG_DDTREE_TEST_BROKEN_ACCEPT``, v2 patch 0013) on output
position 1 of the tree-friendly test models (``patchkit testmodels --profile tree``, seed 0) for the
first smoke prompt (``[195]``). Position 1 is the first speculative position: every decode round
starts at the tree's root, which always has a child, so the rule reaches it at every verify width,
fixed or auto; the positions after it are reached only while the walk stands on a node with a child
(so a lower bound on the whole check's power is this one position's). ``tests/bench/test_power.py``
recomputes the table from the models and checks the approximation against simulated tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from patchkit.bench.chisquare import MIN_EXPECTED, chi2_sf

#: The power the default sample count must reach against the stated distortion.
TARGET_POWER = 0.99
#: No check runs with fewer samples (the pooled test has almost no columns below this).
MIN_SAMPLES = 64
#: Samples are searched up to this many; more would be a distortion too small to state.
MAX_SAMPLES = 1 << 16


@dataclass(frozen=True, kw_only=True)
class Distortion:
    """Two distributions over the same columns: the baseline's and the one a faulty server draws from.

    Columns too small to matter at any sample count up to :data:`MAX_SAMPLES` may be given summed (the
    test pools them into one column anyway)."""

    name: str
    what: str  # one line: what the distortion is, where it was measured
    baseline: tuple[float, ...]
    distorted: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.baseline) != len(self.distorted) or not self.baseline:
            raise ValueError(f"{self.name}: baseline and distorted need the same, non-zero number of columns")
        for side in (self.baseline, self.distorted):
            if min(side) < 0 or abs(sum(side) - 1) > 1e-6:
                raise ValueError(f"{self.name}: each side must be a probability distribution (sum {sum(side)})")

    @property
    def total_variation(self) -> float:
        """Half the L1 distance: the share of probability mass the distortion moves."""
        return 0.5 * sum(abs(p - q) for p, q in zip(self.baseline, self.distorted, strict=True))

    @property
    def effect(self) -> float:
        """The noncentrality per sample pair before pooling: sum (p - q)^2 / (p + q)."""
        return sum((p - q) ** 2 / (p + q) for p, q in zip(self.baseline, self.distorted, strict=True) if p + q > 0)


@dataclass(frozen=True, kw_only=True)
class Power:
    """The test's power against a distortion at ``samples`` per server and significance ``alpha``."""

    samples: int
    alpha: float
    df: int
    noncentrality: float
    critical: float  # the central chi-square's upper alpha point
    power: float


def pooled_columns(p: Sequence[float], q: Sequence[float], samples: int) -> list[tuple[float, float]]:
    """The columns the test keeps at ``samples`` per row, on expected counts: a column with expected
    count below MIN_EXPECTED joins the "other" column; an "other" column too small itself joins the
    smallest kept one (as :func:`patchkit.bench.chisquare._pooled_columns` does with observed counts)."""
    keep: list[tuple[float, float]] = []
    other = [0.0, 0.0]
    for a, b in zip(p, q, strict=True):
        if samples * (a + b) / 2 >= MIN_EXPECTED:
            keep.append((a, b))
        else:
            other[0] += a
            other[1] += b
    if sum(other) > 0:
        if samples * sum(other) / 2 >= MIN_EXPECTED or not keep:
            keep.append((other[0], other[1]))
        else:
            smallest = min(range(len(keep)), key=lambda i: sum(keep[i]))
            keep[smallest] = (keep[smallest][0] + other[0], keep[smallest][1] + other[1])
    return keep


def noncentral_chi2_sf(x: float, df: int, noncentrality: float) -> float:
    """P(X > x) for X noncentral chi-square: a Poisson(noncentrality / 2) mixture of central ones with
    df + 2j degrees of freedom."""
    if noncentrality <= 0:
        return chi2_sf(x, df)
    half = noncentrality / 2
    terms = int(half + 12 * math.sqrt(half) + 60)
    total, log_weight = 0.0, -half
    for j in range(terms):
        if j:
            log_weight += math.log(half) - math.log(j)
        total += math.exp(log_weight) * chi2_sf(x, df + 2 * j)
    return min(1.0, total)


def chi2_critical(alpha: float, df: int) -> float:
    """The x with P(chi-square(df) > x) = alpha, by bisection (chi2_sf falls monotonically)."""
    if not 0 < alpha < 1 or df < 1:
        raise ValueError(f"critical value needs 0 < alpha < 1 and df >= 1 (alpha {alpha}, df {df})")
    low, high = 0.0, 1.0
    while chi2_sf(high, df) > alpha:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if chi2_sf(middle, df) > alpha:
            low = middle
        else:
            high = middle
    return high


def power(distortion: Distortion, samples: int, alpha: float) -> Power:
    """The token test's power at one position against ``distortion``, ``samples`` draws per server."""
    columns = pooled_columns(distortion.baseline, distortion.distorted, samples)
    df = len(columns) - 1
    if df < 1:
        return Power(samples=samples, alpha=alpha, df=0, noncentrality=0.0, critical=math.inf, power=0.0)
    noncentrality = samples * sum((a - b) ** 2 / (a + b) for a, b in columns if a + b > 0)
    critical = chi2_critical(alpha, df)
    return Power(samples=samples, alpha=alpha, df=df, noncentrality=noncentrality, critical=critical,
                 power=noncentral_chi2_sf(critical, df, noncentrality))


def samples_for_power(distortion: Distortion, alpha: float, target: float = TARGET_POWER) -> int:
    """The smallest sample count (at least MIN_SAMPLES) whose power reaches ``target``.

    Power is not monotone in n step by step (a column joining the kept ones adds a degree of freedom),
    so this is the first n of a doubling-then-linear search from which it holds; ValueError when none
    up to MAX_SAMPLES does."""
    high = MIN_SAMPLES
    while power(distortion, high, alpha).power < target:
        high *= 2
        if high > MAX_SAMPLES:
            raise ValueError(f"{distortion.name}: power {target} needs more than {MAX_SAMPLES} samples")
    low = max(MIN_SAMPLES, high // 2)
    return next(n for n in range(low, high + 1) if power(distortion, n, alpha).power >= target)


#: The broken rule's effect at output position 1 (see the module docstring), as rows "token p q": the
#: baseline's marginal P1 (the target's T = 1 draw after its T = 1 draw at position 0) and the broken
#: rule's Q1 = P1 / 2 + D1 / 2, D1 the distribution of the draft's top-1 token at depth 1 (the root's
#: first child, where half the roots' draws land) after position 0. The tokens with (p + q) / 2 >= 0.0025
#: (a column the test can keep up to 2000 samples); the rest is one column. Measured with the plain-torch
#: reference forward (fp32 on the bf16 weights as written); tests/bench/test_power.py recomputes it.
BROKEN_RULE_ROWS = """
    39 0.002597 0.003781   60 0.032007 0.165293   61 0.085516 0.042758   62 0.066003 0.033002
    72 0.003747 0.006151   73 0.004793 0.002397   105 0.013476 0.012944   106 0.004846 0.002423
    107 0.006047 0.003023   156 0.003194 0.004379   165 0.003435 0.004688   186 0.004940 0.006172
    189 0.002963 0.004923   195 0.000714 0.012298   213 0.004434 0.007928   222 0.004311 0.004715
    225 0.002179 0.003688   226 0.003364 0.001682   231 0.003127 0.004627   237 0.003876 0.006360
    238 0.003871 0.001936   249 0.003560 0.007234   258 0.005115 0.007138   259 0.003375 0.001688
    260 0.003905 0.001953   267 0.023250 0.078716   268 0.020519 0.010259   269 0.037673 0.018836
    278 0.004394 0.002197   291 0.003238 0.003301   294 0.007640 0.010669   301 0.003461 0.001730
    318 0.002349 0.003604   333 0.003802 0.006071   372 0.002571 0.006586   373 0.003514 0.001757
    390 0.004017 0.009765   408 0.001846 0.004041   414 0.003332 0.002919   423 0.002611 0.006856
    424 0.003554 0.001777   447 0.002561 0.003328   448 0.004569 0.002284   453 0.034995 0.090785
    454 0.064224 0.032112   455 0.036460 0.018230   456 0.003469 0.005463   459 0.005987 0.007157
    461 0.005225 0.002613   462 0.003669 0.007482   465 0.003590 0.007666   466 0.003889 0.001944
    471 0.003821 0.004665
"""


def rows_distortion(name: str, what: str, rows: str) -> Distortion:
    """A :class:`Distortion` from "token p q" rows; the mass the rows leave is one more column."""
    numbers = rows.split()
    triples = [numbers[i:i + 3] for i in range(0, len(numbers), 3)]
    baseline = [float(p) for _, p, _ in triples]
    distorted = [float(q) for _, _, q in triples]
    return Distortion(name=name, what=what, baseline=(*baseline, max(0.0, 1 - sum(baseline))),
                      distorted=(*distorted, max(0.0, 1 - sum(distorted))))


BROKEN_RULE = rows_distortion(
    "broken-rule-position-1",
    "SGLANG_DDTREE_TEST_BROKEN_ACCEPT at output position 1 of the tree-friendly test models (seed 0), prompt [195]",
    BROKEN_RULE_ROWS)
