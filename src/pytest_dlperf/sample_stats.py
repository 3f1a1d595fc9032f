"""Descriptive statistics of measured samples: median, quantiles, their spread.

The measuring side's share of the statistics: every training, loader and rank process uses it
to report its rounds. Pure Python on purpose: none of them should need NumPy or SciPy for a
median. Judging (rank tests, paired ratios, the outcome rule) is in
:mod:`pytest_dlperf.judging.stats`, which no measuring process imports.
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
class SampleStats:
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


def sample_stats(values: Sequence[float]) -> SampleStats:
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no samples to summarize")
    mean = sum(vals) / len(vals)
    stdev = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
    return SampleStats(
        n=len(vals),
        median=median(vals),
        mean=mean,
        stdev=stdev,
        minimum=min(vals),
        maximum=max(vals),
        iqr=quantile(vals, 0.75) - quantile(vals, 0.25),
    )
