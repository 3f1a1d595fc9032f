"""Comparing a run's figure with the figure's recorded runs: direction-aware, judged by the machine's noise.

Each figure has a gate (:mod:`pytest_dlperf.judging.gates`): the configured tolerance at least,
widened to the one-sided prediction bound its moderated noise gives at its share of the run's error
budget. Outcomes for a measured figure:

- ``regression`` (or ``improvement``): it moved beyond its gate;
- ``ok`` (no change): the evidence bounds its change within the tolerance: the 90% interval for the
  change (:data:`pytest_dlperf.judging.gates.EQUIVALENCE_ALPHA`) lies inside it;
- ``inconclusive``: neither: it moved less than its gate, and the change it could hide reaches past
  the tolerance.

A gate is shown as the change it catches 19 times in 20 ("catches 23% 19 times in 20"), with the
change it catches half the time (its bound) beside it.

Counts of events (unit ``count``: graph breaks, recompilations) are not noisy: any count
above the baseline's is a regression, reported with the events' reasons (a graph break
where the baseline had none fails however small the tolerance is).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_dlperf.result import HIGHER, FigureId, Metric
from pytest_dlperf.judging.baselines import Baseline
# the outcome words are imported from here by most callers
from pytest_dlperf.judging.outcomes import IMPROVEMENT, INCONCLUSIVE, MISSING, OK, REGRESSION, UPDATED as UPDATED
from pytest_dlperf.judging.gates import Gate, geometric_mean
from pytest_dlperf.judging.noise import Spread, own_spread

#: The figures a test's ``dlperf.check`` judges against the baselines (the others are recorded only).
CHECKED_METRICS = ("throughput", "peak_host_memory", "peak_device_memory", "accuracy_top1",
                   "accuracy_top5", "scaling_efficiency", "speedup", "compile_time", "compile_time_total",
                   "graph_breaks", "recompilations", "instructions_per_step")
#: The unit of event counts, compared exactly.
COUNT = "count"
#: The checked metrics that count events: exact, so outside the run's error budget.
EVENT_COUNTS = ("graph_breaks", "recompilations")


@dataclass(frozen=True)
class Verdict(FigureId):
    """One figure's judgement (its ``hardware``: the baseline file the figure belongs to)."""

    unit: str
    direction: str
    observed: float
    #: The centre of the recorded runs (their geometric mean); None when there is no baseline.
    baseline: float | None
    #: The configured tolerance: the least the gate can be.
    tolerance: float
    status: str
    p_value: float | None = None
    software_note: str = ""
    #: What the events of a count metric were (their reasons), for the failure line.
    detail: str = ""
    #: The change for the worse (a fraction) this figure's gate catches 19 times in 20 in one new run;
    #: None when that is beyond a halving or a doubling, or there is no baseline. Exact counts: 0.
    gate: float | None = None
    #: The change for the worse its gate catches half the time: the smallest one it calls.
    gate_half: float | None = None
    #: The interval (two-sided 90%) for the change it was judged on, as relative changes (low, high):
    #: after the run's shift where there is one. None where the noise is unknown or not judged.
    interval: tuple[float, float] | None = None
    #: The run-to-run spread (log scale) the gate rests on.
    noise: float | None = None
    #: Runs recorded for the figure.
    runs: int = 0
    #: The one-sided per-figure level the gate was set at.
    alpha: float | None = None
    #: The figure's kind in the noise model (throughput, memory, ...) and its framework.
    kind: str = ""
    framework: str = ""
    #: Degrees of freedom behind ``noise``.
    df: float = 0.0
    #: The run's common shift (log scale) this verdict was judged after; None at the test's own check.
    shift: float | None = None
    #: Whether the figure moves with its kind's shift in the noise model (else judged on its own runs).
    follows_shift: bool = True

    @property
    def delta(self) -> float | None:
        """Signed relative change, observed vs baseline (+0.10 = 10% larger)."""
        if self.baseline in (None, 0):
            return None
        return (self.observed - self.baseline) / abs(self.baseline)

    def gate_text(self) -> str:
        runs = f"{self.runs} recorded run{'s' * (self.runs != 1)}"
        noise = f", run-to-run {self.noise:.1%} over {runs}" if self.noise is not None else f", {runs}"
        shift = f", after the run's shift {math.expm1(self.shift):+.1%}" if self.shift is not None else ""
        half = f"half the time at {self.gate_half:.1%}, " if self.gate_half is not None else ""
        return f"{catch_words(self.gate, self.gate_half)} ({half}tolerance {self.tolerance:.1%}{noise}{shift})"

    def undecided_text(self) -> str:
        """What an inconclusive figure could hide, and what would decide it."""
        if self.interval is None:
            return "its noise is unknown: more recorded runs would decide"
        low, high = self.interval
        reach = low if abs(math.log1p(low)) > abs(math.log1p(high)) else high
        return (f"could hide a change of up to {reach:+.1%} (90% interval {low:+.1%} to {high:+.1%}); "
                "more recorded runs or a quieter machine would decide")

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
            + (f": {self.undecided_text()}" if self.status == INCONCLUSIVE else "")
            + (f" [{self.software_note}]" if self.software_note else "")
        )


