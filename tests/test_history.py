"""``dlperf history``: change points found by E-divisive means with a permutation test, on synthetic
series with known steps (the rates docs/history.md quotes) and on real reports with shifted figures."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from pytest_dlperf.judging import baselines
from pytest_dlperf.judging.gates import Policy
from pytest_dlperf.judging.judge import judge
from pytest_dlperf.reports import changepoints, cli, history
from pytest_dlperf.result import TrainingResult, metric_from
from pytest_dlperf.scenario import Scenario
from pytest_dlperf.figures import AB_FIELDS, LABEL_FIELDS, METRIC_FIELDS, PAIRED_FIELDS

DATA = Path(__file__).parent / "data" / "perf-torch.xml"

# The generator docs/history.md describes: SERIES series of LENGTHS runs, Gaussian noise of NOISE
# (relative standard deviation); a step series moves by +-step at a run with at least MARGIN runs on
# each side. A detection counts when a change point lies within +-1 run of the true one.
SERIES = 200
LENGTHS = (20, 40)
NOISE = 0.05
MARGIN = 5


def noise_series(rng: np.random.Generator) -> np.ndarray:
    n = int(rng.integers(LENGTHS[0], LENGTHS[1] + 1))
    return 100.0 * (1 + NOISE * rng.standard_normal(n))


def step_series(rng: np.random.Generator, step: float) -> tuple[np.ndarray, int]:
    x = noise_series(rng)
    at = int(rng.integers(MARGIN, len(x) - MARGIN + 1))
    x[at:] *= 1 + (step if rng.random() < 0.5 else -step)
    return x, at


def false_alarms(max_pvalue: float, seed: int = 1) -> int:
    """How many of SERIES no-change series get a change point."""
    rng = np.random.default_rng(seed)
    return sum(bool(changepoints.change_points(noise_series(rng), max_pvalue, seed=k)) for k in range(SERIES))


def detections(step: float, max_pvalue: float, seed: int = 2) -> int:
    """How many of SERIES step series get a change point within +-1 run of their step."""
    rng = np.random.default_rng(seed)
    found = 0
    for k in range(SERIES):
        x, at = step_series(rng, step)
        found += any(abs(i - at) <= 1 for i, _ in changepoints.change_points(x, max_pvalue, seed=k))
    return found


# --- the method ----------------------------------------------------------------------------------

def test_the_statistic_is_the_energy_distance_of_the_two_sides() -> None:
    x = np.random.default_rng(0).standard_normal(12)

    def q(t: int, k: int) -> float:  # Matteson and James (2014), alpha = 1, written out pair by pair
        left, right = x[:t], x[t:k]
        a, b = len(left), len(right)
        cross = sum(abs(u - v) for u in left for v in right)
        within_left = sum(abs(left[i] - left[j]) for i in range(a) for j in range(i + 1, a))
        within_right = sum(abs(right[i] - right[j]) for i in range(b) for j in range(i + 1, b))
        return a * b / (a + b) * (2 * cross / (a * b) - within_left / (a * (a - 1) / 2)
                                  - within_right / (b * (b - 1) / 2))

    grid = changepoints.q_grid(x[None], min_size=3)[0]
    for t in range(13):
        for k in range(13):
            if t >= 3 and k - t >= 3:
                assert grid[t, k] == pytest.approx(q(t, k))
            else:
                assert np.isneginf(grid[t, k])
    best = changepoints.qhats(x[None], min_size=3)[0]
    assert best[3:10] == pytest.approx([max(q(t, k) for k in range(t + 3, 13)) for t in range(3, 10)])


def test_a_side_of_one_run_has_no_within_term_and_min_size_one_finds_a_step() -> None:
    x = np.array([1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.02, 0.98, 1.0, 5.0])
    grid = changepoints.q_grid(x[None], min_size=1)[0]
    assert np.isfinite(grid[10, 11])  # the right side is the one run 5.0
    cross = np.abs(x[:10] - 5.0).sum()
    within = sum(abs(x[i] - x[j]) for i in range(10) for j in range(i + 1, 10))
    assert grid[10, 11] == pytest.approx(10 / 11 * (2 * cross / 10 - within / 45))
    step = 100.0 * (1 + 0.02 * np.random.default_rng(3).standard_normal(24))
    step[12:] *= 1.5
    assert [i for i, _ in changepoints.change_points(step, min_size=1)] == [12]


def test_false_alarms_on_noise_stay_within_the_significance() -> None:
    # a no-change series is flagged only if the first split passes the test, so about p of them
    # are; the bounds leave room for a 200-series sample, and a test 50x too liberal (p <= 0.05)
    # breaks the first (docs/history.md has the rates at several levels)
    assert false_alarms(0.001) <= 0.02 * SERIES
    assert false_alarms(0.01) <= 0.03 * SERIES


@pytest.mark.parametrize("step, max_pvalue, at_least", [
    (0.10, 0.001, 0.30),  # a 2-sigma step; docs/history.md has the measured rates
    (0.10, 0.01, 0.55),
    (0.15, 0.001, 0.70),
    (0.20, 0.001, 0.90),  # a 4-sigma step
])
def test_steps_are_found_at_their_run(step: float, max_pvalue: float, at_least: float) -> None:
    assert detections(step, max_pvalue) >= at_least * SERIES


def test_a_step_that_reverts_did_not_persist_and_sizes_are_relative() -> None:
    rng = np.random.default_rng(5)
    values = np.concatenate([100 * (1 + 0.01 * rng.standard_normal(10)), 120 * (1 + 0.01 * rng.standard_normal(8)),
                             100 * (1 + 0.01 * rng.standard_normal(10))])
    series = history.Series("perf_tests/test_x.py::test_a", "fp32", "throughput", "samples/s", "higher",
                            [history.Point(float(v), dt.datetime(2026, 1, 1 + i, tzinfo=dt.timezone.utc), "r")
                             for i, v in enumerate(values)], hardware="hw")
    up, down = history.analyse(series).changes
    assert (up.index, down.index) == (10, 18)
    assert up.size == pytest.approx(0.20, abs=0.02) and down.size == pytest.approx(-1 / 6, abs=0.02)
    assert not up.persisted and down.persisted
    assert up.p <= changepoints.MAX_PVALUE


def test_a_series_too_short_to_reach_the_significance_is_not_analysed() -> None:
    from math import comb

    for p in (0.001, 0.01):  # the shortest n where the shuffles that split as a step does are rare enough
        n = changepoints.min_runs(p)
        assert 2 / comb(n, changepoints.MIN_SEGMENT) <= p < 2 / comb(n - 1, changepoints.MIN_SEGMENT)
    when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    short = changepoints.min_runs() - 1
    clean_step = [1.0] * (short - changepoints.MIN_SEGMENT) + [5.0] * changepoints.MIN_SEGMENT
    a = history.analyse(history.Series("t", "l", "throughput", hardware="hw", points=[
        history.Point(v, when, "r") for v in clean_step]))
    assert a.too_short and a.changes == []
    assert f"too few runs (fewer than {short + 1})" in history.table([a])[2]


# --- real reports --------------------------------------------------------------------------------

_NOT_VALUES = set(METRIC_FIELDS) | set(LABEL_FIELDS) | set(AB_FIELDS) | set(PAIRED_FIELDS) | {"hardware"}


def variant(dest: Path, scale: dict[str, float], jitter: float, rng: np.random.Generator,
            timestamp: str | None) -> Path:
    """tests/data/perf-torch.xml with every figure times (1 + jitter * N(0,1)), those whose
    ``dlperf.<label>.<metric>`` name is in ``scale`` times that too, and the suite's timestamp set."""
    tree = ET.parse(DATA)
    for prop in tree.iter("property"):
        name = prop.get("name", "").rpartition("::")[2]
        parts = name.split(".")
        if len(parts) < 3 or parts[-1] in _NOT_VALUES:
            continue
        try:
            value = float(prop.get("value", ""))
        except ValueError:
            continue  # a note such as dlperf.<label>.settings
        prop.set("value", f"{value * scale.get(name, 1.0) * (1 + jitter * rng.standard_normal()):.6g}")
    for suite in tree.iter("testsuite"):
        if timestamp is None:
            suite.attrib.pop("timestamp", None)
        else:
            suite.set("timestamp", timestamp)
    tree.write(dest, encoding="utf-8", xml_declaration=True)
    return dest


