"""What a report says of one test and of one figure: the records every ``dlperf`` command works on.

:mod:`.junit` reads them from JUnit XML reports; :mod:`.combine` merges one test's records across reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_dlperf.result import HIGHER, LOWER, FigureId


#: Name fragments that say which way is better, checked in this order (``time_to_accuracy`` is a time).
_LOWER_WORDS = ("time", "memory", "latency", "seconds", "bytes")
_HIGHER_WORDS = ("throughput", "speedup", "accuracy", "efficiency", "tflops", "flops", "samples_per")


class ReportError(Exception):
    """A report that can't be used: missing, not JUnit XML, or without dlperf figures."""


def direction_of(metric: str) -> str | None:
    """Which way is better for a metric named ``metric``; None when the name doesn't say."""
    name = metric.lower()
    if any(word in name for word in _LOWER_WORDS):
        return LOWER
    if any(word in name for word in _HIGHER_WORDS):
        return HIGHER
    return None


@dataclass(frozen=True)
class MetricRecord(FigureId):
    """One metric of one scenario of one test, as the report holds it."""

    value: float
    unit: str = ""
    iqr: float | None = None
    n: int | None = None
    verdict: str | None = None
    baseline: float | None = None
    declared_direction: str | None = None
    source: str = ""
    #: A paired ratio's 95% interval (low, high).
    interval: tuple[float, float] | None = None
    #: Every timed round's figure (reports since samples were recorded; empty in older ones).
    samples: tuple[float, ...] = ()
    #: The tolerance asked for (the least the figure's gate can be), as a fraction.
    tolerance: float | None = None
    #: The figure the test claims at least (a speedup's floor), where the test recorded one.
    floor: float | None = None
    #: The change for the worse its gate catches 19 times in 20, as a fraction; None when unknown.
    detectable: float | None = None
    #: The figure's run-to-run spread (log scale) the gate rested on, and how many runs were recorded.
    noise: float | None = None
    runs: int | None = None
    #: The degrees of freedom behind ``noise`` and the one-sided level the figure was judged at.
    df: float | None = None
    alpha: float | None = None

    @property
    def direction(self) -> str | None:
        return self.declared_direction or direction_of(self.metric)

    @property
    def delta(self) -> float | None:
        """Signed relative change against the baseline (+0.10 = 10% larger)."""
        if self.baseline is None or self.baseline == 0:
            return None
        return (self.value - self.baseline) / abs(self.baseline)


@dataclass
class TestRecord:
    """One ``<testcase>``: its outcome and the dlperf figures it carries."""

    test: str
    outcome: str  # passed | failed | error | skipped
    message: str = ""
    hardware: str = ""
    metrics: list[MetricRecord] = field(default_factory=list)
    scenarios: dict[str, str] = field(default_factory=dict)
    software: dict[str, str] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)
    #: A/B mode, per label: candidate/reference ratio, its interval, the decision, the reference's software.
    ab: dict[str, dict[str, str]] = field(default_factory=dict)
    source: str = ""

    @property
    def labels(self) -> list[str]:
        seen: dict[str, None] = {}
        for m in self.metrics:
            seen.setdefault(m.label, None)
        return list(seen)

