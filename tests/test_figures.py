"""The figure schema is defined once (pytest_dlperf.figures): what the plugin writes, the reports read."""

from __future__ import annotations

import re
from pathlib import Path

from junitparser import TestCase, TestSuite

import pytest_dlperf
from pytest_dlperf import figures
from pytest_dlperf.judging.stats import paired_ratio
from pytest_dlperf.judging.verdict import Verdict
from pytest_dlperf.profiles import scenario_for
from pytest_dlperf.reports.junit import records
from pytest_dlperf.result import LOWER, TrainingResult, metric_from, paired_metric

PACKAGE = Path(pytest_dlperf.__file__).resolve().parent


def _written() -> tuple[TrainingResult, list[tuple[str, str]]]:
    scenario = scenario_for("smoke", "torch", "resnet18", label="fp32.v1")
    result = TrainingResult(scenario, {"throughput": metric_from("throughput", [10.0, 11.0, 12.0], "samples/s"),
                                       "peak_host_memory": metric_from("peak_host_memory", [400.0], "MiB", LOWER)},
                            losses=[2.0, 1.0],
                            environment={"hardware_key": "cpu-x", "framework": "torch", "workers": 2})
    ratio = paired_ratio([2.0, 2.1, 1.9, 2.05], [1.0, 1.0, 1.0, 1.0], units=[0, 0, 1, 1])
    verdict = Verdict(test="t", label="fp32.v1", metric="throughput", unit="samples/s", direction="higher",
                      observed=11.0, baseline=10.0, tolerance=0.05, status="ok", gate=0.08, noise=0.02, runs=3)
    props = (figures.of_result(result)
             + figures.of_derived("amp", paired_metric("speedup", ratio))
             + figures.of_floor("amp", "speedup", 1.8)
             + figures.of_verdict(verdict)
             + figures.of_paired("amp", ratio, "fp32.v1")
             + figures.of_ab("fp32.v1", ratio, "ok", {"framework": "torch"}))
    return result, props


def test_every_name_written_parses_back_to_its_parts():
    _, props = _written()
    for prop, _ in props:
        parsed = figures.parse(prop)
        assert parsed is not None, prop
        rebuilt = figures.PREFIX + figures.HARDWARE if parsed.key == figures.HARDWARE and not parsed.label \
            else figures.name(parsed.label, parsed.key, parsed.field)
        assert rebuilt == prop
    assert figures.parse("other.property") is None


def test_the_report_reader_gets_back_what_the_writer_wrote():
    result, props = _written()
    suite = TestSuite("pytest")
    case = TestCase("test_x", classname="perf_tests.test_a")
    suite.add_testcase(case)
    for prop, value in props:
        suite.add_property(figures.suite_property_name("perf_tests/test_a.py::test_x", prop), value)
    (rec,) = records(suite)
    assert rec.hardware == "cpu-x"
    assert rec.scenarios["fp32.v1"] == result.scenario.describe()
    assert rec.software["fp32.v1"] == "framework=torch"
    assert rec.workers == {"fp32.v1": 2}
    assert rec.ab["fp32.v1"]["ab_verdict"] == "ok"
    got = {(m.label, m.metric): m for m in rec.metrics}
    assert set(got) == {("fp32.v1", "throughput"), ("fp32.v1", "peak_host_memory"), ("amp", "speedup")}
    throughput = got[("fp32.v1", "throughput")]
    assert (throughput.value, throughput.n, throughput.samples) == (11.0, 3, (10.0, 11.0, 12.0))
    assert (throughput.verdict, throughput.baseline, throughput.detectable, throughput.runs) == ("ok", 10.0, 0.08, 3)
    assert got[("fp32.v1", "peak_host_memory")].direction == LOWER
    speedup = got[("amp", "speedup")]
    assert speedup.floor == 1.8 and speedup.interval is not None and speedup.interval[0] < speedup.value


def test_no_other_module_spells_out_a_figure_name():
    """Property names are built by figures.py alone; readers and writers import it."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "figures.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.lstrip().startswith(("#", "``", ":")) and re.search(r"f?[\"']dlperf\.", line):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert found == []
