"""``dlperf.ledger``: what a test's figures become. It records results in the test's report, derives
figures (a speedup, a scaling efficiency), looks the stored baselines up and judges the figures
against them (:mod:`pytest_dlperf.judging.judge`); ``dlperf.check`` fails the test on its verdicts."""

from __future__ import annotations

from typing import Collection, Sequence

import pytest

from pytest_dlperf import cost, figures
from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.judging.baselines import Baseline, entry_key
from pytest_dlperf.judging.judge import judge
from pytest_dlperf.judging.stats import PairedRatio
from pytest_dlperf.judging.verdict import CHECKED_METRICS, Verdict
from pytest_dlperf.plugin import markers
from pytest_dlperf.plugin.session import DlperfSession
from pytest_dlperf.result import HIGHER, Metric, TrainingResult, metric_from, paired_metric


class Ledger:
    """One test's figures: recorded, derived, looked up and judged."""

    def __init__(self, session: DlperfSession, item: pytest.Item):
        self._session = session
        self._item = item
        self._profile = session.options.profile
        self._derived: list[tuple[str, Metric]] = []
        self._results: list[TrainingResult] = []

    @property
    def updating(self) -> bool:
        """``--update-baselines``: this run records its figures instead of being judged by them."""
        return bool(self._session.options.update)

    def record(self, result: TrainingResult) -> TrainingResult:
        """Add a result's figures to this test's report (``dlperf.run`` does it for its own results;
        ``dlperf.check`` for any result it is given that was not recorded yet)."""
        self._results.append(result)
        if self._session.benchmarks is not None:
            self._session.benchmarks.add(self._item, result, result.software)
        self._item.user_properties += figures.of_result(result)
        return result

    def metric(self, label: str, name: str, samples: Sequence[float], unit: str, direction: str = HIGHER) -> Metric:
        """A derived figure (a speedup, a scaling efficiency) checked with the others by ``dlperf.check``."""
        metric = metric_from(name, samples, unit, direction)
        self._add_derived(label, metric)
        return metric

    def speedup(self, label: str, ratio: PairedRatio, floor: float | None = None) -> Metric:
        """A paired ratio as the derived ``speedup`` metric: per-pair ratios, estimate and interval
        go to the baselines and are judged by ``dlperf.check`` with the other figures. ``floor``: the
        speedup the test claims (it asserts it itself), recorded so charts draw it."""
        metric = paired_metric("speedup", ratio)
        self._add_derived(label, metric)
        if floor is not None:
            self._item.user_properties += figures.of_floor(label, metric.name, floor)
        return metric

    def _add_derived(self, label: str, metric: Metric) -> None:
        self._derived.append((label, metric))
        self._item.user_properties += figures.of_derived(label, metric)

    def stored(self, result: TrainingResult, metric: str, label: str | None = None) -> Baseline | None:
        """The stored baseline of one of this test's figures on ``result``'s machine (``label``: a
        derived figure's, such as a speedup's), or None when none is recorded."""
        hw = result.environment.get("hardware_key", "unknown")
        return self._session.store.lookup(hw, entry_key(self._item.nodeid, label or result.label, self._profile),
                                          metric)

    def recorded_runs(self, test: str, label: str, metric: str, device: str = "cpu") -> tuple[float, ...]:
        """The run-level values recorded for ``label``'s ``metric`` in test ``test`` (a node id) on this host's
        ``device``, before anything runs: what a group shared by several tests needs to plan its processes."""
        found = self._session.store.lookup(hardware_key(device), entry_key(test, label, self._profile), metric)
        return tuple(found.runs) if found else ()

    def judge(self, results: Sequence[TrainingResult], tolerance: float | None = None,
              unjudged: Collection[str] = ()) -> list[Verdict]:
        """Every checked metric of ``results`` and every figure derived since the last call, against this
        machine's baselines (staged for writing with ``--update-baselines``); the verdicts go to the report.
        ``unjudged``: metrics kept in the report but neither held against nor written to the baselines
        (a figure that does not repeat, on which the test asserts its own claim).
        ``dlperf.check`` calls it and fails the test on them."""
        options = self._session.options
        nodeid = self._item.nodeid
        unknown = sorted(set(unjudged) - set(CHECKED_METRICS))
        if unknown:
            pytest.fail(f"{nodeid}: dlperf.check(unjudged=...): {', '.join(unknown)} is not a judged metric; "
                        f"judged: {', '.join(CHECKED_METRICS)}", pytrace=False)
        for result in results:  # e.g. a distributed job's: every judged figure is in the report with its value
            if not any(result is seen for seen in self._results):
                self.record(result)
        pending: list[tuple[str, Metric, TrainingResult]] = [
            (r.label, m, r) for r in results for m in r.metrics.values()
            if m.name in CHECKED_METRICS and m.name not in unjudged
        ]
        anchor = results[0] if results else (self._results[0] if self._results else None)
        if anchor is None:
            pytest.fail(f"{nodeid}: dlperf.check() needs at least one result from dlperf.run()", pytrace=False)
        pending += [(label, m, anchor) for label, m in self._derived]
        with cost.timed(cost.JUDGE):
            verdicts = judge(self._session.store, nodeid, self._profile, pending,
                             self._session.policy(markers.tolerance_of(self._item).for_metric, tolerance),
                             update=bool(options.update))
        for verdict in verdicts:
            self._item.user_properties += figures.of_verdict(verdict)
        self._derived.clear()
        self._session.verdicts += verdicts
        if self._session.benchmarks is not None:
            self._session.benchmarks.add_verdicts(verdicts)
        return verdicts
