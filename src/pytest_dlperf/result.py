"""What a training run measured, as the child reports it and the tests read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pytest_dlperf.scenario import Scenario
from pytest_dlperf.sample_stats import SampleStats, median, sample_stats

HIGHER = "higher"
LOWER = "lower"
SOFTWARE_KEYS = ("framework", "framework_version", "python", "cuda_version", "cudnn_version", "gpu_driver")


@dataclass(frozen=True)
class Metric:
    """One measured quantity: its samples, which way is better, and its unit."""

    name: str
    samples: tuple[float, ...]
    unit: str
    direction: str = HIGHER
    #: A paired comparison's estimate and confidence interval (``stats.PairedRatio``); None for plain samples.
    estimate: float | None = None
    interval: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.direction not in (HIGHER, LOWER):
            raise ValueError(f"direction must be {HIGHER!r} or {LOWER!r}, not {self.direction!r}")
        if not self.samples:
            raise ValueError(f"metric {self.name!r} has no samples")
        object.__setattr__(self, "samples", tuple(float(s) for s in self.samples))
        if self.interval is not None:
            object.__setattr__(self, "interval", (float(self.interval[0]), float(self.interval[1])))

    @property
    def stats(self) -> SampleStats:
        return sample_stats(self.samples)

    @property
    def value(self) -> float:
        return self.estimate if self.estimate is not None else self.stats.median

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"samples": list(self.samples), "unit": self.unit, "direction": self.direction}
        if self.interval is not None:
            data.update(estimate=self.estimate, interval=list(self.interval))
        return data

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Any]) -> "Metric":
        interval = data.get("interval")
        return cls(name=name, samples=tuple(data["samples"]), unit=data["unit"], direction=data["direction"],
                   estimate=data.get("estimate"), interval=tuple(interval) if interval else None)

    def __str__(self) -> str:
        s = self.stats
        return f"{self.name} {s.median:.4g} {self.unit} (median of {s.n}, IQR {s.iqr:.3g})"



@dataclass(frozen=True)
class FigureId:
    """Which figure: a test's scenario label and metric, on one machine (its hardware key). A verdict,
    a report's record of a figure and a figure's history over runs are each a figure id and more."""

    test: str
    label: str
    metric: str
    #: Keyword-only, so the types built on it keep their own fields positional after ``metric``;
    #: empty while the figure's machine is not known yet.
    hardware: str = field(default="", kw_only=True)

    @property
    def key(self) -> tuple[str, str, str]:
        """The figure whichever machine measured it: what two reports of one suite match on."""
        return (self.test, self.label, self.metric)

    @property
    def identity(self) -> tuple[str, str, str, str]:
        """The figure on its machine, hardware key first so that figures sort by machine."""
        return (self.hardware, *self.key)


@dataclass
class TrainingResult:
    """The child's report: metrics, loss curve, environment and the scenario itself."""

    scenario: Scenario
    metrics: dict[str, Metric]
    losses: list[float]
    environment: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.scenario.label

    @property
    def software(self) -> dict[str, Any]:
        """The software stack the figures were measured with (what a baseline records beside them)."""
        return {k: self.environment[k] for k in SOFTWARE_KEYS if self.environment.get(k) is not None}

    @property
    def throughput(self) -> Metric:
        return self.metric("throughput")

    def metric(self, name: str) -> Metric:
        try:
            return self.metrics[name]
        except KeyError:
            counted = (" (its steps were counted under Valgrind, measure='instructions': a count has no timing "
                       "figures; run this test without --dlperf-measure=instructions)"
                       if self.scenario.measure == "instructions" else "")
            raise KeyError(f"{self.label}: no metric {name!r}; measured: {sorted(self.metrics)}{counted}") from None

    def loss_fell(self, window: int = 5) -> bool:
        """The model trained: the median loss of the last ``window`` steps is below both the mean
        of the first ``window`` and the very first step's loss (the untrained model's).

        The second condition catches divergence: a run whose loss climbs from 2.3 to 40 and
        wanders can still end below its early mean by chance, never below the untrained loss.
        The median lets one late spike of a small-batch BatchNorm net (one batch, recovered the
        next step) not decide.
        """
        if len(self.losses) < 2 * window:
            window = max(1, len(self.losses) // 2)
        first = sum(self.losses[:window]) / window
        last = median(self.losses[-window:])
        return last < min(first, self.losses[0])

    def __repr__(self) -> str:
        return f"<TrainingResult {self.label}: {self.scenario.describe()}>"

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.to_dict(),
            "metrics": {name: m.to_dict() for name, m in self.metrics.items()},
            "losses": self.losses,
            "environment": self.environment,
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TrainingResult":
        return cls(
            scenario=Scenario.from_dict(data["scenario"]),
            metrics={name: Metric.from_dict(name, m) for name, m in data["metrics"].items()},
            losses=[float(x) for x in data.get("losses", [])],
            environment=dict(data.get("environment", {})),
            details=dict(data.get("details", {})),
        )

    def describe(self) -> str:
        lines = [self.scenario.describe()]
        lines += [f"  {m}" for m in self.metrics.values()]
        return "\n".join(lines)


def metric_from(name: str, samples: Sequence[float], unit: str, direction: str = HIGHER) -> Metric:
    return Metric(name=name, samples=tuple(samples), unit=unit, direction=direction)


def paired_metric(name: str, ratio: Any) -> Metric:
    """A ratio measured in pairs (``stats.PairedRatio``): per-pair ratios as samples, with estimate and interval."""
    return Metric(name=name, samples=tuple(ratio.ratios), unit="x", direction=HIGHER,
                  estimate=ratio.estimate, interval=(ratio.low, ratio.high))
