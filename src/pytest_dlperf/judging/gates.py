"""The one gate: how far a figure may move before it is called a change, and what it can detect.

A stored-baseline comparison sets one new run's value against the figure's recorded runs. On the
log scale (changes are relative) the new value's distance from the runs' mean has variance

    sd^2 * (1 + 1/k) + shift^2

with ``k`` the recorded runs, ``sd`` the figure's moderated run-to-run spread
(:mod:`pytest_dlperf.judging.noise`) and ``shift^2`` the variance of what the whole run shares: the
run's common shift while it is unknown (a test's own check), or the error of its estimate once the
run has measured it (:mod:`pytest_dlperf.judging.run_shift`). Only a change for the worse fails, so
the bound is one-sided: ``t(1 - alpha, df)`` times that deviation, with ``alpha`` the figure's share of
the run's error budget (:data:`BUDGET`). The configured tolerance is the least the gate can be, never
the most.

"No change" is a claim of its own: the two-sided interval for the change, ``t(1 - EQUIVALENCE_ALPHA, df)``
times the same deviation either side of the observed log change, lies within the tolerance (two one-sided
tests, :data:`EQUIVALENCE_ALPHA`). A change within the tolerance that the evidence does not bound is
inconclusive. A gate is printed as the change it catches 19 times in 20 (:data:`POWER`): the bound
plus ``t(POWER, df)`` deviations; the bound itself is the change it catches half the time.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

#: The chance that a run with no change fails anywhere (family-wise, Bonferroni).
FAMILY_ALPHA = 0.05
#: How the run's error budget is shared: each figure at its test's check (the run's shift unknown),
#: each figure again after the run's shift is known, and each kind's shift itself.
BUDGET = {"check": 0.01, "residual": 0.03, "shift": 0.01}
#: Compile time is one sample per process of CPU-bound work a busy host stretches: never gated tighter.
COMPILE_TIME_TOLERANCE = 0.25
#: Accuracies: tight enough that a 5-point drop from 0.9 is a change (5.6%), wide enough for one
#: differently classified image in a few hundred.
ACCURACY_TOLERANCE = 0.03
#: Peak memory: it moves about 2% run to run where throughput moves 5%, so it is not held to the
#: run's tolerance, which is sized for timing drift.
MEMORY_TOLERANCE = 0.05
#: A shared CPU VM's whole-run weather between days and hosts of one class reaches past one figure's
#: tolerance (docs/verdicts.md, "The run's common shift"), so a CPU run's throughput shift is held to this
#: many of its figures' tolerance at least: a framework a third slower still fails, the weather does not.
CPU_SHIFT_TOLERANCES = 2.5
#: Instructions per step: a count that moves a few hundredths of a percent between runs
#: (docs/instructions.md), so a change of 1% is a change.
INSTRUCTION_TOLERANCE = 0.005
#: "No change" is two one-sided tests at this level each (Schuirmann's TOST): the two-sided 90% interval
#: for the change lies within the tolerance. Not split over the run's figures: a wrong "no change" fails
#: nothing, it leaves a change unclaimed, so each figure's claim is held to the usual level on its own.
EQUIVALENCE_ALPHA = 0.05
#: A gate is printed as the change for the worse it catches this often in one new run (19 times in 20).
POWER = 0.95
#: A gate wider than this (on the log scale: a halving or a doubling) cannot detect a change worth the name.
CANNOT_DETECT = math.log(2.0)


def tolerance_for(metric: str, run: float, marker: float | None = None, explicit: float | None = None) -> float:
    """The tolerance a figure is held to at least: ``dlperf.check(tolerance=)`` wins; a ``tolerance``
    marker widens the run's tolerance (``--dlperf-tolerance``) and never narrows it; compile times
    are held no tighter than :data:`COMPILE_TIME_TOLERANCE`. Accuracies, peak memory and instruction
    counts start from :data:`ACCURACY_TOLERANCE`, :data:`MEMORY_TOLERANCE` and
    :data:`INSTRUCTION_TOLERANCE` instead of the run's: the run's tolerance is sized for timing drift,
    which does not move an accuracy or a count and moves memory less."""
    if metric.startswith("accuracy"):
        run = ACCURACY_TOLERANCE
    elif metric.startswith("peak_") and metric.endswith("_memory"):
        run = MEMORY_TOLERANCE
    elif metric == "instructions_per_step":
        run = INSTRUCTION_TOLERANCE
    tolerance = explicit if explicit is not None else max(run, marker) if marker is not None else run
    return max(tolerance, COMPILE_TIME_TOLERANCE) if metric.startswith("compile_time") else tolerance


def shift_tolerance(kind: str, device: str, tolerance: float) -> float:
    """The tolerance a run's common shift of ``kind`` is held to at least, from its figures' smallest
    ``tolerance``: a CPU run's throughput shift to :data:`CPU_SHIFT_TOLERANCES` of it."""
    return tolerance * CPU_SHIFT_TOLERANCES if (kind, device) == ("throughput", "cpu") else tolerance


def family_alpha(figures: int, share: str = "check", family: float = FAMILY_ALPHA) -> float:
    """The one-sided level of each of ``figures`` judged at this ``share`` of the run's budget."""
    return family * BUDGET[share] / sum(BUDGET.values()) / max(figures, 1)


