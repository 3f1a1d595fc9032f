"""The rules the summary and the page decide with: distinct figures, correctness failures, the verdict line."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_dlperf.reports import digest
from pytest_dlperf.reports.records import MetricRecord
from pytest_dlperf.reports.records import TestRecord as Record  # (not a test class)


def memory(test: str, value: float, hardware: str = "cpu-a", verdict: str = "ok") -> MetricRecord:
    return MetricRecord(test=test, label="fp32", metric="peak_host_memory", value=value, unit="bytes",
                        baseline=1.0e9, verdict=verdict, declared_direction="lower", hardware=hardware, tolerance=0.1)


def tf_test(name: str, *metrics: MetricRecord) -> Record:
    return Record(name, "passed", hardware="cpu-a", metrics=list(metrics),
                  software={"fp32": "framework=tensorflow framework_version=2.16.1 python=3.11.7"})


@pytest.mark.parametrize("message, kind", [
    ("Failed: regression: fp32 throughput 6.067 samples/s vs baseline 136.4 (-95.6%)", "performance"),
    ("A/B slower: fp32 ...", "performance"),
    ("AssertionError: the loss is NaN after 12 steps", "correctness"),
    ("AssertionError: accuracy_top1 0.41 below 0.7", "correctness"),
    ("AssertionError: dist_sync: the workers pulled different weights: conv0 differs by 0.01", "correctness"),
    ("AssertionError: gradients are not finite", "correctness"),
    ("ModuleNotFoundError: No module named 'horovod'", "other"),
])
def test_a_failure_is_about_correctness_when_its_message_says_so(message, kind):
    assert digest.failure_kind(Record("t.py::t", "failed", message)) == kind
    assert digest.failure_kind(Record("t.py::t", "passed", message)) is None


def test_a_figure_in_several_reports_counts_once_but_another_machine_s_is_its_own():
    a = memory("t.py::a", 1.2e9)
    runs = [tf_test("t.py::a", a), tf_test("t.py::a", a), tf_test("t.py::a", memory("t.py::a", 1.2e9, "cpu-b"))]
    assert [m.hardware for m in digest.distinct(runs)] == ["cpu-a", "cpu-b"]


def test_the_verdict_line_says_what_happened_and_what_was_compared():
    regressed = dataclasses.replace(memory("t.py::a", 1.3e9, verdict="regression"), runs=4, detectable=0.12)
    tests = [tf_test("t.py::a", regressed), Record("t.py::b", "failed", "the loss is NaN", hardware="cpu-a")]
    line = digest.digest(tests).verdict_line()
    assert line == ("FAILED: 1 regression beyond its noise, 1 correctness failure, 0 inconclusive · 1 figure on "
                    "cpu-a against its baselines (4 recorded runs) · python 3.11.7, tensorflow 2.16.1")


def test_only_a_judged_figure_has_its_gate_marked():
    judged = dataclasses.replace(memory("t.py::a", 1.2e9), n=1)
    recorded = dataclasses.replace(judged, verdict=None)  # e.g. dlperf.check(unjudged=...): no gate to mark
    assert digest.marks_of(judged) == ["n=1"]
    assert digest.marks_of(recorded) == []


def test_a_run_that_judged_no_figure_is_not_called_passed():
    """Every baseline missing (a machine type with none of its own), or every test skipped (a GPU runner
    that sees no GPU): nothing could have failed, so the headline says so and counts what was missing."""
    missing = dataclasses.replace(memory("t.py::a", 1.2e9, verdict="missing"), baseline=None)
    line = digest.digest([tf_test("t.py::a", missing)]).verdict_line()
    assert line.startswith("NOT JUDGED: 0 regressions beyond their noise, 0 correctness failures, 0 inconclusive, "
                           "1 figure without a baseline · 0 figures on cpu-a")
    assert line.endswith("record baselines with `dlperf record` (or --update-baselines) and commit them")
    skipped = digest.digest([Record("t.py::g", "skipped", "needs 1 CUDA device(s), found 0")])
    assert skipped.verdict_line().startswith("NOT JUDGED: ") and "0 figures on an unnamed machine" in \
        skipped.verdict_line()
    other = dataclasses.replace(missing, test="t.py::b")
    judged = digest.digest([tf_test("t.py::a", memory("t.py::a", 1.0e9)), tf_test("t.py::b", other)])
    assert judged.verdict_line().startswith("PASSED: ") and "1 figure without a baseline" in judged.verdict_line()


def test_a_recording_run_s_summary_says_what_it_recorded_and_that_it_judged_nothing():
    """A run of --update-baselines (or `dlperf record`) compares nothing by design: its summary's headline is
    RECORDED with the figures written and the machine, neither PASSED nor a NOT JUDGED that reads like a gap."""
    updated = dataclasses.replace(memory("t.py::a", 1.2e9, verdict="updated"), baseline=None)
    d = digest.digest([tf_test("t.py::a", updated), tf_test("t.py::b", dataclasses.replace(updated, test="t.py::b"))])
    assert d.headline == "RECORDED"
    assert d.verdict_line() == ("RECORDED: 2 figures written as baselines for cpu-a, none judged · python 3.11.7, "
                                "tensorflow 2.16.1")
    failed = Record("t.py::c", "failed", "AssertionError: the loss is NaN after 12 steps", hardware="cpu-a")
    assert digest.digest([tf_test("t.py::a", updated), failed]).headline == "FAILED"


def test_in_a_b_mode_the_headline_counts_the_a_b_decisions_and_the_stored_ones_inform():
    """A stored-baseline regression fails no test in A/B mode: an A/B 'no change' run is PASSED with the
    stored regression given as information; an A/B slowdown is FAILED and counted as such."""
    stored = dataclasses.replace(memory("t.py::a", 1.3e9, verdict="regression"), runs=3)
    same = Record("t.py::a", "passed", hardware="cpu-a", metrics=[stored], ab={"fp32": {"ab_verdict": "ok"}})
    line = digest.digest([same]).verdict_line()
    assert line.startswith("PASSED: 0 A/B slower, 0 faster, 1 no change, 0 inconclusive, 0 correctness failures · "
                           "1 scenario compared with the reference · stored baselines, for information: "
                           "1 regression of 1 figure judged")
    slower = Record("t.py::b", "failed", "A/B slower: fp32 0.87x", hardware="cpu-a",
                    ab={"fp32": {"ab_verdict": "regression"}})
    line = digest.digest([same, slower]).verdict_line()
    assert line.startswith("FAILED: 1 A/B slower, 0 faster, 1 no change, 0 inconclusive, 0 correctness failures")


def test_the_plugin_s_line_for_a_recording_run_is_not_a_verdict():
    """--update-baselines compares nothing by design: its line says what was recorded, not NOT JUDGED."""
    from pytest_dlperf.judging.outcomes import MISSING, UPDATED
    from pytest_dlperf.judging.verdict import Verdict
    from pytest_dlperf.plugin.report import verdict_line

    def made(status: str) -> Verdict:
        return Verdict("t.py::t", "fp32", "throughput", "samples/s", "higher", 10.0, None, 0.1, status,
                       hardware="cpu-a")

    assert verdict_line([made(UPDATED), made(UPDATED)], 0.05) == \
        "dlperf: 2 figures recorded with --update-baselines, none compared."
    assert verdict_line([made(MISSING)], 0.05).startswith("dlperf: NOT JUDGED: no figure compared with a baseline, "
                                                          "1 figure without a baseline on this machine")
