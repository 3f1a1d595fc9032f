"""pytest-benchmark integration: every scenario's per-round step times as a pytest-benchmark benchmark.

Registered as a plugin only when pytest-benchmark is installed and enabled (``plugin.pytest_configure``).
pytest-benchmark times callables itself and has no public API for times measured elsewhere (here: in
the training child, warm-up excluded, device synchronised); this module is the one place that reaches
into it: it builds the ``pytest_benchmark.stats.Metadata`` its ``benchmark`` fixture would build, fills
it with our rounds, and appends it to the session's ``benchmarks`` list, as the fixture does. From there
``--benchmark-json``, ``--benchmark-autosave``, ``--benchmark-compare(-fail)``, the terminal table and
``pytest-benchmark compare`` treat it like any other benchmark. The self-test passes with pytest-benchmark
4.0.0, 5.0.0 and 5.3.1 (``Metadata(fixture, iterations, options)`` is unchanged since 3.x); the extra
asks for 5.3.1, the first release whose own ``benchmark`` fixture works with pytest 9 (3.4.1 does not
even load there).

One benchmark per test and scenario label: ``fullname`` ``<node id>::<label>``, grouped by test function. A
datum is one timed round's mean step time (``round seconds / steps per round``, ``iterations`` = steps
per round, as pytest-benchmark records a round of several iterations); without round times (a
distributed job), the per-step times. ``extra_info`` carries the throughput, hardware key, scenario,
software and, after ``dlperf.check``, each judged metric's verdict.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Iterable

import pytest

from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.child.gpus import gpus

PLUGIN_NAME = "dlperf-benchmark"


def wanted(config: pytest.Config) -> bool:
    """pytest-benchmark is installed and loaded (``-p no:benchmark`` turns both off)."""
    return config.pluginmanager.hasplugin("benchmark")


def claim_of(item: pytest.Item) -> str:
    """The benchmark group of a test's scenarios: the test function, its parametrizations together
    (one table for a claim's precisions or models, not one table a row)."""
    return item.nodeid.split("[", 1)[0]


def round_times(result: Any) -> tuple[list[float], int]:
    """(durations of the timed rounds, steps per round); ([], 1) when the result has none."""
    rounds = result.details.get("round_seconds") or []
    steps = int(getattr(result.scenario, "steps_per_round", 0) or 0)
    if rounds and steps > 0:
        return [float(t) for t in rounds], steps
    step_time = result.metrics.get("step_time")
    return (list(step_time.samples), 1) if step_time is not None else ([], 1)


class BenchmarkExport:
    """Adds each recorded scenario to pytest-benchmark's session; contributes to its machine info."""

    def __init__(self, config: pytest.Config):
        self._config = config
        self._benchmarks: dict[tuple[str, str], Any] = {}
        self._environment: dict[str, Any] = {}

    def _session(self) -> Any:
        """pytest-benchmark's session object, or None where it is disabled (``--benchmark-disable``,
        under xdist unless ``--benchmark-enable``) or skipping."""
        bs = getattr(self._config, "_benchmarksession", None)
        if bs is None or getattr(bs, "disabled", True) or getattr(bs, "skip", False):
            return None
        return bs

    def add(self, item: pytest.Item, result: Any, software: dict[str, Any]) -> None:
        """One benchmark for ``result`` (a TrainingResult) of test ``item``."""
        bs = self._session()
        durations, iterations = round_times(result)
        if bs is None or not durations:
            return
        from pytest_benchmark.stats import Metadata

        label = result.label
        self._environment = self._environment or dict(result.environment)
        extra: dict[str, Any] = {"dlperf_scenario": result.scenario.describe(),
                                 "hardware": result.environment.get("hardware_key", ""), "software": software}
        if "throughput" in result.metrics:
            throughput = result.metrics["throughput"]
            extra.update(throughput=throughput.value, throughput_unit=throughput.unit)
        fixture = SimpleNamespace(name=f"{item.name}::{label}", fullname=f"{item.nodeid}::{label}",
                                  group=claim_of(item), param=label, params={"scenario": label}, extra_info=extra,
                                  cprofile_stats=None, has_error=False)
        options = {"timer": "dlperf training child (time.perf_counter, device synchronised)",
                   "disable_gc": False, "min_rounds": len(durations), "max_time": 0, "min_time": 0,
                   "warmup": int(getattr(result.scenario, "warmup_steps", 0) or 0)}
        bench = Metadata(fixture, iterations=iterations, options=options)
        for duration in durations:
            bench.update(duration)
        key = (item.nodeid, label)
        if key in self._benchmarks:  # a second run of one label in a test: the later figures stand
            bs.benchmarks.remove(self._benchmarks[key])
        self._benchmarks[key] = bench
        bs.benchmarks.append(bench)

    def add_verdicts(self, verdicts: Iterable[Any]) -> None:
        """Each judged metric's verdict into its scenario's ``extra_info`` (``{metric: status}``)."""
        for v in verdicts:
            bench = self._benchmarks.get((v.test, v.label))
            if bench is not None:
                bench.extra_info.setdefault("verdict", {})[v.metric] = v.status

    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_machine_info(self, config: pytest.Config, machine_info: dict[str, Any]) -> None:
        found = gpus()
        env = self._environment
        machine_info["dlperf"] = {
            "hardware_key": hardware_key("cuda") if found else hardware_key("cpu"),
            "cpu_hardware_key": hardware_key("cpu"),
            "gpus": [g.name for g in found],
            "gpu_driver": found[0].driver if found else env.get("gpu_driver"),
            "cuda_version": env.get("cuda_version"),
            "cudnn_version": env.get("cudnn_version"),
            "framework": env.get("framework"),
            "framework_version": env.get("framework_version"),
        }