SHIFTED = "dlperf.fp32.throughput"


def runs(folder: Path, count: int = 20, change_at: int = 10, factor: float = 0.85, stamped: bool = True) -> Path:
    """``count`` runs in ``folder`` (named so that name order is not time order), 2% noise, the fp32
    throughput ``factor`` times from run ``change_at`` (0-based) on."""
    rng = np.random.default_rng(7)
    folder.mkdir()
    start = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.timezone.utc)
    for i in range(count):
        when = start + dt.timedelta(days=i)
        path = variant(folder / f"run-{(i * 7) % count:02d}.xml", {SHIFTED: factor} if i >= change_at else {},
                       0.02, rng, when.isoformat() if stamped else None)
        os.utime(path, (when.timestamp(), when.timestamp()))
    return folder


def test_history_of_real_reports_names_the_run_where_a_figure_changed(tmp_path, capsys) -> None:
    folder = runs(tmp_path / "runs")
    code = cli.main(["history", str(folder)])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["figure", "runs", "last"]
    first = lines[2]  # changed figures first
    assert "test_cpu_precisions_train_and_hold_their_throughput[resnet18]::fp32 throughput" in first
    assert re.search(r"run 11 \(2026-11-11 03:00\)\s+-1[345]\.\d% \(worse\)\s+yes\s+0\.001", first), first
    changed = [line for line in lines[2:] if "run " in line and "(20" in line]
    assert len(changed) <= 1  # 2% noise elsewhere: no other figure changed
    assert "1 of 26 figures changed" in out
    assert out.count(" none ") >= 20


