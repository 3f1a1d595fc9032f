"""The plugin as a user drives it: options, markers, skips, baselines, failures (pytester)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.judging.noise import PRIORS
from pytest_dlperf.reports.junit import read_reports

HW = hardware_key("cpu")

#: A tiny but real training scenario: torchvision ResNet-18, 32 px, a few steps.
TRAIN_TEST = """
import pytest

@pytest.mark.framework("torch")
def test_train(dlperf):
    s = dlperf.scenario("torch", "resnet18", image_size=32, batch_size=4, warmup_steps=1,
                        rounds=3, steps_per_round=2)
    r = dlperf.run(s)
    dlperf.check(r)
    # one figure per timed round, each the round's 2 steps x batch 4 over its measured seconds
    seconds = r.details["round_seconds"]
    assert len(r.throughput.samples) == len(seconds) == 3
    assert r.throughput.samples == pytest.approx([2 * 4 / t for t in seconds], rel=1e-9)
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def baseline_file(pytester: pytest.Pytester) -> Path:
    return pytester.path / "baselines" / f"{HW}.json"


def write_baseline(pytester: pytest.Pytester, entries: dict) -> Path:
    path = baseline_file(pytester)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"format": 1, "hardware_key": HW, "hardware": {}, "entries": entries}))
    return path


def record(value: float, direction: str = "higher", unit: str = "samples/s", spread: float = 0.0,
           runs: int = 1) -> dict:
    """A format 1 record (one run), or with ``runs`` a format 2 history 1% apart run to run."""
    samples = [value * (1 - spread), value, value * (1 + spread)]
    rec = {"value": value, "unit": unit, "direction": direction, "n": 3, "iqr": value * spread,
           "samples": samples, "software": {"framework_version": "0.0-old"}, "recorded": "2026-01-01T00:00:00Z"}
    if runs > 1:
        factors = [1.0, 0.99, 1.0 / 0.99, 0.995, 1.0 / 0.995][:runs]
        rec["runs"] = [{"value": value * f, "recorded": "2026-01-01T00:00:00Z"} for f in factors]
    return rec


