"""The suite's cost profile (pytest_dlperf.cost): the children's phases and the parent's laid on one time
line, a test's report property, and the terminal's "where the time went"."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_dlperf import cost
from pytest_dlperf.processes.paired import Variant, run_paired
from pytest_dlperf.reports import cli
from pytest_dlperf.reports.cost import cost_markdown, costs_of
from pytest_dlperf.scenario import Scenario

TESTS = str(Path(__file__).resolve().parent)
SCHEMA = Path(__file__).parent / "schemas" / "junit-10.xsd"


def test_every_instant_goes_to_the_busiest_phase_and_the_split_sums_to_the_wall_time() -> None:
    spans = [("import", 1.0, 3.0), ("build", 3.0, 4.0), ("warmup", 4.0, 5.0), ("wait", 5.0, 9.0),  # child A
             ("import", 2.0, 4.0), ("build", 4.0, 6.0), ("warmup", 6.0, 7.0), ("measure", 7.0, 9.0),  # child B
             ("judge", 11.0, 11.5), ("measure", -5.0, -1.0)]  # the parent judges; a span before the test
    split = cost.attribute(0.0, 12.0, spans, children=[(0.5, 10.0), (1.5, 9.5)])
    assert split == pytest.approx({"spawn": 0.5 + 1.0, "import": 2.0, "build": 2.0, "warmup": 2.0,
                                   "measure": 2.0, "judge": 0.5, "other": 0.5 + 1.0 + 0.5})
    assert sum(split.values()) == pytest.approx(12.0)
    assert cost.attribute(0.0, 2.0, []) == {"other": 2.0}


def test_a_cost_reads_back_as_written_and_anything_else_as_none() -> None:
    written = cost.Cost(13.1, {"measure": 6.0, "import": 3.1, "other": 4.0, "judge": 0.0}, 2)
    assert written.text() == "wall=13.100 import=3.100 measure=6.000 other=4.000 children=2"
    read = cost.Cost.parse(written.text())
    assert read == cost.Cost(13.1, {"import": 3.1, "measure": 6.0, "other": 4.0}, 2)
    assert cost.Cost.parse("import=3.1") is None and cost.Cost.parse("wall=1 fast") is None


def test_a_recorder_takes_what_the_children_and_the_parent_report_while_it_records() -> None:
    cost.child_ran(0.0, 1.0)  # nobody records: ignored
    with cost.recording() as recorder:
        start = recorder.start
        cost.child_ran(start + 0.1, start + 0.9)
        cost.child_reported({"result": {}, "phases": {"import": [[start + 0.2, start + 0.5]], "bad": [["x", 1]]}})
        cost.child_reported({"error": {}})
        with cost.timed(cost.JUDGE):
            pass
    found = recorder.cost(end=start + 1.0)
    assert found.children == 1 and found.wall == pytest.approx(1.0)
    assert found.phases["import"] == pytest.approx(0.3) and found.phases["spawn"] == pytest.approx(0.5)
    assert sum(found.phases.values()) == pytest.approx(1.0)


def test_the_summary_adds_the_run_up_and_lists_the_costliest_tests_first() -> None:
    costs = [(f"perf_tests/test_x.py::test_{i}", cost.Cost(float(i), {"measure": i / 2, "other": i / 2}, 1))
             for i in range(1, 13)]
    lines = cost.summary_lines(costs)
    assert lines[0] == ("dlperf: where the time went: 78.0 s in 12 tests using dlperf, 12 children: "
                        "measure 39.0 s (50%), other 39.0 s (50%).")
    assert lines[1].split() == ["costliest", "tests", "wall", "s", "measure", "other", "children"]
    assert [line.split()[0] for line in lines[3:]] == [f"test_x.py::test_{i}" for i in range(12, 2, -1)]
    assert lines[3].split()[1:] == ["12.0", "6.0", "6.0", "1"]
    assert cost.summary_lines([]) == []


def fake_variant(label: str) -> Variant:
    scenario = Scenario(framework="torch", model="fake", label=label, warmup_steps=1, steps_per_round=3,
                        timeout=30.0, env={"PYTHONPATH": TESTS, "FAKE_STEP_SECONDS": "0.01"})
    return Variant(scenario, module="fake_paced_child")


def test_a_paired_groups_children_are_counted_once_on_the_time_line(tmp_path: Path) -> None:
    """Four paced children (two variants, two processes each): their phases overlap, the split does not."""
    with cost.recording() as recorder:
        run_paired([fake_variant("a"), fake_variant("b")], pairs=4, processes=2, workdir=tmp_path)
    found = recorder.cost()
    assert found.children == 4
    assert sum(found.phases.values()) == pytest.approx(found.wall)
    # the children's rounds: 4 pairs x 2 variants x 3 steps of 10 ms at least
    assert found.phases["measure"] >= 0.24 and found.phases["import+build"] > 0 and found.phases["spawn"] > 0


STEP_MODULE = """
import torch