def catch_text(gate: float | None, half: float | None = None) -> str:
    """A gate in words: "catches 23.0% 19 times in 20 (half the time at 14.0%)"."""
    return catch_words(gate, half) + (f" (half the time at {half:.1%})" if half is not None else "")


def catch_words(gate: float | None, half: float | None = None) -> str:
    """A gate's 19-in-20 figure in words, without its half-time point."""
    if gate is None:
        return "cannot detect a halving" if half is None else "catches a halving less than 19 times in 20"
    return f"catches {gate:.1%} 19 times in 20"


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
    spread: Spread | None = None,
    alpha: float = 0.05,
    shared: float = 0.0,
    shift: float | None = None,
    kind: str = "",
) -> Verdict:
    """Judge ``metric`` against the recorded runs of ``baseline`` (see the module's docstring).

    ``spread``: the figure's moderated noise (:class:`pytest_dlperf.judging.noise.MachineNoise`; without
    one, its own runs'); ``alpha``: its one-sided level; ``shared``: the variance the whole run shares;
    ``shift``: the run's common shift (log scale) to judge the figure after.
    """
    observed = metric.value
    framework = str((software or {}).get("framework", ""))
    common: dict[str, Any] = dict(test=test, label=label, metric=metric.name, unit=metric.unit,
                                  direction=metric.direction, observed=observed, kind=kind, framework=framework)
    if baseline is None:
        return Verdict(**common, baseline=None, tolerance=tolerance, status=MISSING)
    if metric.unit == COUNT:
        return _compare_counts(common, baseline, software, reasons, tolerance)
    runs = baseline.runs or (baseline.value,)
    centre = geometric_mean(runs)
    spread = spread or own_spread(runs)
    gate = Gate(tolerance, spread.sd, spread.df, len(runs), alpha, shared)
    change = log_change(observed, centre) - (shift or 0.0)
    worse = -change if metric.direction == HIGHER else change
    status = outcome(worse, gate)
    note = software_difference(software or {}, baseline.software) if status not in (OK, INCONCLUSIVE) else ""
    return Verdict(**common, baseline=centre, tolerance=tolerance, status=status,
                   p_value=gate.p_value(worse), software_note=note, **gate_fields(gate, change, metric.direction),
                   noise=spread.sd, runs=len(runs), alpha=alpha, df=spread.df, shift=shift)


def gate_fields(gate: Gate, change: float, direction: str) -> dict[str, Any]:
    """A verdict's gate, its half-time point and the interval for its ``change`` (log scale)."""
    low, high = gate.interval(change)
    interval = None if math.isinf(gate.margin) else (math.expm1(low), math.expm1(min(high, 700.0)))
    return dict(gate=gate.detects(direction), gate_half=gate.detects_half(direction), interval=interval)


def log_change(observed: float, centre: float) -> float:
    """The change as a log ratio; for figures that can be zero, the relative change instead."""
    if observed > 0 and centre > 0:
        return math.log(observed / centre)
    return (observed - centre) / abs(centre) if centre else 0.0


def outcome(worse: float, gate: Gate) -> str:
    """The outcome of a change ``worse`` (log scale, positive = worse) at ``gate``: beyond the bound a
    regression or an improvement; no change only where the interval for it lies within the tolerance."""
    if abs(worse) > gate.bound:
        return REGRESSION if worse > 0 else IMPROVEMENT
    return OK if gate.bounded(worse) else INCONCLUSIVE


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
                   gate=0.0, gate_half=0.0, runs=len(baseline.runs))


def failure_message(nodeid: str, verdicts: list[Verdict]) -> str:
    """First line: the worst regression's numbers. Then the others, then how to refresh."""
    # New events (a graph break where there was none) first: their delta is infinite, and they say why.
    bad = sorted((v for v in verdicts if v.status == REGRESSION),
                 key=lambda v: (v.unit != COUNT, -abs(v.delta or 0.0)))
    lines = [bad[0].line()]
    lines += [f"  also {v.line()}" for v in bad[1:]]
    lines.append(f"Refresh with --update-baselines if the change is intended: pytest --update-baselines '{nodeid}'")
    return "\n".join(lines)