def test_options_are_in_one_group_with_help(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--help")
    result.stdout.fnmatch_lines([
        "*deep-learning training performance*",
        "*--update-baselines*",
        "*--baseline-dir*",
        "*--dlperf-profile*",
        "*--dlperf-tolerance*",
        "*--dlperf-timeout*",
    ])


@pytest.mark.parametrize("args, message", [
    (["--dlperf-profile=huge"], "*--dlperf-profile*'huge' is not a profile; use auto, smoke, full*"),
    (["--dlperf-tolerance=10"], "*--dlperf-tolerance*is a fraction*"),
    (["--dlperf-tolerance=abc"], "*--dlperf-tolerance*'abc' is not a number*"),
    (["-o", "dlperf_rounds=0"], "*ini key dlperf_rounds = '0'*must be at least 1*"),
    (["--dlperf-measure=cycles"], "*--dlperf-measure*'cycles' is not a measure; use time or instructions*"),
    (["--dlperf-launcher=pbs"], "*--dlperf-launcher*'pbs' is not a launcher; use one of: local, ssh, mpi, slurm*"),
    (["--dlperf-launcher=ssh"], "*--dlperf-launcher ssh needs --dlperf-hostfile PATH*"),
    (["--dlperf-launcher=mpi", "--dlperf-hostfile=nope.txt"], "*--dlperf-hostfile *nope.txt: cannot read hostfile*"),
])
def test_bad_option_values_are_usage_errors(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_bad_ini_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ndlperf_tolerance = lots\n")
    pytester.makepyfile("def test_x(): pass")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini key dlperf_tolerance = 'lots'*not a number*"])


def test_ini_keys_set_profile_and_tolerance(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ndlperf_profile = full\ndlperf_tolerance = 0.07\ndlperf_baseline_dir = perf/base\n")
    pytester.makepyfile("def test_x(): pass")
    result = run(pytester)
    result.stdout.fnmatch_lines(["dlperf: profile full, baselines *perf/base, tolerance 7%*"])
    # the command line wins over the ini file
    result = run(pytester, "--dlperf-profile=smoke", "--dlperf-tolerance=0.3")
    result.stdout.fnmatch_lines(["dlperf: profile smoke, * tolerance 30%*"])


def test_environment_variable_sits_between_command_line_and_ini(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\ndlperf_tolerance = 0.07\n")
    pytester.makepyfile("def test_x(): pass")
    monkeypatch.setenv("DLPERF_TOLERANCE", "0.3")
    run(pytester).stdout.fnmatch_lines(["dlperf: profile *, tolerance 30%*"])
    run(pytester, "--dlperf-tolerance=0.05").stdout.fnmatch_lines(["dlperf: profile *, tolerance 5%*"])
    monkeypatch.setenv("DLPERF_TOLERANCE", "wide")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*environment variable DLPERF_TOLERANCE='wide': 'wide' is not a number*"])


def test_default_profile_follows_the_hardware(pytester: pytest.Pytester) -> None:
    from pytest_dlperf.child.gpus import gpus

    pytester.makepyfile("def test_x(): pass")
    result = run(pytester)
    result.stdout.fnmatch_lines([f"dlperf: profile {'full' if gpus() else 'smoke'},*"])


@pytest.mark.parametrize("marker, message", [
    ("precision('fp8')", "*precision: 'fp8' is not allowed; allowed values: fp32, tf32, amp_fp16, amp_bf16*"),
    ("framework('caffe')", "*framework: 'caffe' is not allowed; allowed values: torch, tensorflow, mxnet*"),
    ("gpu(count=0)", "*gpu: count=0 must be a whole number >= 1*"),
    ("distributed(workers=2, launcher='pbs')", "*distributed: 'pbs' is not allowed; allowed values: local, ssh*"),
    ("tolerance(5)", "*tolerance: 5 must be a fraction between 0 and 1*"),
    ("tolerance(throughput=2)", "*tolerance: throughput=2 must be a fraction between 0 and 1*"),
    ("tolerance(througput=0.5)", "*tolerance: througput: not a judged metric; judged: throughput, *"),
    ("tolerance()", "*tolerance: takes one fraction for every figure and/or metric=fraction keywords*"),
])
def test_malformed_markers_are_usage_errors(pytester: pytest.Pytester, marker: str, message: str) -> None:
    pytester.makepyfile(f"import pytest\n@pytest.mark.{marker}\ndef test_x(): pass\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_markers_are_registered(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.gpu(count=1)*", "@pytest.mark.precision(*names)*",
                                 "@pytest.mark.framework(name)*", "@pytest.mark.distributed(*",
                                 "@pytest.mark.slow*"])
    assert "kvstore" not in result.stdout.str()  # it drove nothing, so it went


def test_gpu_and_missing_framework_skip_with_reasons(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpu(count=64)
        def test_many_gpus(): pass

        @pytest.mark.framework("mxnet")
        def test_needs_mxnet(): pass

        @pytest.mark.framework("mxnet")
        @pytest.mark.parametrize("n", [1, 2])
        def test_needs_mxnet_too(n): pass
    """)
    result = run(pytester, "-rs")
    result.stdout.fnmatch_lines(["*needs 64 CUDA device(s), found *: run it on a GPU runner (pytest -m gpu)*"])
    import importlib.util

    if importlib.util.find_spec("mxnet") is None:
        # one line for the three, wherever they are: a framework's environment skips the others' tests
        result.stdout.fnmatch_lines(["SKIPPED [[]3[]] *: mxnet is not installed in this environment: pip install "
                                     "mxnet==1.9.1*"])
        result.assert_outcomes(skipped=4)


@pytest.mark.framework("torch")
def test_missing_baseline_passes_and_is_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_train=TRAIN_TEST)
    result = run(pytester)
    result.assert_outcomes(passed=1)
    hw = baseline_file(pytester).stem
    result.stdout.fnmatch_lines([
        f"dlperf: hardware {hw}, compared with */baselines/{hw}.json (no smoke entries yet: record them with "
        "pytest --update-baselines)",
        # live lines, past the output capture (no -s), in a log that is not a TTY
        "[[]dlperf[]] fp32: training torch/resnet18 fp32 on cpu, batch 4, 32px, *",
        "[[]dlperf[]] fp32: done in * s: * samples/s (median of 3 rounds)",
        "*dlperf summary*",
        "scenario*metric*observed*baseline*delta*verdict*",
        "test_train.py::test_train::fp32*throughput*samples/s*missing*",
        "*0 metrics compared with baselines. 0 regressions. 0 improvements. * missing baselines.",
        f"No smoke baselines for this machine: hardware key {hw}, file */baselines/{hw}.json.",
        "Record them with: pytest --update-baselines (then commit baselines/)",
    ])
    assert not baseline_file(pytester).exists()


def test_header_names_the_counted_file_only_where_the_project_counts(pytester: pytest.Pytester) -> None:
    from pytest_dlperf import instructions

    if instructions.unavailable():
        pytest.skip(f"this host cannot count instructions: {instructions.unavailable()}")
    key = instructions.counting_key()
    pytester.makepyfile(test_timed="def test_timed(): pass")
    run(pytester).stdout.no_fnmatch_line(f"dlperf: hardware {key}*")
    run(pytester, "--dlperf-measure=instructions").stdout.fnmatch_lines(
        [f"dlperf: hardware {key}, compared with */baselines/{key}.json (no smoke entries yet*"])
    path = pytester.path / "baselines" / f"{key}.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"format": 1, "hardware_key": key, "hardware": {}, "entries": {}}))
    run(pytester).stdout.fnmatch_lines([f"dlperf: hardware {key}, compared with */{key}.json (no smoke entries yet*"])


def test_header_says_other_xdist_workers_run_beside_a_measured_scenario(pytester: pytest.Pytester) -> None:
    """The devices' lock keeps scenarios apart, not the tests of other workers."""
    pytest.importorskip("xdist", reason="needs pytest-xdist (tox.ini: torch env)")
    pytester.makepyfile(test_timed="def test_timed(): pass")
    line = "dlperf: pytest-xdist with 2 workers: scenarios measure one at a time, but the other workers' tests *"
    run(pytester, "-n", "2").stdout.fnmatch_lines([line])
    run(pytester, "-n", "1").stdout.no_fnmatch_line("*pytest-xdist with*")
    run(pytester).stdout.no_fnmatch_line("*pytest-xdist with*")


@pytest.mark.framework("torch")
def test_require_baselines_fails_a_test_without_them(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_train=TRAIN_TEST)
    write_baseline(pytester, {"test_other.py::test_kept::fp32@smoke": {"throughput": record(5.0)}})
    result = run(pytester, "--dlperf-require-baselines")
    result.assert_outcomes(failed=1)
    hw = baseline_file(pytester).stem
    result.stdout.fnmatch_lines([
        "dlperf: profile smoke, *, missing baselines fail",
        f"dlperf: hardware {hw}, compared with */{hw}.json (1 smoke entry)",
        f"*test_train.py::test_train: no baseline for fp32 throughput, fp32 peak_host_memory on {hw} "
        f"(*/{hw}.json), and --dlperf-require-baselines is set. Record them on this machine with "
        "pytest --update-baselines, then commit baselines/",
        f"No baseline on {hw} for: test_train.py::test_train::fp32",
    ])


SKIPPED_ON_CPU = """
import pytest

@pytest.mark.gpu
def test_on_gpu(dlperf, gpu):
    dlperf.check(dlperf.run(dlperf.scenario("torch", "resnet18")))
"""


@pytest.mark.parametrize("require, code", [((), 0), (("--dlperf-require-baselines",), 1)])
def test_a_run_that_judged_nothing_says_so_and_fails_where_baselines_are_required(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, require: tuple[str, ...], code: int) -> None:
    """A GPU runner that sees no GPU skips every test: the summary says nothing was judged, not that
    anything passed, and --dlperf-require-baselines turns that run into a failure."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    pytester.makepyfile(test_gpu=SKIPPED_ON_CPU)
    result = run(pytester, "-m", "gpu", *require)
    result.assert_outcomes(skipped=1)
    assert result.ret == code
    result.stdout.fnmatch_lines([
        "dlperf: NOT JUDGED: no figure compared with a baseline, no test measured a figure (*); "
        + ("--dlperf-require-baselines makes this run fail." if require else
           "record baselines with --update-baselines, or add --dlperf-require-baselines to fail such a run."),
    ])


def test_collecting_only_judges_nothing_and_says_nothing_of_it(pytester: pytest.Pytester) -> None:
    """--collect-only runs no test: no NOT JUDGED line, and --dlperf-require-baselines does not fail it."""
    pytester.makepyfile(test_gpu=SKIPPED_ON_CPU)
    result = run(pytester, "--collect-only", "--dlperf-require-baselines")
    assert result.ret == 0
    assert "NOT JUDGED" not in result.stdout.str()


@pytest.mark.slow
@pytest.mark.framework("torch")
def test_update_then_compare_round_trip(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_train=TRAIN_TEST)
    other_machine = pytester.path / "baselines" / "gpu-some-other-x8.json"
    other_machine.parent.mkdir()
    other_machine.write_text(json.dumps({"format": 1, "entries": {"t::fp32@full": {"throughput": record(1.0)}}}))
    write_baseline(pytester, {"test_other.py::test_kept::fp32@smoke": {"throughput": record(5.0)}})

    result = run(pytester, "--update-baselines")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*baselines written to*"])
    data = json.loads(baseline_file(pytester).read_text())
    entry = data["entries"]["test_train.py::test_train::fp32@smoke"]
    assert set(entry) >= {"throughput", "peak_host_memory"}
    assert entry["throughput"]["n"] == 3 and len(entry["throughput"]["samples"]) == 3
    assert entry["throughput"]["software"]["framework"] == "torch"
    assert "test_other.py::test_kept::fp32@smoke" in data["entries"], "another test's entry was dropped"
    assert json.loads(other_machine.read_text())["entries"], "another machine's file was touched"
    text = baseline_file(pytester).read_text()
    assert text == json.dumps(data, sort_keys=True, indent=2) + "\n", "not deterministic JSON"
    assert not [p for p in baseline_file(pytester).parent.iterdir() if p.name.endswith(".tmp")]

    assert data["format"] == 2 and len(entry["throughput"]["runs"]) == 1
    # A second recording adds a run to each figure's history (the gate's noise comes from it); on a busy
    # machine it may land beyond the gate and start the judged runs again, the first kept in older_runs.
    run(pytester, "--update-baselines").assert_outcomes(passed=1)
    again = json.loads(baseline_file(pytester).read_text())["entries"]["test_train.py::test_train::fp32@smoke"]
    runs = again["throughput"]["runs"]
    kept = again["throughput"].get("older_runs", []) + runs
    assert len(kept) == 2 and kept[0] == entry["throughput"]["runs"][0], "the first run's record was lost"
    assert again["throughput"]["value"] == runs[-1]["value"]

    # Compared now (the verdict itself depends on this machine's noise; tests below force one).
    result = run(pytester)
    result.stdout.fnmatch_lines(["test_train.py::test_train::fp32*throughput*samples/s*[0-9]*%*",
                                 "2 metrics compared with baselines.*0 missing baselines. 1 unused baseline."])


@pytest.mark.framework("torch")
def test_regression_fails_with_numbers_on_the_first_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_train=TRAIN_TEST)
    write_baseline(pytester, {"test_train.py::test_train::fp32@smoke": {"throughput": record(1e6, runs=5)}})
    result = run(pytester, "--junitxml=report.xml", "-q")
    result.assert_outcomes(failed=1)
    # -q lists the regressed figure and counts the rest (peak memory, without a baseline)
    result.stdout.fnmatch_lines(["test_train.py::test_train::fp32  throughput * regression",
                                 "(1 figure neither a regression nor an improvement: listed without -q, and in the "
                                 "JUnit report)"])
    assert "peak_host_memory" not in result.stdout.str().split("dlperf summary")[-1]
    result.stdout.fnmatch_lines([
        "regression: fp32 throughput * samples/s vs baseline 1e+06 (-*%, catches *% 19 times in 20 (half the time at "
        "*%, tolerance *%, run-to-run "
        "*% over 5 recorded runs), p=*) [[]software changed since the baseline: framework_version 0.0-old -> *]",
        "Refresh with --update-baselines if the change is intended: "
        "pytest --update-baselines 'test_train.py::test_train'",
    ])
    (test,) = read_reports([pytester.path / "report.xml"])
    throughput = next(m for m in test.metrics if m.metric == "throughput")
    assert (test.test, throughput.verdict) == ("test_train.py::test_train", "regression")
    assert throughput.baseline == pytest.approx(1e6, rel=1e-3)
    assert throughput.runs == 5 and throughput.detectable is not None and throughput.noise is not None
    # The rounds travel with the report (dlperf compare judges two reports with this same rule).
    assert len(throughput.samples) == 3 and throughput.value == pytest.approx(sorted(throughput.samples)[1], rel=1e-5)
    assert throughput.declared_direction == "higher" and throughput.tolerance is not None
    assert throughput.detectable >= 1 - 1 / (1 + throughput.tolerance) and throughput.tolerance >= 0.1
    assert throughput.alpha is not None and throughput.df is not None


@pytest.mark.framework("torch")
def test_a_figure_with_one_recorded_run_is_judged_by_its_kind(pytester: pytest.Pytester) -> None:
    """One recorded run says nothing of its own noise; it borrows its kind's (here the stated CPU prior,
    nothing else being recorded), so a figure at a fraction of its baseline fails: never 'unknown'."""
    pytester.makepyfile(test_train=TRAIN_TEST)
    write_baseline(pytester, {"test_train.py::test_train::fp32@smoke": {"throughput": record(1e6)}})
    result = run(pytester, "--junitxml=report.xml")
    result.assert_outcomes(failed=1)
    prior = PRIORS["cpu"]["throughput"]
    # one run at the stated prior (10%, 4 df): caught half the time at about 41%, 19 times in 20 only
    # past a halving, so its gate prints as that; the figure, far below, fails all the same
    result.stdout.fnmatch_lines([f"regression: fp32 throughput * (-*%, catches a halving less than 19 times in 20 "
                                 f"(half the time at *%, tolerance 10.0%, run-to-run "
                                 f"{prior:.1%} over 1 recorded run), p=*"])
    (test,) = read_reports([pytester.path / "report.xml"])
    throughput = next(m for m in test.metrics if m.metric == "throughput")
    assert throughput.verdict == "regression" and throughput.runs == 1
    # JUnit holds the run's final judgement (after the run's shift, at its share of the error budget), as the
    # terminal's summary table prints it
    catches = "cannot" if throughput.detectable is None else f"{throughput.detectable:.1%}"
    result.stdout.fnmatch_lines([f"test_train.py::test_train::fp32  throughput * {catches} * regression"])


SHIFT_TEST = """
import pytest

@pytest.mark.framework("torch")
def test_all(dlperf):
    r = dlperf.run(dlperf.scenario("torch", "resnet18", image_size=32, batch_size=4, warmup_steps=1, rounds=2,
                                   steps_per_round=1))
    for label in "abcdefghij":
        dlperf.ledger.metric(label, "throughput", [84.0], "samples/s")
    dlperf.check(r)
"""


@pytest.mark.framework("torch")
def test_a_shift_of_every_figure_fails_the_run_when_no_figure_fails_alone(pytester: pytest.Pytester) -> None:
    """Ten throughputs 16% below their recorded runs: each is inside its own check's gate (the run's
    shift is unknown there), but together they are a shift beyond the one recorded runs show."""
    pytester.makepyfile(test_shift=SHIFT_TEST)
    rec = record(100.0, runs=3)
    rec["software"]["framework"] = "torch"
    write_baseline(pytester, {f"test_shift.py::test_all::{label}@smoke": {"throughput": rec}
                              for label in "abcdefghij"})
    # a CPU shift is held to 2.5 tolerances at least: at 5% that is 12.5%, so -16% is beyond it
    result = run(pytester, "--junitxml=report.xml", "-rf", "--dlperf-tolerance=0.05")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*every torch throughput figure moved -16.0% together on *(the median of 10 "
                                 "throughput figures; the run's shift catches *% 19 times in 20 (half the time at "
                                 "*%)): this machine or this framework "
                                 "changed*", "FAILED dlperf::run*"])
    tests = {t.test: t for t in read_reports([pytester.path / "report.xml"])}
    assert tests["dlperf::run"].outcome == "failed"


FINAL_VERDICT_TEST = """
import pytest

@pytest.mark.framework("torch")
def test_all(dlperf):
    r = dlperf.run(dlperf.scenario("torch", "resnet18", image_size=32, batch_size=4, warmup_steps=1, rounds=2,
                                   steps_per_round=1))
    for label in "abcdefghi":
        dlperf.ledger.metric(label, "throughput", [116.0], "samples/s")
    dlperf.ledger.metric("j", "throughput", [90.0], "samples/s")
    dlperf.check(r)
"""


@pytest.mark.framework("torch")
def test_a_figure_the_run_s_shift_judges_again_reads_the_same_in_every_report(pytester: pytest.Pytester) -> None:
    """Nine throughputs 16% up and one 10% down: at its test's check the one is within its gate, after the run's
    shift it is 22% below the others, a regression. The terminal, JUnit and dlperf summary all say so."""
    from pytest_dlperf.reports.cli import main as dlperf_main

    pytester.makepyfile(test_final=FINAL_VERDICT_TEST)
    rec = record(100.0, runs=3)
    rec["software"]["framework"] = "torch"
    write_baseline(pytester, {f"test_final.py::test_all::{label}@smoke": {"throughput": rec}
                              for label in "abcdefghij"})
    result = run(pytester, "--junitxml=report.xml", "-rf", "--dlperf-tolerance=0.05")
    result.assert_outcomes(passed=1, failed=1)  # the test's own check passed; dlperf::run failed on j
    result.stdout.fnmatch_lines(["*regression: j throughput *"])
    (test,) = [t for t in read_reports([pytester.path / "report.xml"]) if t.test == "test_final.py::test_all"]
    verdicts = {m.label: m.verdict for m in test.metrics if m.metric == "throughput"}
    assert verdicts["j"] == "regression", verdicts
    summary = pytester.path / "summary.md"
    assert dlperf_main(["summary", str(pytester.path / "report.xml"), "-o", str(summary)]) in (0, 1)
    text = summary.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if "| j | throughput |" in line]
    assert "1 regression beyond the figures' noise" in text  # j's row is the one under that heading
    assert rows and any("regression" in row for row in rows) and not any("inconclusive" in row for row in rows), rows
    brief = pytester.path / "brief.md"
    dlperf_main(["summary", "--brief", str(pytester.path / "report.xml"), "-o", str(brief)])
    said = brief.read_text(encoding="utf-8")
    assert said.count("1 regression beyond its noise") == 1 and "| **-10.0%** |" in said  # j's row, -10%


@pytest.mark.framework("torch")
def test_improvement_is_reported_not_failed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_train=TRAIN_TEST)
    write_baseline(pytester, {"test_train.py::test_train::fp32@smoke": {"throughput": record(1e-3, runs=5)}})
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*throughput*improvement*", "*1 improvement.*",
                                 "Improvements beyond their noise: refresh with --update-baselines*"])


@pytest.mark.framework("torch")
def test_a_per_metric_tolerance_marker_loosens_that_metric_only(pytester: pytest.Pytester) -> None:
    """``tolerance(throughput=0.6)``: a noisy speed figure need not loosen memory along with it."""
    marked = TRAIN_TEST.replace('@pytest.mark.framework("torch")\n',
                                '@pytest.mark.framework("torch")\n@pytest.mark.tolerance(throughput=0.6)\n')
    assert marked != TRAIN_TEST
    pytester.makepyfile(test_train=marked)
    result = run(pytester, "--dlperf-tolerance=0.05", "--junitxml=report.xml")
    result.assert_outcomes(passed=1)
    (test,) = read_reports([pytester.path / "report.xml"])
    tolerance = {m.metric: m.tolerance for m in test.metrics}
    assert tolerance["throughput"] == pytest.approx(0.6)
    assert tolerance["peak_host_memory"] == pytest.approx(0.05)  # the run's 5%: memory is not loosened


@pytest.mark.parametrize("content, problem", [
    ("{not json", "it is not valid JSON"),
    ('{"format": 1, "entries": {"t": {"throughput": {"value": "fast", "direction": "higher"}}}}',
     "has no finite 'value'"),
    ('{"format": 99, "entries": {}}', "format is 99"),
])
def test_corrupt_baseline_file_is_a_clear_error(pytester: pytest.Pytester, content: str, problem: str) -> None:
    path = baseline_file(pytester)
    path.parent.mkdir()
    path.write_text(content)
    pytester.makepyfile("def test_x(): pass")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*baseline file *{path.name} is unusable: *{problem}*delete it and run with --update-baselines*"])
    assert "Traceback" not in result.stderr.str()


CRASH_TEST = """
import pytest

@pytest.mark.framework("torch")
def test_{name}(dlperf):
    s = dlperf.scenario("torch", "resnet18", image_size=32, batch_size=4, rounds=3, steps_per_round=2,
                        timeout={timeout}, launch_prefix={prefix!r}, env={{"DLPERF_SELFTEST_MARK": "{mark}"}})
    dlperf.run(s)

def test_after():
    pass
"""


def _processes_with(mark: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if f"DLPERF_SELFTEST_MARK={mark}".encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def test_crashing_child_fails_that_test_only(pytester: pytest.Pytester) -> None:
    prefix = ["python3", "-c", "import os, signal, sys; print('about to crash'); sys.stdout.flush(); "
                               "os.kill(os.getpid(), signal.SIGSEGV)"]
    pytester.makepyfile(CRASH_TEST.format(name="crash", timeout=60, prefix=prefix, mark="crash"))
    result = run(pytester)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*scenario 'fp32' failed: crashed: killed by SIGSEGV*",
                                 "*last output of the child*", "*about to crash*"])


@pytest.mark.serial  # its 3-s timeout also bounds its wait for the CPU lock another test may hold
def test_hanging_child_is_killed_with_its_whole_group(pytester: pytest.Pytester) -> None:
    mark = f"hang-{os.getpid()}"
    prefix = ["python3", "-c", "import subprocess, time; subprocess.Popen(['sleep', '300']); "
                               "print('hanging now', flush=True); time.sleep(300)"]
    pytester.makepyfile(CRASH_TEST.format(name="hang", timeout=3, prefix=prefix, mark=mark))
    result = run(pytester)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*scenario 'fp32' failed: timed out: no result after 3 s; the child was killed*",
                                 "*hanging now*"])
    assert _processes_with(mark) == [], "a process of the hung scenario outlived its test"


@pytest.mark.slow
@pytest.mark.framework("torch")
def test_invalid_model_and_nan_loss_are_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.framework("torch")
        def test_bad_model(dlperf):
            dlperf.run(dlperf.scenario("torch", "resnet_nope", image_size=32, batch_size=2, rounds=1,
                                       steps_per_round=1))

        @pytest.mark.framework("torch")
        def test_nan(dlperf):
            dlperf.run(dlperf.scenario("torch", "resnet18", image_size=32, batch_size=4, rounds=2,
                                       steps_per_round=2, warmup_steps=0, lr=1e12))
    """)
    result = run(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*scenario 'fp32' failed: invalid scenario: ScenarioError: torchvision has no model 'resnet_nope'*",
        "*scenario 'fp32' failed: non-finite loss: NonFiniteLoss: loss became * at step *, no loss scaling*",
    ])


