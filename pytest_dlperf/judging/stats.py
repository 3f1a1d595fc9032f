"""Judging statistics: the rank test used by verdicts, paired ratios with their interval, and
the one slower/faster/same rule.

The parent's side only (the plugin, the ``dlperf`` command, benches): no measuring process
imports it (tests/test_child_imports.py holds that). Pure Python, like
:mod:`pytest_dlperf.summary`, whose median it uses.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping, Sequence

from ..summary import median


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


# ---------------------------------------------------------------------------
# Paired measurements: candidate and reference measured back to back (ABBA rounds)
# ---------------------------------------------------------------------------

SLOWER, FASTER, SAME = "slower", "faster", "same"


@dataclass(frozen=True)
class PairedRatio:
    """Candidate/reference throughput ratio of paired runs, with a distribution-free CI.

    ``estimate`` is the Hodges-Lehmann estimate on the log ratios (median of their Walsh
    averages), exponentiated; ``low``/``high`` bound the Wilcoxon signed-rank confidence
    interval for it, also exponentiated. Higher is better: 0.9 means 10% slower.
    """

    ratios: tuple[float, ...]
    estimate: float
    low: float
    high: float
    confidence: float

    @property
    def n(self) -> int:
        return len(self.ratios)

    def describe(self) -> str:
        """E.g. ``0.912x [0.897, 0.925] (95% CI, 20 pairs)``."""
        return (
            f"{self.estimate:.3f}x [{self.low:.3f}, {self.high:.3f}] "
            f"({self.confidence * 100:g}% CI, {self.n} pairs)"
        )

    def to_dict(self) -> dict:
        return {
            "ratios": list(self.ratios),
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PairedRatio":
        return cls(
            ratios=tuple(float(r) for r in data["ratios"]),
            estimate=float(data["estimate"]),
            low=float(data["low"]),
            high=float(data["high"]),
            confidence=float(data["confidence"]),
        )


@functools.lru_cache(maxsize=32)
def _signed_rank_counts(n: int) -> tuple[int, ...]:
    """``counts[t]``: how many of the 2**n sign patterns give the signed-rank statistic T+ == t.

    Exact integer dynamic programming over the ranks 1..n (T+ is the sum of the ranks
    that carry a plus sign); the null distribution is ``counts[t] / 2**n``.
    """
    counts = [1]
    for rank in range(1, n + 1):
        grown = counts + [0] * rank
        for t, c in enumerate(counts):
            grown[t + rank] += c
        counts = grown
    return tuple(counts)


def _signed_rank_k(n: int, confidence: float) -> int:
    """Largest k with P(T+ <= k - 1) <= alpha / 2 under the null; 0 when there is none.

    The confidence level is taken at its decimal value (0.95 is exactly 19/20) and the
    comparison is done in integers, so no float rounding moves the boundary.
    """
    alpha = 1 - Fraction(repr(float(confidence)))
    limit = alpha / 2 * 2**n  # P(T+ <= t) <= alpha/2  <=>  cumulative count <= limit
    k, cumulative = 0, 0
    for t, count in enumerate(_signed_rank_counts(n)):
        cumulative += count
        if cumulative > limit:
            break
        k = t + 1
    return k


def _walsh_averages(values: Sequence[float]) -> list[float]:
    """All n(n+1)/2 pairwise means (x_i + x_j) / 2 with i <= j, sorted."""
    return sorted((values[i] + values[j]) / 2.0 for i in range(len(values)) for j in range(i, len(values)))


def paired_ratio(
    candidate: Sequence[float], reference: Sequence[float], confidence: float = 0.95
) -> PairedRatio:
    """Hodges-Lehmann ratio of paired throughputs and its Wilcoxon signed-rank CI.

    With d_i = log(c_i / r_i) and W_(1) <= ... <= W_(M) the sorted Walsh averages of d,
    the CI is [W_(k), W_(M-k+1)] for the largest k with P(T+ <= k - 1) <= alpha / 2 under
    the exact null distribution of the signed-rank statistic. When no k >= 1 qualifies
    (n <= 5 at 95%) the interval is the full range [W_(1), W_(M)]: the widest honest
    answer; it excludes no change only when every pair moved the same way.
    Coverage is exact for continuous, symmetric log-ratio noise; ties make it approximate.
    """
    cand = [float(v) for v in candidate]
    ref = [float(v) for v in reference]
    if len(cand) != len(ref):
        raise ValueError(
            f"paired_ratio needs one reference per candidate measurement, "
            f"got {len(cand)} candidate and {len(ref)} reference values"
        )
    if len(cand) < 2:
        raise ValueError(f"paired_ratio needs at least 2 pairs, got {len(cand)}")
    for label, values in (("candidate", cand), ("reference", ref)):
        for i, v in enumerate(values):
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{label} value #{i} is {v!r}: throughputs must be positive and finite")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence!r}")
    n = len(cand)
    logs = [math.log(c) - math.log(r) for c, r in zip(cand, ref)]
    walsh = _walsh_averages(logs)
    k = max(_signed_rank_k(n, confidence), 1)  # k == 0 (no k qualifies) and k == 1 both mean the full range
    return PairedRatio(
        ratios=tuple(c / r for c, r in zip(cand, ref)),
        estimate=math.exp(median(walsh)),
        low=math.exp(walsh[k - 1]),
        high=math.exp(walsh[len(walsh) - k]),
        confidence=float(confidence),
    )


def decide(ratio: PairedRatio, threshold: float) -> str:
    """SLOWER, FASTER or SAME for a higher-is-better candidate/reference ratio.

    SLOWER needs estimate < 1 - threshold and high < 1; FASTER needs estimate > 1 + threshold
    and low > 1. The point estimate must pass the threshold *and* the interval must exclude
    1 (no change), so a noisy comparison says "same" rather than raise a false alarm.
    """
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be between 0 and 1 (exclusive), got {threshold!r}")
    if ratio.estimate < 1 - threshold and ratio.high < 1:
        return SLOWER
    if ratio.estimate > 1 + threshold and ratio.low > 1:
        return FASTER
    return SAME