def test_history_orders_runs_by_file_time_without_a_timestamp(tmp_path, capsys) -> None:
    folder = runs(tmp_path / "runs", stamped=False)
    assert cli.main(["history", "--changed-only", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "fp32 throughput" in out.splitlines()[2] and "run 11 (2026-11-11 03:00)" in out


def test_history_of_baseline_runs(tmp_path, capsys) -> None:
    rng = np.random.default_rng(3)
    values = [float(v) for v in np.r_[100 * (1 + 0.02 * rng.standard_normal(10)),
                                                  110 * (1 + 0.02 * rng.standard_normal(10))]]
    entry = {"value": values[-1], "unit": "samples/s", "direction": "higher", "recorded": "2026-11-20T00:00:00Z",
             "runs": [{"value": v, "recorded": f"2026-11-{i + 1:02d}T00:00:00Z"} for i, v in enumerate(values)]}
    old = dict(entry)
    old.pop("runs")
    path = tmp_path / "cpu-x.json"
    path.write_text(json.dumps({"format": 1, "entries": {
        "perf_tests/test_a.py::test_b::fp32@default": {"throughput": entry, "step_time": old}}}), encoding="utf-8")
    assert cli.main(["history", str(path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"test_a\.py::test_b::fp32@default throughput\s+20\s+.*"
                     r"run (1[012]) \(2026-11-\1 00:00\)\s+\+\d+\.\d% "
                     r"\(better\)\s+yes", out), out
    assert "step_time" not in out  # no runs recorded: nothing to follow (the step is at run 11, +-1 run)


def record_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, values: Sequence[float],
                unit: str = "samples/s") -> Path:
    """Each of ``values`` recorded as one ``--update-baselines`` run of one throughput, as the plugin records
    it (judge, stage, flush; a run beyond its gate starts the judged runs again), minutes apart."""
    clock = (dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=i) for i in itertools.count())
    monkeypatch.setattr(baselines, "_now", lambda: next(clock).isoformat().replace("+00:00", "Z"))
    for value in values:
        result = TrainingResult(Scenario("torch", "resnet18"),
                                {"throughput": metric_from("throughput", [value * 0.995, value, value * 1.005], unit)},
                                [], {"hardware_key": "cpu-test-2cpu", "framework": "torch"})
        store = baselines.BaselineStore(tmp_path)
        judge(store, "perf_tests/test_a.py::test_b", "default", [("fp32", result.throughput, result)], Policy(0.05),
              update=True)
        store.flush()
    return tmp_path / "cpu-test-2cpu.json"


def test_history_of_a_baseline_file_finds_the_change_its_recordings_accepted(tmp_path, monkeypatch, capsys) -> None:
    """30 recorded runs, 15% slower from the 16th: that run was beyond its gate, so it started the judged runs
    again; the runs before it are kept for history, and dlperf history of the file finds the change there."""
    rng = np.random.default_rng(5)
    values = [float(v) for v in np.r_[100 * (1 + 0.01 * rng.standard_normal(15)),
                                      85 * (1 + 0.01 * rng.standard_normal(15))]]
    path = record_runs(tmp_path, monkeypatch, values)
    assert cli.main(["history", str(path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"test_a\.py::test_b::fp32@default throughput\s+30\s+.*run 16 \(2026-11-01 \d\d:\d\d\)\s+"
                     r"-1[456]\.\d% \(worse\)\s+yes", out), out


def test_the_verdict_judges_the_newest_runs_and_history_keeps_more(tmp_path, monkeypatch) -> None:
    values = [100.0 + i % 3 for i in range(baselines.KEPT_RUNS + 5)]
    path = record_runs(tmp_path, monkeypatch, values)
    rec = json.loads(path.read_text())["entries"]["perf_tests/test_a.py::test_b::fp32@default"]["throughput"]
    assert [r["value"] for r in rec["runs"]] == values[-baselines.JUDGED_RUNS:]
    assert [r["value"] for r in rec["older_runs"]] == values[-baselines.KEPT_RUNS:-baselines.JUDGED_RUNS]
    judged = baselines.BaselineStore(tmp_path)
    assert judged.lookup("cpu-test-2cpu", "perf_tests/test_a.py::test_b::fp32@default", "throughput").runs == \
        tuple(values[-baselines.JUDGED_RUNS:])
    assert [len(f.logs) for f in judged.noise("cpu-test-2cpu").figures.values()] == [baselines.JUDGED_RUNS]
    assert baselines.KEPT_RUNS >= 2 * changepoints.min_runs()

    record_runs(tmp_path, monkeypatch, [100.0], unit="batches/s")  # another quantity: its history starts anew
    rec = json.loads(path.read_text())["entries"]["perf_tests/test_a.py::test_b::fp32@default"]["throughput"]
    assert len(rec["runs"]) == 1 and "older_runs" not in rec


def test_html_report_shows_a_chart_per_changed_figure(tmp_path, capsys) -> None:
    folder = runs(tmp_path / "runs")
    newest = sorted(folder.glob("*.xml"), key=os.path.getmtime)[-1]
    assert cli.main(["html", str(newest), "--history", str(folder), "--out", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    section = page[page.index('<section id="changes">'):]
    assert section.count("<svg") == 1 and "stroke-dasharray" in section  # the marked change point
    svg = section[section.index("<svg"):section.index("</svg>") + 6]
    assert ET.fromstring(svg).tag.endswith("svg")  # well-formed, so a browser draws it
    assert "fp32 throughput" in section and "run 11" in section and "<rect" in section  # the noise bands
    assert "figures without a change" in section


@pytest.mark.parametrize("argv, message", [
    (["history", "{tmp}/absent.xml"], "absent.xml: no such file"),
    (["history", "{tmp}/bad.json"], "run 0: expected"),
    (["history", "{tmp}/empty"], "a folder without any .xml report"),
])
def test_bad_history_input_is_a_usage_error(tmp_path, capsys, argv, message) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.json").write_text(json.dumps({"entries": {"t::l@p": {"throughput": {"value": 1, "runs": [
        {"value": "fast"}]}}}}), encoding="utf-8")
    code = cli.main([a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("dlperf history: error: ") and message in err and err.count("\n") == 1


def test_max_pvalue_below_what_the_shuffles_can_show_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["history", "--max-pvalue", "0.0001", str(DATA)])
    assert exc.value.code == 2 and "[0.001, 1)" in capsys.readouterr().err
