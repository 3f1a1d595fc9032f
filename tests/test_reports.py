"""What the plugin hands other tools: a JUnit file valid for Jenkins xUnit, pytest-benchmark's
benchmarks, and the same summary under pytest-xdist (pytester)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.reports.junit import read_reports
from pytest_dlperf.units import show

import test_plugin  # tests/ is on sys.path (pytest's rootdir-relative imports): its training scenario

HW = hardware_key("cpu")
SCHEMA = Path(__file__).parent / "schemas" / "junit-10.xsd"

#: tests/test_plugin.py's tiny real training scenario, plus a skipped and a failing test for the report's shape.
TRAIN_TEST = test_plugin.TRAIN_TEST + """

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass

def test_fails():
    assert 1 == 2
"""

#: Figures without training, for the plumbing: results built from known round times, so two runs give
#: the same figures and their summaries can be compared line by line. ``RATE_SCALE`` slows them down.
FIGURES_TEST = """
import os
import pytest
from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.result import LOWER, TrainingResult, metric_from

SCALE = float(os.environ.get("RATE_SCALE", "1"))

@pytest.mark.parametrize("rate", [100.0, 200.0, 300.0, 400.0])
def test_figures(dlperf, rate):
    s = dlperf.scenario("torch", "resnet18", image_size=32, batch_size=4, rounds=3, steps_per_round=2)
    rounds = [8 / (rate * SCALE * f) for f in (0.9, 1.0, 1.1)]
    metrics = {"throughput": metric_from("throughput", [8 / t for t in rounds], "samples/s"),
               "peak_host_memory": metric_from("peak_host_memory", [1.5 * 2 ** 30 + rate], "bytes", LOWER)}
    env = {"hardware_key": hardware_key("cpu"), "framework": "torch", "framework_version": "0.0-figures"}
    dlperf.check(TrainingResult(s, metrics, [2.0, 1.0], env, {"round_seconds": rounds}))
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def summary(result: pytest.RunResult) -> list[str]:
    """The dlperf summary section's lines."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "dlperf summary" in line)
    end = next((i for i in range(start + 1, len(lines))  # the next section's title, not the table's rule
                if lines[i].startswith(("===", "---")) and any(c.isalpha() for c in lines[i])), len(lines))
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


@pytest.mark.framework("torch")
def test_junit_report_is_valid_for_jenkins_xunit_and_carries_every_figure(pytester: pytest.Pytester) -> None:
    xmlschema = pytest.importorskip("xmlschema", reason="the schema check needs xmlschema (tox.ini: torch env)")
    pytester.makepyfile(test_train=TRAIN_TEST)
    result = run(pytester, "--junitxml=report.xml", "--benchmark-json=bench.json")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    report = pytester.path / "report.xml"
    errors = [str(e.reason) for e in xmlschema.XMLSchema(str(SCHEMA)).iter_errors(str(report))]
    assert errors == [], f"report.xml is invalid against junit-10.xsd: {errors}"

    # every figure of the terminal's summary, with its value, reads back from the report
    tests = {t.test: t for t in read_reports([report])}
    assert tests["test_train.py::test_skipped"].outcome == "skipped"
    assert tests["test_train.py::test_fails"].outcome == "failed"
    train = tests["test_train.py::test_train"]
    assert train.outcome == "passed" and train.hardware == HW
    metrics = {m.metric: m for m in train.metrics}
    rows = [row.split(None, 2) for row in summary(result) if row.startswith("test_train.py::test_train::fp32")]
    assert [name for _, name, _ in rows] == ["throughput", "peak_host_memory"]
    for _, name, rest in rows:
        assert rest.startswith(show(metrics[name].value, metrics[name].unit)), (rest, metrics[name])
        assert metrics[name].verdict == "missing"
    throughput = metrics["throughput"]
    result.stdout.fnmatch_lines([f"test_train.py::test_train::fp32*throughput*{throughput.value:.4g} samples/s"
                                 "*missing*",
                                 "test_train.py::test_train::fp32*peak_host_memory*[0-9] MiB*missing*"])
    assert throughput.unit == "samples/s" and throughput.n == 3

    # pytest-benchmark: the same scenario's round times, its figures in extra_info, the machine's keys
    bench = json.loads((pytester.path / "bench.json").read_text())
    (entry,) = bench["benchmarks"]
    assert entry["fullname"] == "test_train.py::test_train::fp32" and entry["group"] == "test_train.py::test_train"
    assert entry["stats"]["rounds"] == 3 and entry["stats"]["iterations"] == 2
    info = entry["extra_info"]
    assert info["throughput"] == pytest.approx(throughput.value, rel=1e-5)
    assert info["hardware"] == HW and info["software"]["framework"] == "torch"
    assert info["verdict"] == {"throughput": "missing", "peak_host_memory": "missing"}
    # mean step time x batch = the samples of one step: consistent with the throughput
    assert 4 / entry["stats"]["median"] == pytest.approx(throughput.value, rel=0.5)
    assert bench["machine_info"]["dlperf"]["hardware_key"] in (HW, hardware_key("cuda"))
    assert bench["machine_info"]["dlperf"]["framework"] == "torch"


def test_pytest_benchmark_compares_and_fails_on_the_scenarios(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_figures=FIGURES_TEST)
    result = run(pytester, "--benchmark-autosave", "--benchmark-storage=file://bench")
    result.assert_outcomes(passed=4)
    saved = list((pytester.path / "bench").rglob("0001_*.json"))
    assert len(saved) == 1
    data = json.loads(saved[0].read_text())
    assert sorted(b["fullname"] for b in data["benchmarks"]) == [
        f"test_figures.py::test_figures[{r}]::fp32" for r in ("100.0", "200.0", "300.0", "400.0")]
    first = next(b for b in data["benchmarks"] if "[100.0]" in b["fullname"])
    assert first["stats"]["median"] == pytest.approx(8 / 100 / 2)  # round seconds / steps per round

    monkeypatch.setenv("RATE_SCALE", "0.5")  # every step twice as long
    result = run(pytester, "--benchmark-storage=file://bench", "--benchmark-compare=0001",
                 "--benchmark-compare-fail=median:20%")
    assert result.ret != 0
    # pytest-benchmark's own failure: every scenario named, with the stat that failed (its logger writes to stderr)
    output = pytest.LineMatcher(result.outlines + result.errlines)
    output.fnmatch_lines(["*Performance has regressed*"])
    output.fnmatch_lines(["*test_figures[[]100.0[]]::fp32*median*"])


#: Scenarios of one round, three rounds, and no rounds at all (a distributed job: its steps' times).
CONSUMERS_TEST = """
import pytest
from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.result import LOWER, TrainingResult, metric_from

