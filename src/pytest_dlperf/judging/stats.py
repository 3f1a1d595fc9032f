"""Judging statistics: paired ratios with their interval, and the one slower/faster/same/inconclusive rule.

The parent's side only (the plugin, the ``dlperf`` command, benches): no measuring process
imports it (tests/test_child_imports.py holds that). Pure Python, like
:mod:`pytest_dlperf.sample_stats`, whose median it uses.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

from pytest_dlperf.sample_stats import median
from pytest_dlperf.judging.gates import t_quantile, unit_means
from pytest_dlperf.judging.outcomes import IMPROVEMENT, INCONCLUSIVE, OK, REGRESSION


# ---------------------------------------------------------------------------
# Paired measurements: candidate and reference measured back to back (ABBA rounds)
# ---------------------------------------------------------------------------



@dataclass(frozen=True)
class PairedRatio:
    """Candidate/reference throughput ratio of paired runs, with its confidence interval.

    ``units`` is how many independent process pairs the interval rests on (see :func:`paired_ratio`);
    1 means the interval covers the rounds' noise only, not each process's own offset.
    Higher is better: 0.9 means 10% slower.
    """

    ratios: tuple[float, ...]
    estimate: float
    low: float
    high: float
    confidence: float
    units: int = 1

    @property
    def n(self) -> int:
        return len(self.ratios)

    def describe(self) -> str:
        """E.g. ``0.912x [0.897, 0.925] (95% CI, 20 pairs, 4 process pairs)``."""
        over = f"{self.units} process pairs" if self.units > 1 else "1 process pair: rounds' noise only"
        return (
            f"{self.estimate:.3f}x [{self.low:.3f}, {self.high:.3f}] "
            f"({self.confidence * 100:g}% CI, {self.n} pairs, {over})"
        )

    def to_dict(self) -> dict:
        return {
            "ratios": list(self.ratios),
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "units": self.units,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PairedRatio":
        return cls(
            ratios=tuple(float(r) for r in data["ratios"]),
            estimate=float(data["estimate"]),
            low=float(data["low"]),
            high=float(data["high"]),
            confidence=float(data["confidence"]),
            units=int(data.get("units", 1)),
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
    candidate: Sequence[float], reference: Sequence[float], confidence: float = 0.95,
    units: Sequence[int] | None = None,
) -> PairedRatio:
    """Ratio of paired throughputs and its confidence interval, with the process as the unit.

    ``units[i]`` names the process pair that took pair ``i``. Every process carries its own
    offset for its whole life (memory layout, thread placement), which more rounds cannot average
    away, so with two or more units the interval is Student's t over the per-unit mean log ratios
    (``units - 1`` degrees of freedom) and the estimate is their mean, exponentiated.
    With one unit (or ``units`` None) nothing measures that offset: the estimate is the
    Hodges-Lehmann estimate of the log ratios and the interval Wilcoxon's signed-rank interval
    over the pairs (``[W_(k), W_(M-k+1)]`` of the sorted Walsh averages; the full range when no
    k qualifies, n <= 5 at 95%), which covers the rounds' noise only and says so (``units`` 1).
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
    ratios = tuple(c / r for c, r in zip(cand, ref))
    if units is not None and len(units) != n:
        raise ValueError(f"paired_ratio needs one unit per pair, got {len(units)} units for {n} pairs")
    means = unit_means(logs, units) if units is not None else []
    if len(means) >= 2:
        center = sum(means) / len(means)
        se = math.sqrt(sum((m - center) ** 2 for m in means) / (len(means) - 1) / len(means))
        half = t_quantile(1 - (1 - confidence) / 2, len(means) - 1) * se
        return PairedRatio(ratios=ratios, estimate=math.exp(center), low=math.exp(center - half),
                           high=math.exp(center + half), confidence=float(confidence), units=len(means))
    walsh = _walsh_averages(logs)
    k = max(_signed_rank_k(n, confidence), 1)  # k == 0 (no k qualifies) and k == 1 both mean the full range
    return PairedRatio(
        ratios=ratios,
        estimate=math.exp(median(walsh)),
        low=math.exp(walsh[k - 1]),
        high=math.exp(walsh[len(walsh) - k]),
        confidence=float(confidence),
    )


#: The confidence of an A/B comparison's interval, and so of the verdict that fails a test. Its
#: generations are sequential looks at one comparison: at 95% a comparison whose process pairs
#: spread 7-10% failed 2-6% of no-change runs (simulated, docs/verdicts.md), one CI run in twenty.
AB_CONFIDENCE = 0.99


def decide(ratio: PairedRatio, threshold: float) -> str:
    """REGRESSION (slower), IMPROVEMENT (faster), OK (no change) or INCONCLUSIVE for a
    higher-is-better candidate/reference ratio, in the vocabulary of :mod:`.outcomes`.

    REGRESSION needs estimate < 1 - threshold and high < 1; IMPROVEMENT needs estimate > 1 + threshold
    and low > 1: the point estimate must pass the threshold *and* the interval exclude no change.
    OK needs the whole interval within [1 - threshold, 1 + threshold]: no change as large as
    the threshold fits the evidence. Anything else is INCONCLUSIVE: the interval admits both no
    change and one beyond the threshold; more process pairs (generations) would decide it.
    """
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be between 0 and 1 (exclusive), got {threshold!r}")
    if ratio.estimate < 1 - threshold and ratio.high < 1:
        return REGRESSION
    if ratio.estimate > 1 + threshold and ratio.low > 1:
        return IMPROVEMENT
    if ratio.low >= 1 - threshold and ratio.high <= 1 + threshold:
        return OK
    return INCONCLUSIVE


def decided_at(threshold: float, variants: Sequence[str] | None = None) -> Callable[[dict[str, PairedRatio]], bool]:
    """A paired group's stopping rule: every ratio (of ``variants``, or all) decided (:func:`decide` is not
    INCONCLUSIVE) at ``threshold``."""
    def decided(ratios: dict[str, PairedRatio]) -> bool:
        return all(decide(r, threshold) != INCONCLUSIVE for key, r in ratios.items()
                   if variants is None or key in variants)
    return decided


def claim_decided(floor: float, variants: Sequence[str] | None = None) -> Callable[[dict[str, PairedRatio]], bool]:
    """A paired claim's stopping rule: each ratio (of ``variants``, or all) has its interval wholly on one
    side of the claimed ``floor`` (e.g. AMP at least 1.8x fp32), so more processes cannot change the verdict."""
    def decided(ratios: dict[str, PairedRatio]) -> bool:
        chosen = [r for key, r in ratios.items() if variants is None or key in variants]
        return all(r.low >= floor or r.high < floor for r in chosen)
    return decided


def all_decided(*rules: Callable[[dict[str, PairedRatio]], bool]) -> Callable[[dict[str, PairedRatio]], bool]:
    """A group's stopping rule when it holds several claims (e.g. one per variant): each rule decided."""
    def decided(ratios: dict[str, PairedRatio]) -> bool:
        return all(rule(ratios) for rule in rules)
    return decided
