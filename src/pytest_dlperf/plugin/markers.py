"""The suite's markers: registration, strict argument checks, and the skips they imply."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Mapping

import pytest

from pytest_dlperf.child.gpus import gpus
from pytest_dlperf.child.cores.mxnet_support import unsupported_gpu
from pytest_dlperf.scenario import FRAMEWORKS, INSTALL_HINTS, PRECISIONS

# The judged metrics (pytest_dlperf.judging.verdict, scipy with it) and the netns rate check
# (pytest_dlperf.processes.distributed, numpy with it) are imported by the checks of the markers that
# need them: every pytest run validates its tests' markers.

LAUNCHERS = ("local", "ssh", "mpi", "slurm", "sge", "netns")

MARKERS = {
    "gpu": "gpu(count=1): needs COUNT visible CUDA devices, else skipped; the gpu fixture holds them",
    "precision": "precision(*names): one test per precision, each given to the precision fixture; names from "
                 + ", ".join(PRECISIONS),
    "framework": "framework(name): the framework the test trains with; skipped with an install hint when "
                 "it is missing; one of " + ", ".join(FRAMEWORKS),
    "distributed": "distributed(workers=2, launcher=None, rate=None): the hosts the distributed fixture "
                   "gives the test; launcher one of " + ", ".join(LAUNCHERS) + " (None: --dlperf-launcher); "
                   "rate (netns only) limits each host's link, e.g. '1gbit'",
    "slow": "slow: takes minutes on a 2-core CPU even in the smoke profile; -m 'not slow' leaves it out "
            "(tox -m ci does, for per-push CI)",
    "tolerance": "tolerance(fraction=None, **per_metric): how loosely this test's figures are at least held, "
                 "e.g. tolerance(0.15) for all, tolerance(throughput=0.5, speedup=0.5) for those metrics only",
}


def register(config: pytest.Config) -> None:
    for line in MARKERS.values():
        config.addinivalue_line("markers", line)


def _usage(item: pytest.Item, mark: Any, problem: str) -> pytest.UsageError:
    return pytest.UsageError(f"{item.nodeid}: @pytest.mark.{mark.name}: {problem} (usage: {MARKERS[mark.name]})")


def _one_of(item: pytest.Item, mark: Any, values: tuple[Any, ...], allowed: tuple[str, ...]) -> None:
    if not values:
        raise _usage(item, mark, "needs at least one argument")
    for value in values:
        if value not in allowed:
            raise _usage(item, mark, f"{value!r} is not allowed; allowed values: {', '.join(allowed)}")


def gpu_count_required(item: pytest.Item) -> int:
    mark = item.get_closest_marker("gpu")
    if mark is None:
        return 0
    if len(mark.args) > 1 or set(mark.kwargs) - {"count"} or (mark.args and "count" in mark.kwargs):
        raise _usage(item, mark, f"unexpected arguments {mark.args} {mark.kwargs}")
    count = mark.args[0] if mark.args else mark.kwargs.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise _usage(item, mark, f"count={count!r} must be a whole number >= 1")
    return count


def check_precision(item: Any, mark: Any) -> None:
    _one_of(item, mark, mark.args, PRECISIONS)
    if mark.kwargs:
        raise _usage(item, mark, f"takes no keyword arguments, got {sorted(mark.kwargs)}")


def distributed_args(item: Any, mark: Any) -> tuple[int, str | None, str | None]:
    """``(workers, launcher or None, rate or None)`` of a ``distributed`` marker, checked."""
    unknown = set(mark.kwargs) - {"workers", "launcher", "rate"}
    if mark.args or unknown:
        raise _usage(item, mark, f"takes only workers=, launcher= and rate=, got {mark.args} {sorted(unknown)}")
    workers = mark.kwargs.get("workers", 2)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise _usage(item, mark, f"workers={workers!r} must be a whole number >= 1")
    launcher = mark.kwargs.get("launcher")
    if launcher is not None:
        _one_of(item, mark, (launcher,), LAUNCHERS)
    rate = mark.kwargs.get("rate")
    if rate is not None:
        if launcher != "netns":
            raise _usage(item, mark, f"rate={rate!r} needs launcher='netns' (it shapes the namespaces' links)")
        from pytest_dlperf.processes.distributed.netns import validate_rate

        try:
            validate_rate(rate)
        except ValueError as exc:
            raise _usage(item, mark, str(exc)) from None
    return workers, launcher, rate


def _needs_fixture(item: pytest.Item, mark: Any) -> None:
    if mark.name not in getattr(item, "fixturenames", ()):
        raise _usage(item, mark, f"drives the {mark.name} fixture, which this test does not ask for: add a "
                                 f"{mark.name!r} argument to the test, or remove the marker")


@dataclass(frozen=True)
class MarkedTolerance:
    """A ``tolerance`` marker: one fraction for every figure of the test, and/or one per metric name
    (a noisy throughput need not loosen memory and accuracy along with it)."""

    every: float | None = None
    per_metric: Mapping[str, float] = field(default_factory=dict)

    def for_metric(self, name: str) -> float | None:
        return self.per_metric.get(name, self.every)


def _fraction(item: pytest.Item, mark: Any, value: Any, what: str = "") -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 1:
        raise _usage(item, mark, f"{what}{value!r} must be a fraction between 0 and 1")
    return float(value)


def tolerance_of(item: pytest.Item) -> MarkedTolerance:
    """The test's ``tolerance`` marker: ``tolerance(0.15)``, ``tolerance(throughput=0.5)``, or both."""
    mark = item.get_closest_marker("tolerance")
    if mark is None:
        return MarkedTolerance()
    if len(mark.args) > 1 or (not mark.args and not mark.kwargs):
        raise _usage(item, mark, "takes one fraction for every figure and/or metric=fraction keywords, "
                                 "e.g. tolerance(0.15) or tolerance(throughput=0.5)")
    from pytest_dlperf.judging.verdict import CHECKED_METRICS

    unknown = sorted(set(mark.kwargs) - set(CHECKED_METRICS))
    if unknown:
        raise _usage(item, mark, f"{', '.join(unknown)}: not a judged metric; judged: {', '.join(CHECKED_METRICS)}")
    every = _fraction(item, mark, mark.args[0]) if mark.args else None
    return MarkedTolerance(every, {name: _fraction(item, mark, value, f"{name}=")
                                   for name, value in mark.kwargs.items()})