def test_bad_scenario_setting_fails_that_test_with_the_allowed_values(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_bad(dlperf):
            dlperf.scenario("torch", "resnet18", precision="fp8")

        def test_after():
            pass
    """)
    result = run(pytester)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*bad scenario: precision='fp8' is not supported; use one of: fp32, tf32*"])
    assert "Traceback" not in result.stdout.str()


@pytest.mark.slow
@pytest.mark.framework("torch")
def test_unused_baselines_are_counted_on_unfiltered_runs_only(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_train=TRAIN_TEST)
    write_baseline(pytester, {"test_gone.py::test_removed::fp32@smoke": {"throughput": record(5.0)},
                              "test_gone.py::test_removed::fp32@full": {"throughput": record(5.0)}})
    result = run(pytester)
    result.stdout.fnmatch_lines(["*1 unused baseline.*",
                                 "Baselines of tests that no longer exist *: test_gone.py::test_removed::fp32@smoke"])
    result = run(pytester, "-k", "train")
    assert "unused baseline" not in result.stdout.str()


def test_cpu_scenario_waits_for_another_run_on_the_same_cpus(pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs on one machine take turns on the CPUs; the waiting one says for whom it waits."""
    import subprocess
    import sys
    import time

    locks = pytester.path / "locks"
    monkeypatch.setenv("DLPERF_LOCK_DIR", str(locks))
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time\n"
                               "from pathlib import Path\n"
                               "from pytest_dlperf.processes.devicelock import device_lock\n"
                               "with device_lock(['cpu'], owner='other::run', directory=Path(sys.argv[1])):\n"
                               "    print('held', flush=True)\n"
                               "    time.sleep(60)\n", str(locks)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        pytester.makepyfile(CRASH_TEST.format(name="waits", timeout=2, prefix=[], mark="waits"))
        started = time.monotonic()
        result = run(pytester)
        assert time.monotonic() - started < 50  # gave up after the scenario's timeout, not the holder's minute
    finally:
        holder.kill()
        holder.wait()
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([f"*the CPUs are busy: {locks / 'cpu.lock'} is held by PID {holder.pid}*other::run*"])
    result.stdout.fnmatch_lines(
        ["scenario 'fp32' not run: the CPUs still busy after 2 s*run the two on different machines"])
    assert "During handling" not in result.stdout.str()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 or more CPUs to tell a pinned thread apart")
def test_a_scenario_that_pins_its_threads_is_filed_under_this_machine(pytester: pytest.Pytester) -> None:
    """OMP_PROC_BIND/OMP_PLACES pin the child's main thread to one core once the framework starts its
    OpenMP runtime; its figures still belong to this machine's baseline file, not a one-CPU machine's."""
    pytester.makepyfile(TRAIN_TEST.replace(
        "steps_per_round=2)", "steps_per_round=2,\n"
                              "                        env={'OMP_PROC_BIND': 'close', 'OMP_PLACES': 'cores'})"))
    run(pytester, "--update-baselines").assert_outcomes(passed=1)
    assert sorted(p.name for p in (pytester.path / "baselines").glob("*.json")) == [f"{HW}.json"]


@pytest.mark.slow
def test_a_test_reads_its_own_stored_figure_and_knows_when_it_records(pytester: pytest.Pytester) -> None:
    """``dlperf.ledger.stored(result, metric, label=)`` is the recorded baseline of one of the test's figures
    (a derived one by its label), None before any is recorded; ``dlperf.ledger.recorded_runs`` finds any test's
    recorded values by node id before anything runs; ``dlperf.ledger.updating`` says whether the run records.
    The tuning test plans its group and fails a setting the baseline recorded as faster with them."""
    pytester.makepyfile(test_train="""
import pytest
from pytest_dlperf.judging.stats import PairedRatio

@pytest.mark.framework("torch")
def test_train(dlperf):
    s = dlperf.scenario("torch", "resnet18", image_size=32, batch_size=4, warmup_steps=1, rounds=2,
                        steps_per_round=1)
    r = dlperf.run(s)
    dlperf.ledger.speedup("tuned", PairedRatio((1.3,) * 4, 1.3, 1.2, 1.4, 0.95, units=2))
    stored = dlperf.ledger.stored(r, "speedup", label="tuned")
    mine = dlperf.ledger.stored(r, "throughput")
    print("STORED", None if stored is None else stored.runs, mine is not None, dlperf.ledger.updating)
    print("BY NODE ID", dlperf.ledger.recorded_runs("test_train.py::test_train", "tuned", "speedup"),
          dlperf.ledger.recorded_runs("test_train.py::test_other", "tuned", "speedup"))
    dlperf.check(r)
""")
    first = run(pytester, "-s", "--update-baselines")
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["*STORED None False True*", "*BY NODE ID () ()*"])
    # What is checked here is the ledger, not the speed: a one-step round judged against one recorded
    # run could read as a regression on a busy 2-core machine, so only a tenfold slowdown may fail it.
    second = run(pytester, "-s", "--dlperf-tolerance=0.9")
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(["*STORED (1.3,) True False*", "*BY NODE ID (1.3,) ()*"])