def make_step(scenario):
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(scenario.batch_size, 8), torch.randint(0, 2, (scenario.batch_size,))

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    step.samples_per_step = scenario.batch_size
    return step
"""

STEP_TEST = """
def test_mine(dlperf):
    s = dlperf.scenario("torch", "tiny", step="tiny_step:make_step", batch_size=4, warmup_steps=2, rounds=2,
                        steps_per_round=3)
    dlperf.check(dlperf.run(s))
"""


@pytest.mark.framework("torch")
def test_a_measuring_test_reports_its_cost_in_junit_and_the_summary(pytester: pytest.Pytester,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLPERF_LOCK_DIR", str(pytester.path / "locks"))  # no wait for another run's lock
    pytester.makepyfile(tiny_step=STEP_MODULE, test_mine=STEP_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--junitxml=report.xml")
    result.assert_outcomes(passed=1)
    report = pytester.path / "report.xml"
    props = {p.get("name"): p.get("value") for p in ET.parse(report).iter("property")}
    found = cost.Cost.parse(props["test_mine.py::test_mine::dlperf.cost"] or "")
    assert found is not None and found.children == 1
    assert all(found.phases.get(phase, 0) > 0 for phase in ("import", "build", "warmup", "measure", "spawn")), found
    assert set(found.phases) <= {"import", "build", "warmup", "measure", "finish", "spawn", "lock", "judge", "other"}
    assert sum(found.phases.values()) <= found.wall + 0.001 * len(found.phases)  # rounded to ms
    case = next(ET.parse(report).iter("testcase"))
    assert found.wall <= float(case.get("time") or 0) + 0.1  # pytest's own: setup, call and teardown
    result.stdout.fnmatch_lines([
        "*dlperf cost*",
        "dlperf: where the time went: * s in 1 test using dlperf, 1 child: *",
        "costliest tests*wall s*import*build*warmup*measure*children",
        "test_mine.py::test_mine *1",
    ])
    # what `dlperf summary` shows of it (pytest_dlperf.reports.cost)
    assert costs_of([report, report]) == [("test_mine.py::test_mine", found)]
    # another framework's run lists the same test as skipped, at no cost: the run that measured it counts
    skipped = pytester.path / "skipped.xml"
    measured = props["test_mine.py::test_mine::dlperf.cost"] or ""
    skipped.write_text(report.read_text(encoding="utf-8").replace(measured, "wall=0.000 children=0"), encoding="utf-8")
    assert costs_of([report, skipped]) == costs_of([skipped, report]) == [("test_mine.py::test_mine", found)]
    markdown = cost_markdown(costs_of([report]))
    assert markdown[:2] == ["### Where the time went", ""] and markdown[6].startswith("| `test_mine.py::test_mine` |")
    assert markdown[4].split(" | ")[:3] == ["| test", "wall s", "import"]
    out = io.StringIO()
    assert cli.cmd_summary(cli.build_parser().parse_args(["summary", str(report)]), out) == 0
    summary = out.getvalue()
    assert "### Where the time went" in summary and "| `test_mine.py::test_mine` |" in summary
    xmlschema = pytest.importorskip("xmlschema", reason="the schema check needs xmlschema (tox.ini: torch env)")
    assert [str(e.reason) for e in xmlschema.XMLSchema(str(SCHEMA)).iter_errors(str(report))] == []


#: Figures without a child: a test's cost is its own time (``other``) and its judging.
NO_CHILD_TEST = """
import pytest
from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.result import TrainingResult, metric_from

@pytest.mark.parametrize("rate", [100.0, 200.0, 300.0])
def test_figures(dlperf, rate):
    s = dlperf.scenario("torch", "resnet18", rounds=3)
    metrics = {"throughput": metric_from("throughput", [rate, rate, rate], "samples/s")}
    dlperf.check(TrainingResult(s, metrics, [2.0, 1.0], {"hardware_key": hardware_key("cpu")}))

def test_plain():
    pass
"""


def test_xdist_workers_costs_reach_the_controllers_summary(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist", reason="needs pytest-xdist (tox.ini: torch env)")
    pytester.makepyfile(test_figures=NO_CHILD_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*dlperf cost*", "dlperf: where the time went: * s in 3 tests using dlperf, "
                                 "0 children*", "costliest tests*wall s*children"])
    rows = [line for line in result.stdout.lines if line.startswith("test_figures.py::test_figures[")]
    assert len([row for row in rows if "::fp32" not in row]) == 3  # the others are the dlperf summary's


def test_a_skipped_test_adds_no_cost_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_figures=NO_CHILD_TEST + """
def test_no_device(dlperf):
    pytest.skip("no GPU")
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--junitxml=report.xml")
    result.assert_outcomes(passed=4, skipped=1)
    result.stdout.fnmatch_lines(["dlperf: where the time went: * s in 3 tests using dlperf, 0 children*"])
    props = [p.get("name") for p in ET.parse(pytester.path / "report.xml").iter("property")]
    assert not [name for name in props if str(name).startswith("test_figures.py::test_no_device")]
