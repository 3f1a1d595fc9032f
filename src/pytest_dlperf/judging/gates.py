"""The one gate resolver: how far a figure may move before it is called a change.

A stored-baseline comparison sets one new run-level value against the figure's recorded runs
(``runs`` in the baseline record). The gate is a prediction bound for one more run from that
history, on the log scale (changes are relative):

    gate = t(1 - alpha / 2, df) * s * sqrt(1 + 1 / k)

with ``k`` the recorded runs, ``s`` their run-to-run spread (standard deviation of the log values)
and ``alpha`` the per-figure level after the suite-wide correction (:func:`family_alpha`). Where the
other figures of its kind in the same baseline file (same metric, same framework) spread more than
its own runs, their pooled spread is a prior worth at most :data:`PRIOR_DF` degrees of freedom,
moderated with the figure's own as in limma's moderated t (:func:`resolve`). The configured tolerance
is a floor under the gate, never a ceiling: a figure that drifts 20% run to run gets a wide gate, one
that varies 0.5% the tolerance. A figure whose noise nothing measured (one run, no pool) has no gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

#: The chance that a run with no change fails anywhere (family-wise, Bonferroni over the run's figures).
FAMILY_ALPHA = 0.05
#: How many degrees of freedom the pooled spread of a figure's kind may weigh, against its own runs.
PRIOR_DF = 8
#: How many identical runs show a figure is exact (an accuracy at 1.0 in two runs may just be at its ceiling).
IDENTICAL_RUNS = 5
#: Compile time is one sample per process of CPU-bound work a busy host stretches: never gated tighter.
COMPILE_TIME_TOLERANCE = 0.25
#: Accuracies: tight enough that a 5-point drop from 0.9 is a change (5.6%), wide enough for one
#: differently classified image in a few hundred.
ACCURACY_TOLERANCE = 0.03


def floor_for(metric: str, run: float, marker: float | None = None, explicit: float | None = None) -> float:
    """The tolerance a figure is held to at least: ``dlperf.check(tolerance=)`` wins; a ``tolerance``
    marker widens the run's tolerance (``--dlperf-tolerance``) and never narrows it; compile times
    are held no tighter than :data:`COMPILE_TIME_TOLERANCE`. Accuracies start from
    :data:`ACCURACY_TOLERANCE` instead of the run's: the run's tolerance is sized for timing drift,
    which does not move an accuracy."""
    if metric.startswith("accuracy"):
        run = ACCURACY_TOLERANCE
    floor = explicit if explicit is not None else max(run, marker) if marker is not None else run
    return max(floor, COMPILE_TIME_TOLERANCE) if metric.startswith("compile_time") else floor


def family_alpha(figures: int, family: float = FAMILY_ALPHA) -> float:
    """The per-figure level that keeps the chance of any false alarm among ``figures`` under ``family``."""
    return family / max(figures, 1)


def log_spread(values: Sequence[float]) -> tuple[float, int]:
    """(standard deviation of the log values, degrees of freedom) of a figure's recorded runs."""
    logs = [math.log(v) for v in values if v > 0]
    if len(logs) < 2:
        return 0.0, 0
    mean = sum(logs) / len(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)), len(logs) - 1


@dataclass(frozen=True)
class Pool:
    """The pooled run-to-run spread of one kind of figure (log scale) and its degrees of freedom."""

    spread: float
    df: int


def pools(records: Iterable[tuple[str, str, Sequence[float]]]) -> dict[tuple[str, str], Pool]:
    """Pooled spreads by (metric, framework) from ``(metric, framework, runs)`` of a baseline file."""
    sums: dict[tuple[str, str], tuple[float, int]] = {}
    for metric, framework, runs in records:
        s, df = log_spread(runs)
        if df:
            ss, total = sums.get((metric, framework), (0.0, 0))
            sums[(metric, framework)] = (ss + df * s * s, total + df)
    return {kind: Pool(math.sqrt(ss / df), df) for kind, (ss, df) in sums.items()}


@dataclass(frozen=True)
class Gate:
    """How far a figure may move, as a fraction, and what that rests on."""

    #: The configured tolerance: changes smaller than this are never called, whatever the noise.
    floor: float
    #: The figure's run-to-run spread (log scale) used, or None when nothing measured it.
    noise: float | None
    #: Degrees of freedom behind ``noise`` (its own runs plus the pool's weight).
    df: int
    #: Runs recorded for the figure.
    runs: int
    #: The per-figure level.
    alpha: float

    @property
    def known(self) -> bool:
        return self.noise is not None and self.df > 0

    @property
    def noise_bound(self) -> float | None:
        """The prediction bound for one more run, on the log scale; None when the noise is unknown."""
        if not self.known:
            return None
        return t_quantile(1 - self.alpha / 2, self.df) * (self.noise or 0.0) * math.sqrt(1 + 1 / max(self.runs, 1))

    @property
    def width(self) -> float | None:
        """The smallest change (a fraction, either way) this gate calls: what the figure can detect."""
        bound = self.noise_bound
        if bound is None:
            return None
        return max(self.floor, math.expm1(bound))

    def describe(self) -> str:
        if not self.known:
            return f"tolerance {self.floor:.1%}, noise unknown ({self.runs} recorded run{'s' * (self.runs != 1)})"
        return (f"gate {self.width:.1%} (tolerance {self.floor:.1%}; run-to-run spread {self.noise:.1%} over "
                f"{self.runs} run{'s' * (self.runs != 1)}, {self.df} df; alpha {self.alpha:.2g})")


def resolve(floor: float, runs: Sequence[float], pool: Pool | None, alpha: float) -> Gate:
    """The gate of a figure with these recorded ``runs``, its kind's ``pool`` and per-figure ``alpha``.

    The pool may only make a figure noisier than its own runs say, never quieter, and never vouches
    for a figure with one run: the figures of one kind are not alike enough for that (an A/A run
    failed when asynchronous SGD's accuracy, two runs 1.2% apart, borrowed the zero spread of the
    deterministic accuracies beside it).
    """
    own, own_df = log_spread(runs)
    prior_df = min(pool.df, PRIOR_DF) if pool is not None and pool.spread > own else 0
    if own_df == 0 or (own == 0 and own_df < IDENTICAL_RUNS - 1 and not prior_df):
        return Gate(floor, None, 0, len(runs), alpha)
    df = own_df + prior_df
    variance = (own_df * own * own + prior_df * (pool.spread ** 2 if pool else 0.0)) / df
    return Gate(floor, math.sqrt(variance), df, len(runs), alpha)


def geometric_mean(values: Sequence[float]) -> float:
    positive = [v for v in values if v > 0]
    if not positive:
        return sum(values) / len(values)
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


# ---------------------------------------------------------------------------
# Student's t, without SciPy (the TensorFlow and MXNet environments judge too)
# ---------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be between 0 and 1 (exclusive), got {p!r}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


def two_sided_p(log_change: float, gate: Gate) -> float | None:
    """The p-value of a run moved by ``log_change`` against the figure's recorded runs."""
    if not gate.known or not gate.noise:
        return None
    scale = gate.noise * math.sqrt(1 + 1 / max(gate.runs, 1))
    return 2.0 * (1.0 - t_cdf(abs(log_change) / scale, gate.df))


def unit_means(values: Sequence[float], units: Sequence[int]) -> list[float]:
    """The mean of ``values`` per unit, in the units' order of first appearance."""
    groups: dict[int, list[float]] = {}
    for value, unit in zip(values, units):
        groups.setdefault(unit, []).append(value)
    return [sum(g) / len(g) for g in groups.values()]