UNJUDGED_TEST = """
import os

from pytest_dlperf.result import TrainingResult, metric_from


def test_async(dlperf):
    s = dlperf.scenario("torch", "resnet18", label="async")
    top1 = float(os.environ["TOP1"])
    metrics = {"throughput": metric_from("throughput", [100.0, 101.0, 99.0], "samples/s"),
               "accuracy_top1": metric_from("accuracy_top1", [top1], "fraction")}
    env = {"hardware_key": "selftest-cpu", "framework": "torch"}
    dlperf.check(TrainingResult(s, metrics, [2.0, 1.0], env), unjudged=os.environ["UNJUDGED"].split())
"""


def test_an_unjudged_metric_is_reported_but_neither_recorded_nor_held_to_a_baseline(pytester, monkeypatch):
    """Three recordings at top-1 0.98, then 0.43: judged, a regression; unjudged, the test passes, the report
    still shows the value, and the baselines never held it. A name that is no judged metric is a usage error."""
    pytester.makepyfile(test_async=UNJUDGED_TEST)
    monkeypatch.setenv("TOP1", "0.98")
    monkeypatch.setenv("UNJUDGED", "")
    for _ in range(3):
        run(pytester, "--update-baselines").assert_outcomes(passed=1)
    monkeypatch.setenv("TOP1", "0.43")
    run(pytester).assert_outcomes(failed=1)
    monkeypatch.setenv("UNJUDGED", "accuracy_top1")
    run(pytester, "--junitxml=judged.xml").assert_outcomes(passed=1)
    (case,) = read_reports([pytester.path / "judged.xml"])
    shown = {m.metric: m for m in case.metrics}
    assert shown["accuracy_top1"].value == pytest.approx(0.43) and shown["accuracy_top1"].verdict is None
    # judged as ever; three alike recordings of it borrow the stated 10% CPU prior, which cannot bound a
    # change within its 10% tolerance: inconclusive, never a failure
    assert shown["throughput"].verdict == "inconclusive"
    run(pytester, "--update-baselines").assert_outcomes(passed=1)
    stored = json.loads((pytester.path / "baselines" / "selftest-cpu.json").read_text())
    (entry,) = stored["entries"].values()
    assert "accuracy_top1" not in entry and "throughput" in entry
    monkeypatch.setenv("UNJUDGED", "accuracy")
    run(pytester).stdout.fnmatch_lines(["*unjudged=...): accuracy is not a judged metric; judged: throughput*"])
