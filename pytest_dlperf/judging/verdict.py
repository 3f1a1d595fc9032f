"""Comparing a measured metric with its baseline: direction-aware and noise-aware.

A change is a regression only when it is worse than the tolerance *and* worse than
the noise of the two medians allows *and*, where both sides have enough samples,
statistically distinguishable by a two-sided Mann-Whitney U test (as asv decides).

Counts of events (unit ``count``: graph breaks, recompilations) are not noisy: any count
above the baseline's is a regression, reported with the events' reasons (a graph break
where the baseline had none fails however small the tolerance is).

The noise is the standard error of the difference of the two medians, estimated from
each side's interquartile range and sample count: more rounds give a more precise
median and so a tighter verdict, never a looser one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from .baselines import Baseline
from ..result import HIGHER, Metric
from .stats import mann_whitney_p, median_standard_error

#: The figures a test's ``dlperf.check`` judges against the baselines (the others are recorded only).
CHECKED_METRICS = ("throughput", "peak_host_memory", "peak_device_memory", "accuracy_top1",
                   "accuracy_top5", "scaling_efficiency", "speedup", "compile_time", "compile_time_total",
                   "graph_breaks", "recompilations")
OK, REGRESSION, IMPROVEMENT, MISSING, UPDATED = "ok", "regression", "improvement", "missing", "updated"
#: The unit of event counts, compared exactly.
COUNT = "count"
#: Significance level of the rank test.
ALPHA = 0.05
#: The tolerance widens to this many standard errors of the difference of the medians...
SPREAD_FACTOR = 3.0
#: ...but never beyond this multiple of the tolerance, nor beyond half the baseline, so a noisy run can still fail.
MAX_WIDENING = 3.0
MAX_EFFECTIVE_TOLERANCE = 0.5
#: Memory is judged with at least this tolerance, whatever the run's (the tests and ``dlperf compare`` alike).
MEMORY_TOLERANCE = 0.10
#: Compile time is one sample per process (no spread to widen the verdict with) of CPU-bound work that
#: a busy host stretches: never judged tighter than this. The regressions worth catching are larger.
COMPILE_TIME_TOLERANCE = 0.25


def tolerance_for(metric: str, tolerance: float) -> float:
    """The tolerance a metric named ``metric`` is judged with, given the run's tolerance."""
    if metric.startswith("compile_time"):
        return max(tolerance, COMPILE_TIME_TOLERANCE)
    return max(tolerance, MEMORY_TOLERANCE) if "memory" in metric else tolerance


@dataclass(frozen=True)
class Verdict:
    test: str
    label: str
    metric: str
    unit: str
    direction: str
    observed: float
    baseline: float | None
    tolerance: float
    status: str
    p_value: float | None = None
    software_note: str = ""
    #: The baseline file (hardware key) the figure belongs to.
    hardware: str = ""
    #: What the events of a count metric were (their reasons), for the failure line.
    detail: str = ""

    @property
    def delta(self) -> float | None:
        """Signed relative change, observed vs baseline (+0.10 = 10% larger)."""
        if self.baseline in (None, 0):
            return None
        return (self.observed - self.baseline) / abs(self.baseline)

    def line(self) -> str:
        """One line with metric, observed, baseline, delta and tolerance, for CI annotations."""
        if self.baseline is None:
            return f"{self.label} {self.metric}: {self.observed:.4g} {self.unit}, no baseline for this machine"
        if self.unit == COUNT:
            return (f"{self.status}: {self.label} {self.metric} {self.observed:g} vs baseline {self.baseline:g}"
                    + (f": {self.detail}" if self.detail else "")
                    + (f" [{self.software_note}]" if self.software_note else ""))
        p = f", p={self.p_value:.3f}" if self.p_value is not None else ""
        return (
            f"{self.status}: {self.label} {self.metric} {self.observed:.4g} {self.unit} vs baseline "
            f"{self.baseline:.4g} ({self.delta:+.1%}, tolerance {self.tolerance:.1%}{p})"
            + (f" [{self.software_note}]" if self.software_note else "")
        )


