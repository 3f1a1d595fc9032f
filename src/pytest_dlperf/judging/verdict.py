"""Comparing a run's figure with the figure's recorded runs: direction-aware, judged by its own noise.

Each figure has a gate (:mod:`pytest_dlperf.judging.gates`): the configured tolerance as a floor,
widened to the prediction bound its recorded runs' spread gives at the run's per-figure level.
Three outcomes for a measured figure:

- ``regression`` (or ``improvement``): it moved beyond its gate;
- ``ok`` (no change): it moved less than the tolerance;
- ``inconclusive``: it moved more than the tolerance but not beyond its noise, or its noise is
  unknown (one recorded run, nothing of its kind to pool): shown, never failing.

Counts of events (unit ``count``: graph breaks, recompilations) are not noisy: any count
above the baseline's is a regression, reported with the events' reasons (a graph break
where the baseline had none fails however small the tolerance is).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_dlperf.result import HIGHER, Metric
from pytest_dlperf.judging.baselines import Baseline
# the outcome words are imported from here by most callers
from pytest_dlperf.judging.outcomes import IMPROVEMENT, INCONCLUSIVE, MISSING, OK, REGRESSION, UPDATED as UPDATED
from pytest_dlperf.judging.gates import FAMILY_ALPHA, Gate, Pool, geometric_mean, resolve, two_sided_p

#: The figures a test's ``dlperf.check`` judges against the baselines (the others are recorded only).
CHECKED_METRICS = ("throughput", "peak_host_memory", "peak_device_memory", "accuracy_top1",
                   "accuracy_top5", "scaling_efficiency", "speedup", "compile_time", "compile_time_total",
                   "graph_breaks", "recompilations")
#: The unit of event counts, compared exactly.
COUNT = "count"


@dataclass(frozen=True)
class Verdict:
    test: str
    label: str
    metric: str
    unit: str
    direction: str
    observed: float
    #: The centre of the recorded runs (their geometric mean); None when there is no baseline.
    baseline: float | None
    #: The configured tolerance: the floor under the gate.
    tolerance: float
    status: str
    p_value: float | None = None
    software_note: str = ""
    #: The baseline file (hardware key) the figure belongs to.
    hardware: str = ""
    #: What the events of a count metric were (their reasons), for the failure line.
    detail: str = ""
    #: The smallest change (a fraction) this figure's gate calls; None when its noise is unknown.
    gate: float | None = None
    #: The run-to-run spread (log scale) the gate rests on; None when unknown.
    noise: float | None = None
    #: Runs recorded for the figure.
    runs: int = 0
    #: The per-figure level the gate was set at.
    alpha: float | None = None

    @property
    def delta(self) -> float | None:
        """Signed relative change, observed vs baseline (+0.10 = 10% larger)."""
        if self.baseline in (None, 0):
            return None
        return (self.observed - self.baseline) / abs(self.baseline)

    @property
    def detectable(self) -> float | None:
        """The smallest change this comparison could call (the gate), or None when the noise is unknown."""
        return self.gate

    def gate_text(self) -> str:
        if self.gate is None:
            return (f"tolerance {self.tolerance:.1%}, noise unknown "
                    f"({self.runs} recorded run{'s' * (self.runs != 1)})")
        noise = f", run-to-run {self.noise:.1%} over {self.runs} runs" if self.noise is not None else ""
        return f"gate {self.gate:.1%} (tolerance {self.tolerance:.1%}{noise})"

    def line(self) -> str:
        """One line with metric, observed, baseline, delta and gate, for CI annotations."""
        if self.baseline is None:
            return f"{self.label} {self.metric}: {self.observed:.4g} {self.unit}, no baseline for this machine"
        if self.unit == COUNT:
            return (f"{self.status}: {self.label} {self.metric} {self.observed:g} vs baseline {self.baseline:g}"
                    + (f": {self.detail}" if self.detail else "")
                    + (f" [{self.software_note}]" if self.software_note else ""))
        p = f", p={self.p_value:.2g}" if self.p_value is not None else ""
        return (
            f"{self.status}: {self.label} {self.metric} {self.observed:.4g} {self.unit} vs baseline "
            f"{self.baseline:.4g} ({self.delta:+.1%}, {self.gate_text()}{p})"
            + (f" [{self.software_note}]" if self.software_note else "")
        )


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
    pool: Pool | None = None,
    alpha: float = FAMILY_ALPHA,
) -> Verdict:
    """Judge ``metric`` against the recorded runs of ``baseline`` (see the module's docstring).

    ``pool``: the pooled spread of the figure's kind in its baseline file; ``alpha``: the
    per-figure level (:func:`pytest_dlperf.judging.gates.family_alpha`).
    """
    observed = metric.value
    common: dict[str, Any] = dict(test=test, label=label, metric=metric.name, unit=metric.unit,
                                  direction=metric.direction, observed=observed)
    if baseline is None:
        return Verdict(**common, baseline=None, tolerance=tolerance, status=MISSING)
    if metric.unit == COUNT:
        return _compare_counts(common, baseline, software, reasons, tolerance)
    runs = baseline.runs or (baseline.value,)
    centre = geometric_mean(runs)
    gate = resolve(tolerance, runs, pool, alpha)
    change = _log_change(observed, centre)
    worse = -change if metric.direction == HIGHER else change
    status = _outcome(worse, gate)
    note = software_difference(software or {}, baseline.software) if status not in (OK, INCONCLUSIVE) else ""
    return Verdict(**common, baseline=centre, tolerance=tolerance, status=status,
                   p_value=two_sided_p(change, gate), software_note=note, gate=gate.width,
                   noise=gate.noise, runs=len(runs), alpha=alpha)


def _log_change(observed: float, centre: float) -> float:
    """The change as a log ratio; for figures that can be zero, the relative change instead."""
    if observed > 0 and centre > 0:
        return math.log(observed / centre)
    return (observed - centre) / abs(centre) if centre else 0.0


def _outcome(worse: float, gate: Gate) -> str:
    """The outcome of a change ``worse`` (log scale, positive = worse) at ``gate``."""
    if abs(worse) <= math.log1p(gate.floor):
        return OK
    bound = gate.noise_bound
    if bound is None or abs(worse) <= max(bound, math.log1p(gate.floor)):
        return INCONCLUSIVE
    return REGRESSION if worse > 0 else IMPROVEMENT


def _compare_counts(common: dict, baseline: Baseline, software: Mapping[str, object] | None,
                    reasons: Sequence[str], tolerance: float) -> Verdict:
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
    return Verdict(**common, baseline=expected, tolerance=tolerance, status=status, software_note=note, detail=detail,
                   gate=0.0, runs=len(baseline.runs))


def failure_message(nodeid: str, verdicts: list[Verdict]) -> str:
    """First line: the worst regression's numbers. Then the others, then how to refresh."""
    # New events (a graph break where there was none) first: their delta is infinite, and they say why.
    bad = sorted((v for v in verdicts if v.status == REGRESSION),
                 key=lambda v: (v.unit != COUNT, -abs(v.delta or 0.0)))
    lines = [bad[0].line()]
    lines += [f"  also {v.line()}" for v in bad[1:]]
    lines.append(f"Refresh with --update-baselines if the change is intended: pytest --update-baselines '{nodeid}'")
    return "\n".join(lines)