@dataclass(frozen=True)
class Policy:
    """What a figure is held to, resolved once: by the plugin for a test's check, by ``dlperf compare``
    for a comparison. Both then judge with :func:`pytest_dlperf.judging.verdict.compare`."""

    #: The run's tolerance (``--dlperf-tolerance``; ``dlperf compare --tolerance``).
    run: float
    #: The test's ``tolerance`` marker, by metric name (None where it sets none for that metric).
    marked: Callable[[str], float | None] | None = None
    #: ``dlperf.check(tolerance=)``: wins over the others.
    explicit: float | None = None
    #: The run's error budget (the ini key ``dlperf_alpha``) and the figures its checks share it over.
    alpha: float = FAMILY_ALPHA
    family: int = 1

    def tolerance(self, metric: str) -> float:
        """The tolerance ``metric`` is held to (:func:`tolerance_for`)."""
        return tolerance_for(metric, self.run, self.marked(metric) if self.marked else None, self.explicit)

    @property
    def figure_alpha(self) -> float:
        """The level each figure is judged at by its test's check (Bonferroni over :attr:`family`)."""
        return family_alpha(self.family, "check", self.alpha)


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (the normal's when ``df`` is infinite)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be between 0 and 1 (exclusive), got {p!r}")
    from scipy import stats  # here, not at the top: a pytest run whose tests never judge must not pay for it

    return float(stats.norm.ppf(p) if math.isinf(df) else stats.t.ppf(p, df))


@dataclass(frozen=True)
class Gate:
    """How far a figure may move for the worse, on the log scale, and what that rests on."""

    #: The configured tolerance: changes smaller than this are never called a regression or an improvement.
    tolerance: float
    #: The figure's run-to-run spread (log scale), moderated with its kind's.
    noise: float
    #: Degrees of freedom behind ``noise``.
    df: float
    #: Runs recorded for the figure.
    runs: int
    #: The one-sided per-figure level.
    alpha: float
    #: Variance (log scale) the whole run shares: its shift while unknown, or its estimate's error.
    shared: float = 0.0

    @property
    def scale(self) -> float:
        """The standard deviation of one more run's log change under no change."""
        return math.sqrt(self.noise ** 2 * (1 + 1 / max(self.runs, 1)) + self.shared)

    @property
    def bound(self) -> float:
        """The smallest log change for the worse this gate calls (never under the tolerance): a change
        of this size is caught half the time."""
        if self.df <= 0:
            return math.inf
        return max(t_quantile(1 - self.alpha, self.df) * self.scale, math.log1p(self.tolerance))

    @property
    def margin(self) -> float:
        """Half the width of the two-sided interval for the change (log scale): infinite when the
        noise is unknown (no degrees of freedom)."""
        if self.df <= 0:
            return math.inf
        return t_quantile(1 - EQUIVALENCE_ALPHA, self.df) * self.scale

    def interval(self, change: float) -> tuple[float, float]:
        """The interval for the true change (log scale) around an observed ``change``."""
        return change - self.margin, change + self.margin

    def bounded(self, change: float) -> bool:
        """Whether the evidence bounds the change within the tolerance: its interval lies inside
        ``±log1p(tolerance)`` (the equivalence test; the sign of ``change`` does not matter)."""
        return abs(change) + self.margin <= math.log1p(self.tolerance)

    @property
    def catches(self) -> float:
        """The log change for the worse this gate catches :data:`POWER` of the time in one new run:
        ``bound + t(POWER, df) * scale``, as one new run's change is the true change plus ``scale``
        times a Student's t."""
        if self.df <= 0:
            return math.inf
        return self.bound + t_quantile(POWER, self.df) * self.scale

    def detects(self, direction: str) -> float | None:
        """The relative change for the worse it catches 19 times in 20 (a throughput's loss, a
        memory's growth), or None when that is beyond a halving or a doubling: it cannot detect a change."""
        return _relative(self.catches, direction)

    def detects_half(self, direction: str) -> float | None:
        """The relative change for the worse it catches half the time: its bound (None beyond a halving)."""
        return _relative(self.bound, direction)

    def p_value(self, worse: float) -> float | None:
        """The one-sided p-value of a change ``worse`` (log scale, positive = worse)."""
        if self.scale <= 0:
            return None
        z = worse / self.scale
        from scipy import stats

        return float(stats.norm.sf(z) if math.isinf(self.df) else stats.t.sf(z, self.df))


def _relative(log_change: float, direction: str) -> float | None:
    """A log change for the worse as a relative one (a loss for ``higher``), None beyond :data:`CANNOT_DETECT`."""
    if log_change > CANNOT_DETECT:
        return None
    return -math.expm1(-log_change) if direction == "higher" else math.expm1(log_change)


def geometric_mean(values: Sequence[float]) -> float:
    positive = [v for v in values if v > 0]
    if not positive:
        return sum(values) / len(values)
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


def unit_means(values: Sequence[float], units: Sequence[int]) -> list[float]:
    """The mean of ``values`` per unit, in the units' order of first appearance."""
    groups: dict[int, list[float]] = {}
    for value, unit in zip(values, units):
        groups.setdefault(unit, []).append(value)
    return [sum(g) / len(g) for g in groups.values()]