def frameworks_of(item: pytest.Item) -> tuple[str, ...]:
    return tuple(a for m in item.iter_markers("framework") for a in m.args)


def validate(item: pytest.Item) -> list[str]:
    """Raise a usage error for a malformed marker; return the reasons to skip ``item``."""
    skips: list[str] = []
    for mark in item.iter_markers():
        if mark.name == "precision":
            check_precision(item, mark)
            _needs_fixture(item, mark)
        elif mark.name == "framework":
            if len(mark.args) != 1 or mark.kwargs:
                raise _usage(item, mark, "takes exactly one framework name")
            _one_of(item, mark, mark.args, FRAMEWORKS)
            module, hint = INSTALL_HINTS[mark.args[0]]
            if importlib.util.find_spec(module) is None:
                skips.append(f"{mark.args[0]} is not installed in this environment: {hint}")
        elif mark.name == "distributed":
            distributed_args(item, mark)
            _needs_fixture(item, mark)
        elif mark.name == "slow" and (mark.args or mark.kwargs):
            raise _usage(item, mark, "takes no arguments")
    # a test's own parametrized argument of one of these names is its value, not the plugin's fixture
    parametrized = getattr(getattr(item, "callspec", None), "params", {})
    for name in ("gpu", "precision", "distributed"):
        if (name in getattr(item, "fixturenames", ()) and name not in parametrized
                and item.get_closest_marker(name) is None):
            raise pytest.UsageError(f"{item.nodeid}: the {name} fixture needs @pytest.mark.{name} on the test "
                                    f"(usage: {MARKERS[name]})")
    tolerance_of(item)
    needed = gpu_count_required(item)
    if needed:
        found = len(gpus())
        if found < needed:
            skips.append(f"needs {needed} CUDA device(s), found {found}: run it on a GPU runner (pytest -m gpu)")
        elif "mxnet" in frameworks_of(item):
            reason = unsupported_gpu()
            if reason:
                skips.append(reason)
    return skips
