"""The charts: what each one holds, that a long test file gets parts, and where worker counts come from."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib", reason="the charts need matplotlib")

from pytest_dlperf.reports import plots  # noqa: E402
from pytest_dlperf.reports.records import MetricRecord  # noqa: E402
from pytest_dlperf.reports.records import TestRecord as Record  # noqa: E402  (not a test class)


def metric(label: str, name: str = "throughput", value: float = 100.0, baseline: float | None = 100.0,
           test: str = "perf_tests/test_x.py::test_y", **kw: object) -> MetricRecord:
    return MetricRecord(test=test, label=label, metric=name, value=value, unit=kw.pop("unit", "samples/s"),
                        baseline=baseline, hardware="cpu-test", **kw)  # type: ignore[arg-type]


def texts(chart: plots.Chart) -> list[str]:
    fig = chart.figure
    out = [t.get_text() for t in fig.findobj(match=lambda a: hasattr(a, "get_text"))]
    return [t for t in out if t]


def test_a_delta_chart_puts_every_judged_figure_in_its_tolerance_band():
    ms = [metric("fp32", value=80.0, verdict="regression", tolerance=0.1, iqr=4.0),
          metric("bf16", value=2.0e9, baseline=1.9e9, name="peak_host_memory", unit="bytes", verdict="ok",
                 tolerance=0.1, declared_direction="lower"),
          metric("fast_vs_slow", name="speedup", value=2.1, baseline=2.0, unit="x", verdict="ok",
                 interval=(2.0, 2.2), tolerance=0.05)]
    chart = plots.delta_chart(ms, "deltas-x.png", "title")
    words = texts(chart)
    assert "80 samples/s vs 100 samples/s  -20.0%  ±10%  regression" in words
    assert "1.863 GiB vs 1.77 GiB  +5.3%  ±10%  ok" in words  # bytes in GiB
    assert any("peak_host_memory (lower is better)" in w for w in words)
    ax = chart.figure.axes[0]
    # The bars are the deltas in percent; the x axis holds them with their whiskers.
    bars = sorted(round(p.get_width(), 1) for p in ax.patches if p.get_height() == pytest.approx(0.55))
    assert bars == [-20.0, -5.3, 5.0]  # the memory grew: worse, so left of 0
    low, high = ax.get_xlim()
    assert low < -22 and high > 22


def test_a_long_test_file_gets_parts_and_the_chart_grows_with_its_rows():
    ms = [metric(f"s{i}", value=100.0 + i, verdict="ok", tolerance=0.1) for i in range(plots.MAX_ROWS + 3)]
    charts = plots.charts([Record("perf_tests/test_x.py::test_y", "passed", metrics=ms)])
    assert [c.name for c in charts] == ["deltas-test_x-1.png", "deltas-test_x-2.png"]
    tall, short = (c.figure.get_figheight() for c in charts)
    assert tall / plots.MAX_ROWS >= plots.ROW_INCHES and short < tall
    # Every tick label is at least 9 pt: readable at the PNG's own size (100 dpi).
    for chart in charts:
        sizes = {t.get_fontsize() for t in chart.figure.axes[0].get_yticklabels()}
        assert min(sizes) >= 9


def test_speedups_show_interval_baseline_and_the_claimed_floor():
    ms = [metric("amp_vs_fp32", name="speedup", value=1.6, baseline=2.0, unit="x", verdict="regression",
                 interval=(1.5, 1.7), floor=1.8)]
    charts = plots.charts([Record("perf_tests/test_x.py::test_y", "failed", metrics=ms)])
    names = [c.name for c in charts]
    assert names == ["deltas-test_x.png", "speedups-test_x.png"]
    words = texts(charts[1])
    assert "1.6x [1.5, 1.7]  baseline 2x  claim ≥ 1.8x  regression" in words
    assert "claimed floor" in words


@pytest.mark.parametrize("label, scenario, workers", [
    ("single_worker", "", 1), ("two_workers_loopback", "", 2), ("workers4", "", 4), ("job", "8 gpus", 8),
    ("fp32", "torch/resnet18 fp32 on cpu", None),
])
def test_worker_counts_come_from_the_property_else_the_label(label, scenario, workers):
    test = Record("t.py::t", "passed", scenarios={label: scenario})
    assert plots.workers_of(test, label) == workers
    test.workers[label] = 3
    assert plots.workers_of(test, label) == 3


def test_per_worker_throughput_scales_perfectly_when_it_holds():
    test = Record("perf_tests/test_distributed_torch.py::test_two_workers_scale_and_keep_accuracy[loopback]",
                      "passed", workers={"single_worker": 1, "two_workers_loopback": 2},
                      metrics=[metric("single_worker", value=40.0, unit="samples/s/worker"),
                               metric("two_workers_loopback", value=30.0, unit="samples/s/worker")])
    (chart,) = [c for c in plots.charts([test]) if c.name.startswith("scaling-")]
    assert chart.name == "scaling-test_distributed_torch.png"
    assert {"100%", "75%"} <= set(texts(chart))  # 30 per worker of 40: 75% efficiency, not 37.5%


def test_a_file_run_by_several_frameworks_gets_a_chart_per_framework():
    tests = [Record(f"perf_tests/test_cpu_tuning.py::test_cpu_setting_against_default[{fw}-default]", "passed",
                    software={"default": f"framework={fw} framework_version=1 python=3.11"},
                    metrics=[metric("default", test=f"perf_tests/test_cpu_tuning.py::t[{fw}]", verdict="ok",
                                    tolerance=0.1)])
             for fw in ("torch", "tensorflow", "mxnet")]
    names = [c.name for c in plots.charts(tests)]
    assert names == ["deltas-test_cpu_tuning_torch.png", "deltas-test_cpu_tuning_tensorflow.png",
                     "deltas-test_cpu_tuning_mxnet.png"]
    assert [c.name for c in plots.charts(tests[:1])] == ["deltas-test_cpu_tuning.png"]


def test_right_is_better_for_every_bar_and_the_axis_says_so():
    ms = [metric("fp32", name="step_time", value=0.8, baseline=1.0, unit="s", verdict="improvement",
                 tolerance=0.05, declared_direction="lower"),
          metric("fp32", value=80.0, verdict="regression", tolerance=0.05)]
    chart = plots.delta_chart(ms, "deltas-x.png", "title")
    ax = chart.figure.axes[0]
    bars = [round(p.get_width(), 1) for p in ax.patches if p.get_height() == pytest.approx(0.55)]
    assert bars == [20.0, -20.0]  # 20% less time is better: right; 20% less throughput is worse: left
    assert "right = better" in ax.get_xlabel() and "flipped" in ax.get_xlabel()


def test_test_names_are_wrapped_whole_never_cut():
    name = "test_cpu_precisions_train_and_hold_their_throughput_on_every_supported_backend[resnet18-amp_bf16]"
    wrapped = plots.wrap_name(name, 40)
    assert wrapped.replace("\n", "") == name and "..." not in wrapped
    assert max(len(line) for line in wrapped.splitlines()) <= 40
    chart = plots.delta_chart([metric("fp32", test=f"perf_tests/test_x.py::{name}", verdict="ok", tolerance=0.1)],
                              "deltas-x.png", "title")
    (label,) = [t.get_text() for t in chart.figure.axes[0].get_yticklabels()]
    assert label.split("\n", 1)[1].replace("\n", "") == f"test_x.py::{name}"


def test_whiskers_end_at_the_axis():
    ms = [metric("fp32", value=95.0, verdict="ok", tolerance=0.1, iqr=400.0),  # rounds spread far past the axis
          metric("bf16", value=120.0, verdict="improvement", tolerance=0.1, iqr=4.0)]
    ax = plots.delta_chart(ms, "deltas-x.png", "title").figure.axes[0]
    low, high = ax.get_xlim()
    ends = [x for line in ax.get_lines() for x in line.get_xdata()]
    ends += [x for coll in ax.collections if hasattr(coll, "get_segments")  # the whiskers' LineCollection
             for seg in coll.get_segments() for x, _ in seg]
    assert ends and all(low - 1e-9 <= x <= high + 1e-9 for x in ends), (low, high, ends)
    assert high < 100  # the wide whisker did not stretch the axis to its ±200%
