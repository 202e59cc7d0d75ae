"""A two-sample chi-square test of homogeneity, with its p-value, in the standard library only.

Two samples of tokens (one per server) at one position form a 2 x k table. Tokens whose expected
count is below :data:`MIN_EXPECTED` in either row are pooled into one "other" column (the usual rule
for the chi-square approximation); if that column is itself too small, it is merged into the
smallest kept column. The statistic has k - 1 degrees of freedom; the p-value is the regularised
upper incomplete gamma function Q(df / 2, x / 2).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

MIN_EXPECTED = 5.0


@dataclass(frozen=True, kw_only=True)
class ChiSquare:
    statistic: float
    df: int
    p_value: float
    categories: int  # columns after pooling


def _upper_gamma_regularised(a: float, x: float) -> float:
    """Q(a, x) = Gamma(a, x) / Gamma(a), by the series (x < a + 1) or the continued fraction."""
    if x <= 0:
        return 1.0
    log_prefix = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return min(1.0, math.exp(log_prefix) * h)


def chi2_sf(statistic: float, df: int) -> float:
    """P(X >= statistic) for X chi-square with ``df`` degrees of freedom."""
    if df <= 0:
        return 1.0
    return _upper_gamma_regularised(df / 2, statistic / 2)


def _pooled_columns(a: Counter[int], b: Counter[int]) -> list[tuple[int, int]]:
    n_a, n_b = sum(a.values()), sum(b.values())
    total = n_a + n_b
    keep, other = [], [0, 0]
    for token in sorted(set(a) | set(b)):
        column = a[token] + b[token]
        if min(n_a, n_b) * column / total >= MIN_EXPECTED:
            keep.append((a[token], b[token]))
        else:
            other[0] += a[token]
            other[1] += b[token]
    if sum(other):
        if min(n_a, n_b) * sum(other) / total >= MIN_EXPECTED or not keep:
            keep.append((other[0], other[1]))
        else:
            smallest = min(range(len(keep)), key=lambda i: sum(keep[i]))
            keep[smallest] = (keep[smallest][0] + other[0], keep[smallest][1] + other[1])
    return keep


def homogeneity(sample_a: Sequence[int], sample_b: Sequence[int]) -> ChiSquare:
    """Do the two samples come from the same distribution? (Pearson's chi-square, pooled columns.)"""
    columns = _pooled_columns(Counter(sample_a), Counter(sample_b))
    n_a, n_b = len(sample_a), len(sample_b)
    total = n_a + n_b
    statistic = 0.0
    for count_a, count_b in columns:
        column = count_a + count_b
        for observed, row in ((count_a, n_a), (count_b, n_b)):
            expected = row * column / total
            statistic += (observed - expected) ** 2 / expected if expected else 0.0
    df = len(columns) - 1
    return ChiSquare(statistic=statistic, df=df, p_value=chi2_sf(statistic, df), categories=len(columns))
