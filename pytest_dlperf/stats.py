"""Summary statistics of measured samples, and the rank test used by verdicts.

Pure Python on purpose: the training child, the plugin and the ``dlperf`` command
all use it, and none of them should need NumPy or SciPy for a median.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no samples")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (NumPy's default method)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no samples")
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    """Median and spread of a set of samples."""

    n: int
    median: float
    mean: float
    stdev: float
    minimum: float
    maximum: float
    iqr: float

    @property
    def rel_spread(self) -> float:
        """Half the interquartile range relative to the median: a robust noise figure."""
        return (self.iqr / 2.0) / abs(self.median) if self.median else 0.0

    def to_dict(self) -> dict[str, float]:
        return {
            "n": self.n,
            "median": self.median,
            "mean": self.mean,
            "stdev": self.stdev,
            "min": self.minimum,
            "max": self.maximum,
            "iqr": self.iqr,
        }


def summarize(values: Sequence[float]) -> Summary:
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no samples to summarize")
    mean = sum(vals) / len(vals)
    stdev = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
    return Summary(
        n=len(vals),
        median=median(vals),
        mean=mean,
        stdev=stdev,
        minimum=min(vals),
        maximum=max(vals),
        iqr=quantile(vals, 0.75) - quantile(vals, 0.25),
    )


def median_standard_error(rel_half_iqr: float, n: int) -> float:
    """Relative standard error of a median of ``n`` samples with this relative half-IQR.

    For roughly normal samples sigma = IQR / 1.349 and se(median) = sqrt(pi / 2) * sigma / sqrt(n).
    """
    if n < 1:
        return 0.0
    return math.sqrt(math.pi / 2.0) * (2.0 * rel_half_iqr / 1.349) / math.sqrt(n)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test (as asv uses for its verdicts).

    Exact distribution for small samples without ties, normal approximation with tie
    correction otherwise. Returns 1.0 when either side has no samples.
    """
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = sorted([(float(v), 0) for v in a] + [(float(v), 1) for v in b])
    ranks = [0.0] * len(pooled)
    tie_term = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        avg = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[k] = avg
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    r1 = sum(r for r, (_, side) in zip(ranks, pooled) if side == 0)
    u1 = r1 - n1 * (n1 + 1) / 2.0
    u = min(u1, n1 * n2 - u1)
    if tie_term == 0 and n1 + n2 <= 30:
        return min(1.0, 2.0 * _exact_u_cdf(int(round(u)), n1, n2))
    mu = n1 * n2 / 2.0
    n = n1 + n2
    sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1))))
    if sigma == 0:
        return 1.0
    z = (u - mu + 0.5) / sigma
    return min(1.0, 2.0 * 0.5 * math.erfc(-z / math.sqrt(2.0)))


def _exact_u_cdf(u: int, n1: int, n2: int) -> float:
    """P(U <= u) under the null, by counting rank arrangements."""
    # counts[i][j][s]: arrangements of i from sample 1 and j from sample 2 with U == s
    from functools import lru_cache

    @lru_cache(maxsize=None)
    def count(i: int, j: int, s: int) -> int:
        if s < 0:
            return 0
        if i == 0 or j == 0:
            return 1 if s == 0 else 0
        return count(i - 1, j, s - j) + count(i, j - 1, s)

    total = math.comb(n1 + n2, n1)
    return sum(count(n1, n2, s) for s in range(u + 1)) / total
