"""``dlperf compare``: each figure of NEW judged against OLD with the rule the tests judge a figure against
its baseline (:func:`pytest_dlperf.judging.verdict.compare` on the per-round samples the reports carry),
in the direction the report records for the metric."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence, TextIO

from pytest_dlperf import text
from pytest_dlperf.judging.baselines import Baseline
from pytest_dlperf.judging.gates import Policy
from pytest_dlperf.judging.noise import PRIOR_DF, PRIORS, SHIFT_PRIORS, Spread, device_class, kind_of
from pytest_dlperf.judging.verdict import IMPROVEMENT, INCONCLUSIVE, OK, REGRESSION
from pytest_dlperf.judging.verdict import compare as verdict_compare
from pytest_dlperf.reports.combine import metrics_by_key
from pytest_dlperf.reports.junit import read_reports
from pytest_dlperf.reports.records import MetricRecord, ReportError, direction_of
from pytest_dlperf.result import Metric
from pytest_dlperf.sample_stats import sample_stats
from pytest_dlperf.text import percent as _pct
from pytest_dlperf.units import count, show

UNJUDGED = "not judged (direction unknown)"
RECORDED = "recorded (the tests do not judge it)"
#: How the table shows each outcome (judging.outcomes' words; a regression in capitals, to be seen).
_SHOWN = {REGRESSION: "REGRESSION", IMPROVEMENT: "improvement", OK: "no change", INCONCLUSIVE: "inconclusive"}


@dataclass(frozen=True)
class Change:
    """One metric of OLD against NEW, judged as the tests judge a figure against its baseline."""

    status: str
    delta: float | None
    #: The change for the worse the decision catches 19 times in 20 (the given tolerance widened by the noise).
    tolerance: float | None = None
    p_value: float | None = None
    #: How it was judged: "samples" (verdict.compare), or "medians" for reports without samples.
    basis: str = "samples"
    #: The direction came from the metric's name because the reports do not record it.
    guessed_direction: bool = False


def _direction(old: MetricRecord, new: MetricRecord) -> tuple[str | None, bool]:
    recorded = new.declared_direction or old.declared_direction
    if recorded:
        return recorded, False
    return direction_of(new.metric), True


def judge(old: MetricRecord, new: MetricRecord, policy: Policy, history: Sequence[float] = ()) -> Change:
    """OLD is the baseline, NEW the measurement, judged with the tests' rule (``verdict.compare``).

    One report is one run: the noise a change is judged against is the run-to-run spread NEW's
    test recorded for the figure (its baseline history), when it recorded one; else the history's own
    runs, or the stated prior of its device class. "No change" only where the evidence bounds the change
    within the tolerance (:func:`pytest_dlperf.judging.verdict.outcome`). ``history``: the figure's values in
    earlier runs (``--history``), recorded runs beside OLD's. ``policy``: the tolerance and level
    asked for, where NEW's report does not record its test's own.
    """
    direction, guessed = _direction(old, new)
    delta = (new.value - old.value) / abs(old.value) if old.value else None
    if direction is None:
        return Change(UNJUDGED, delta, basis="-", guessed_direction=guessed)
    tolerance = policy.tolerance(new.metric)
    metric = Metric(name=new.metric, samples=new.samples or (new.value,), unit=new.unit, direction=direction,
                    estimate=new.value, interval=new.interval)
    baseline = Baseline(value=old.value, unit=old.unit, direction=direction, samples=old.samples,
                        iqr=sample_stats(old.samples).iqr if old.samples else 0.0, software={}, recorded="",
                        runs=(*history, old.value))
    # the figure's noise, degrees of freedom, level and tolerance as its test judged it, where the report
    # says; else what the plugin assumes of a figure of its kind on that device before anything is recorded
    shared = 0.0
    spread: Spread | None = None  # the history's own runs
    if new.noise is not None:
        tolerance = new.tolerance if new.tolerance is not None else tolerance
        spread = Spread(new.noise, new.df if new.df is not None else max((new.runs or 1) - 1, 0), "recorded noise")
    elif len(history) < 2:
        device = device_class(new.hardware or "")
        spread = Spread(PRIORS[device].get(kind_of(new.metric, new.unit), PRIORS[device]["throughput"]), PRIOR_DF,
                        f"stated {device} prior")
        shared = SHIFT_PRIORS[device].get(kind_of(new.metric, new.unit), SHIFT_PRIORS[device]["throughput"]) ** 2
    v = verdict_compare(new.test, new.label, metric, baseline, tolerance, spread=spread, shared=shared,
                        alpha=new.alpha if new.alpha is not None else policy.figure_alpha)
    basis = spread.source if spread is not None else "recorded noise"
    # the gate as the tests' reports give it: the change for the worse caught 19 times in 20
    return Change(v.status, v.delta, v.gate if v.gate is not None else v.tolerance, v.p_value,
                  basis=basis, guessed_direction=guessed)


def compare_rows(old: dict[tuple[str, str, str], MetricRecord], new: dict[tuple[str, str, str], MetricRecord],
                 threshold: float, history: dict[tuple[str, str, str], list[float]] | None = None,
                 ) -> tuple[list[tuple[str, ...]], Counter[str]]:
    rows: list[tuple[str, ...]] = []
    counts: Counter[str] = Counter()
    policy = Policy(threshold)
    for key in sorted(set(old) | set(new)):
        o, n = old.get(key), new.get(key)
        test, label, metric = key
        name = f"{test.split('::', 1)[-1]}::{label}"
        if o is None or n is None:
            status = "only in OLD" if n is None else "only in NEW"
            counts[status] += 1
            rows.append((name, metric, show(o.value, o.unit) if o else "-",
                         show(n.value, n.unit) if n else "-", "-", "-", status))
            continue
        if not (o.verdict or n.verdict):  # recorded only, as step time or TFLOP/s beside the throughput
            counts[RECORDED] += 1
            rows.append((name, metric, show(o.value, o.unit), show(n.value, n.unit),
                         _pct((n.value - o.value) / abs(o.value) if o.value else None), "-", RECORDED))
            continue
        change = judge(o, n, policy, (history or {}).get(key, ()))
        counts[change.status] += 1
        counts["basis:" + change.basis] += 1 if change.status != UNJUDGED else 0
        counts["guessed"] += change.guessed_direction and change.status != UNJUDGED
        notes = [f"p={change.p_value:.3f}"] if change.p_value is not None and change.status != OK else []
        if change.basis.startswith("stated") and change.status == INCONCLUSIVE:
            notes.append("noise not recorded: a stated prior")
        if change.guessed_direction and change.status != UNJUDGED:
            notes.append("direction from name")
        tol = f"±{change.tolerance:.1%}" if change.tolerance is not None else "-"
        rows.append((name, metric, show(o.value, o.unit), show(n.value, n.unit), _pct(change.delta), tol,
                     _SHOWN.get(change.status, change.status) + (f" ({', '.join(notes)})" if notes else "")))
    return rows, counts


def compare(old_path: str, new_path: str, threshold: float, history_paths: Sequence[str], out: TextIO) -> int:
    """Print the table of OLD against NEW and its counts; the number of regressions."""
    old_tests, new_tests = read_reports([old_path]), read_reports([new_path])
    old, new = metrics_by_key(old_tests), metrics_by_key(new_tests)
    old_hw = {t.hardware for t in old_tests if t.hardware}
    new_hw = {t.hardware for t in new_tests if t.hardware}
    if old_hw and new_hw and old_hw != new_hw:
        print(f"note: the reports come from different machines ({', '.join(sorted(old_hw))} vs "
              f"{', '.join(sorted(new_hw))}); differences may be the hardware's", file=out)
    if not set(old) & set(new):
        raise ReportError(f"{old_path} and {new_path} have no metric in common (same test, scenario label and "
                          "metric name); compare two runs of the same tests")
    history: dict[tuple[str, str, str], list[float]] = {}
    for path in history_paths:
        for key, record in metrics_by_key(read_reports([path])).items():
            history.setdefault(key, []).append(record.value)
    rows, counts = compare_rows(old, new, threshold, history)
    for line in text.table(("scenario", "metric", "old", "new", "delta", "tolerance", "change"), rows):
        print(line, file=out)
    judged = counts[REGRESSION] + counts[IMPROVEMENT] + counts[OK] + counts[INCONCLUSIVE]
    print("", file=out)
    print(f"{count(judged, 'metric')} compared (tolerance {threshold:.1%}, the tests' rule): "
          f"{count(counts[REGRESSION], 'regression')}, {count(counts[IMPROVEMENT], 'improvement')}, "
          f"{counts[OK]} no change, {counts[INCONCLUSIVE]} inconclusive; "
          f"{counts[UNJUDGED]} not judged, {counts[RECORDED]} recorded only (not judged by the tests either), "
          f"{counts['only in OLD']} only in {old_path}, "
          f"{counts['only in NEW']} only in {new_path}.", file=out)
    print("Judged as the tests judge a figure against its baseline (OLD as the baseline, one run): a change "
          "beyond the tolerance is a regression or an improvement only beyond the figure's own run-to-run "
          "noise, and no change only where that noise bounds the change within the tolerance, at the level "
          "and tolerance NEW's test judged it (recorded in the report); where NEW recorded none, at the stated "
          "prior of its device class (docs/verdicts.md).", file=out)
    if counts["guessed"]:
        print(f"note: {counts['guessed']} metrics have no recorded direction (an older report): which way is "
              "better was taken from the metric's name.", file=out)
    return counts[REGRESSION]