ENV = {"hardware_key": hardware_key("cpu"), "framework": "torch", "framework_version": "0.0-figures"}

@pytest.mark.parametrize("rounds", [1, 3])
def test_rounds(dlperf, rounds):
    s = dlperf.scenario("torch", "resnet18", image_size=32, batch_size=4, rounds=rounds, steps_per_round=2)
    times = [0.08 * (1 + 0.1 * i) for i in range(rounds)]
    metrics = {"throughput": metric_from("throughput", [8 / t for t in times], "samples/s")}
    dlperf.check(TrainingResult(s, metrics, [2.0, 1.0], ENV, {"round_seconds": times}))

def test_steps_only(dlperf):
    s = dlperf.scenario("torch", "resnet18", image_size=32, batch_size=4, rounds=3, steps_per_round=1)
    steps = [0.04, 0.05, 0.045]
    metrics = {"step_time": metric_from("step_time", steps, "s", LOWER),
               "throughput": metric_from("throughput", [4 / t for t in steps], "samples/s")}
    dlperf.check(TrainingResult(s, metrics, [2.0, 1.0], ENV, {}))
"""

#: What github-action-benchmark's ``pytest`` tool reads of each benchmark: src/extract.ts, extractPytestResult.
GITHUB_ACTION_BENCHMARK = {"fullname": str, "stats.ops": float, "stats.stddev": float, "stats.mean": float,
                           "stats.rounds": int}
#: What Bencher's ``python_pytest`` adapter reads: lib/bencher_adapter/src/adapters/python/pytest.rs, struct Pytest.
BENCHER_TOP = {"machine_info": dict, "commit_info": dict, "benchmarks": list}
BENCHER = {"fullname": str, "stats.median": float, "stats.iqr": float}


def _field(entry: dict, path: str) -> object:
    for part in path.split("."):
        entry = entry[part]
    return entry


def _has_type(value: object, kind: type) -> bool:
    """JSON's types as the parsers take them: a finite number for float (Rust's f64 -> Decimal refuses
    anything else), an integral one for int, never a bool."""
    if isinstance(value, bool):
        return False
    if kind is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, kind)


def test_the_benchmark_json_has_what_github_action_benchmark_and_bencher_read(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_consumers=CONSUMERS_TEST)
    run(pytester, "--benchmark-json=bench.json").assert_outcomes(passed=3)

    def refuse(constant: str) -> None:  # JSON.parse and serde_json both refuse NaN and Infinity
        raise AssertionError(f"bench.json holds {constant}, which is not JSON")

    bench = json.loads((pytester.path / "bench.json").read_text(), parse_constant=refuse)
    for name, kind in BENCHER_TOP.items():
        assert _has_type(bench.get(name), kind), (name, bench.get(name))
    entries = {b.get("fullname"): b for b in bench["benchmarks"]}
    assert sorted(entries) == ["test_consumers.py::test_rounds[1]::fp32", "test_consumers.py::test_rounds[3]::fp32",
                               "test_consumers.py::test_steps_only::fp32"]  # an empty list fails the action
    for fullname, entry in entries.items():
        for path, kind in {**GITHUB_ACTION_BENCHMARK, **BENCHER}.items():
            assert _has_type(_field(entry, path), kind), (fullname, path, _field(entry, path))
        assert 0 < len(fullname.encode()) <= 1024  # Bencher's BenchmarkName
        stats = entry["stats"]
        # the action shows ops as iter/sec, bigger is better: steps per second; Bencher reads the median
        # and IQR as seconds (latency in ns)
        assert stats["ops"] == pytest.approx(1 / stats["mean"]) and stats["min"] <= stats["median"] <= stats["max"]
        assert stats["stddev"] >= 0 and stats["iqr"] >= 0
    assert entries["test_consumers.py::test_rounds[3]::fp32"]["stats"]["median"] == pytest.approx(0.088 / 2)
    assert entries["test_consumers.py::test_rounds[1]::fp32"]["stats"]["rounds"] == 1
    assert entries["test_consumers.py::test_steps_only::fp32"]["stats"]["median"] == pytest.approx(0.045)


@pytest.mark.slow
def test_xdist_prints_the_summary_and_writes_the_figures_of_a_serial_run(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist", reason="needs pytest-xdist (tox.ini: torch env)")
    pytester.makepyfile(test_figures=FIGURES_TEST)
    serial = run(pytester, "--update-baselines", "--junitxml=serial.xml")
    parallel = run(pytester, "--update-baselines", "-n", "2", "--junitxml=parallel.xml")
    parallel.assert_outcomes(passed=4)
    # title, verdict line, table of 8 rows, counts
    assert summary(parallel) == summary(serial) and len(summary(serial)) == 15
    parallel.stdout.fnmatch_lines(["*8 baselines written to *baselines/*.json."])
    (written,) = (pytester.path / "baselines").glob("*.json")
    latest = {rec["runs"][-1]["session"] for entry in json.loads(written.read_text())["entries"].values()
              for rec in entry.values()}
    assert len(latest) == 1, f"the xdist workers recorded under sessions of their own: {latest}"

    serial = run(pytester, "--junitxml=serial.xml")
    parallel = run(pytester, "-n", "2", "--junitxml=parallel.xml")
    assert summary(parallel) == summary(serial)
    # the figures and the run's two shifts (throughput, memory), judged on the controller once workers finish;
    # the four throughputs, recorded twice alike, borrow the stated 10% CPU prior, which cannot bound a
    # change within their 10% tolerance: inconclusive (memory's 2% prior bounds it within 5%: no change)
    parallel.stdout.fnmatch_lines(["10 metrics compared with baselines. 0 regressions. 0 improvements. "
                                   "4 inconclusive. 0 missing baselines.",
                                   "4 figures inconclusive (within the gate, *could hide *"])
    figures = [{(m.key, m.value, m.verdict) for t in read_reports([pytester.path / name]) for m in t.metrics}
               for name in ("serial.xml", "parallel.xml")]
    assert figures[0] == figures[1] and len(figures[0]) == 4 * 2


def _report(path: Path, cases: str) -> Path:
    path.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="2">'
                    + cases + "</testsuite></testsuites>", encoding="utf-8")
    return path


def test_summary_counts_a_test_once_over_framework_environments_in_units_people_read(tmp_path: Path) -> None:
    from pytest_dlperf.reports.summary import summary_markdown

    memory = ('<properties><property name="dlperf.fp32.peak_host_memory" value="1.209e+09" />'
              '<property name="dlperf.fp32.peak_host_memory.unit" value="bytes" />'
              '<property name="dlperf.fp32.peak_host_memory.baseline" value="1.1e+09" />'
              '<property name="dlperf.fp32.throughput" value="5.788" />'
              '<property name="dlperf.fp32.throughput.unit" value="samples/s" /></properties>')
    skipped = '<skipped message="framework not installed" />'
    torch = _report(tmp_path / "torch.xml",  # an old report: figures in the test case
                    f'<testcase classname="perf_tests.test_x" name="test_a">{memory}</testcase>'
                    '<testcase classname="perf_tests.test_x" name="test_b" />'
                    f'<testcase classname="perf_tests.test_x" name="test_gpu">{skipped}</testcase>')
    tf = _report(tmp_path / "tf.xml",
                 f'<testcase classname="perf_tests.test_x" name="test_a">{skipped}</testcase>'
                 '<testcase classname="perf_tests.test_x" name="test_b"><failure message="boom" /></testcase>'
                 f'<testcase classname="perf_tests.test_x" name="test_gpu">{skipped}</testcase>')
    out = summary_markdown(read_reports([torch, tf]))
    assert "**3 tests**: 1 passed, 1 failed, 1 skipped" in out
    assert "| fp32 | peak_host_memory | 1.126 | GiB | 1.024 |" in out
    assert "| fp32 | throughput | 5.788 | samples/s | - |" in out


def test_suite_figures_attach_to_their_test_case_and_a_prefix_is_allowed(tmp_path: Path) -> None:
    from pytest_dlperf.figures import suite_property_name
    from pytest_dlperf.reports.junit import test_address

    assert test_address("perf_tests/test_x.py::TestA::test_b[p.1::x]") == ("perf_tests.test_x.TestA", "test_b[p.1::x]")
    nodeid = "perf_tests/test_x.py::test_a[resnet18]"
    props = "".join(f'<property name="{suite_property_name(nodeid, n)}" value="{v}" />'
                    for n, v in [("dlperf.hardware", "cpu-x"), ("dlperf.fp32.throughput", "12.5"),
                                 ("dlperf.fp32.throughput.verdict", "ok")])
    path = _report(tmp_path / "r.xml", f"<properties>{props}</properties>"
                   '<testcase classname="ci.perf_tests.test_x" name="test_a[resnet18]" />'
                   '<testcase classname="ci.perf_tests.test_x" name="test_other" />')
    a, other = read_reports([path])
    assert (a.test, a.hardware, [(m.metric, m.value, m.verdict) for m in a.metrics]) == (
        nodeid, "cpu-x", [("throughput", 12.5, "ok")])
    assert other.metrics == [] and other.hardware == ""
    # a file whose root is the <testsuite> itself reads the same
    root = tmp_path / "root.xml"
    root.write_text(path.read_text().replace("<testsuites>", "").replace("</testsuites>", ""), encoding="utf-8")
    assert [(t.test, len(t.metrics)) for t in read_reports([root])] == [
        (nodeid, 1), ("ci/perf_tests/test_x.py::test_other", 0)]


def test_a_claims_parametrizations_share_one_benchmark_table():
    # pytest-benchmark prints a table per group: one per test function, not one per parametrized row
    from types import SimpleNamespace

    from pytest_dlperf.plugin.benchmark import claim_of

    items = [SimpleNamespace(nodeid=f"perf_tests/test_p.py::test_cpu[{p}-resnet18]") for p in ("fp32", "amp_bf16")]
    assert {claim_of(i) for i in items} == {"perf_tests/test_p.py::test_cpu"}  # type: ignore[arg-type]
    assert claim_of(SimpleNamespace(nodeid="t.py::TestA::test_b")) == "t.py::TestA::test_b"  # type: ignore[arg-type]