def rank_test_can_decide(n1: int, n2: int) -> bool:
    """Whether the smallest two-sided p-value these sample counts allow is below ALPHA.

    With 3 rounds against 3 the exact Mann-Whitney test cannot go below p = 0.1, so
    with so few samples the tolerance (widened by the spread) decides alone.
    """
    return n1 > 0 and n2 > 0 and 2.0 / math.comb(n1 + n2, n1) < ALPHA


def software_difference(now: Mapping[str, object], then: Mapping[str, object]) -> str:
    changed = [f"{k} {then[k]} -> {now[k]}" for k in sorted(set(now) & set(then)) if now[k] != then[k]]
    return ("software changed since the baseline: " + ", ".join(changed)) if changed else ""


def compare(
    test: str,
    label: str,
    metric: Metric,
    baseline: Baseline | None,
    tolerance: float,
    software: Mapping[str, object] | None = None,
    reasons: Sequence[str] = (),
) -> Verdict:
    observed = metric.value
    common = dict(test=test, label=label, metric=metric.name, unit=metric.unit, direction=metric.direction,
                  observed=observed)
    if baseline is None:
        return Verdict(**common, baseline=None, tolerance=tolerance, status=MISSING)
    if metric.unit == COUNT:
        return _compare_counts(common, baseline, software, reasons)
    rel = (observed - baseline.value) / abs(baseline.value) if baseline.value else 0.0
    worse_by = -rel if metric.direction == HIGHER else rel
    noise = SPREAD_FACTOR * math.hypot(median_standard_error(metric.summary.rel_spread, len(metric.samples)),
                                       median_standard_error(baseline.rel_spread, len(baseline.samples)))
    effective = max(tolerance, min(noise, MAX_WIDENING * tolerance, MAX_EFFECTIVE_TOLERANCE))
    p = None
    if rank_test_can_decide(len(metric.samples), len(baseline.samples)):
        p = mann_whitney_p(metric.samples, baseline.samples)
    distinguishable = p is None or p < ALPHA
    if worse_by > effective and distinguishable:
        status = REGRESSION
    elif -worse_by > effective and distinguishable:
        status = IMPROVEMENT
    else:
        status = OK
    note = software_difference(software or {}, baseline.software) if status != OK else ""
    return Verdict(**common, baseline=baseline.value, tolerance=effective, status=status, p_value=p,
                   software_note=note)


def _compare_counts(common: dict, baseline: Baseline, software: Mapping[str, object] | None,
                    reasons: Sequence[str]) -> Verdict:
    """Events are exact: more than the baseline's is a regression, fewer an improvement."""
    observed, expected = common["observed"], baseline.value
    worse = observed > expected if common["direction"] != HIGHER else observed < expected
    better = observed != expected and not worse
    status = REGRESSION if worse else IMPROVEMENT if better else OK
    shown = list(dict.fromkeys(reasons))  # distinct, in order
    detail = ""
    if shown:
        detail = "; ".join(shown[:3]) + (f"; and {len(shown) - 3} more" if len(shown) > 3 else "")
    note = software_difference(software or {}, baseline.software) if status != OK else ""
    return Verdict(**common, baseline=expected, tolerance=0.0, status=status, software_note=note, detail=detail)


def failure_message(nodeid: str, verdicts: list[Verdict]) -> str:
    """First line: the worst regression's numbers. Then the others, then how to refresh."""
    # New events (a graph break where there was none) first: their delta is infinite, and they say why.
    bad = sorted((v for v in verdicts if v.status == REGRESSION),
                 key=lambda v: (v.unit != COUNT, -abs(v.delta or 0.0)))
    lines = [bad[0].line()]
    lines += [f"  also {v.line()}" for v in bad[1:]]
    lines.append(f"Refresh with --update-baselines if the change is intended: pytest --update-baselines '{nodeid}'")
    return "\n".join(lines)
