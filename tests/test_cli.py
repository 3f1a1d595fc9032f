"""The ``dlperf`` command on JUnit reports the tests write, and on one a real pytest run writes."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence
from xml.sax.saxutils import quoteattr

import pytest
from junitparser import JUnitXml

from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.reports import cli
from pytest_dlperf.reports.junit import read_reports
from pytest_dlperf.reports.records import direction_of

HW = "cpu-test-4cpu"


def metric_props(label: str, metric: str, value: float, unit: str, verdict: str | None = None,
                 baseline: float | None = None, iqr: float | None = None, n: int = 5) -> list[tuple[str, str]]:
    props = [(f"dlperf.{label}.{metric}", f"{value:.6g}"), (f"dlperf.{label}.{metric}.unit", unit),
             (f"dlperf.{label}.{metric}.n", str(n))]
    if iqr is not None:
        props.append((f"dlperf.{label}.{metric}.iqr", f"{iqr:.6g}"))
    if verdict is not None:
        props.append((f"dlperf.{label}.{metric}.verdict", verdict))
    if baseline is not None:
        props.append((f"dlperf.{label}.{metric}.baseline", f"{baseline:.6g}"))
    return props


def case(name: str, props: Sequence[tuple[str, str]], failure: str | None = None, skipped: str | None = None,
         classname: str = "perf_tests.test_fake") -> str:
    body = "<properties>" + "".join(f"<property name={quoteattr(k)} value={quoteattr(v)} />" for k, v in props)
    body += "</properties>"
    if failure is not None:
        body += f"<failure message={quoteattr(failure)}>{failure}\n  traceback...</failure>"
    if skipped is not None:
        body += f'<skipped type="pytest.skip" message={quoteattr(skipped)} />'
    return f'<testcase classname="{classname}" name="{name}" time="1.0">{body}</testcase>'


def write_report(path: Path, cases: Sequence[str], hostname: str = "runner") -> Path:
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
        f'<testsuite name="pytest" errors="0" failures="0" skipped="0" tests="{len(cases)}" time="1" '
        f'hostname="{hostname}">' + "".join(cases) + "</testsuite></testsuites>",
        encoding="utf-8",
    )
    return path


def amp_case(fp32: float = 100.0, amp: float = 210.0, step_time: float = 0.16, memory: float = 2.0e9,
             verdicts: tuple[str, str] = ("ok", "ok"), baselines: tuple[float, float] = (100.0, 200.0),
             failure: str | None = None) -> str:
    props = [("dlperf.hardware", HW),
             ("dlperf.fp32.scenario", "torch/resnet18 fp32 on cpu, batch 16, 64px, 5x4 steps after 3 warm-up"),
             ("dlperf.fp32.software", "framework=torch framework_version=2.4.0 python=3.11.7")]
    props += metric_props("fp32", "throughput", fp32, "samples/s", verdicts[0], baselines[0], iqr=4.0)
    props += metric_props("fp32", "step_time", step_time, "s", "ok", 0.16, iqr=0.004, n=20)
    props += metric_props("fp32", "peak_host_memory", memory, "bytes", "ok", 2.0e9, iqr=0.0, n=1)
    props += metric_props("fp32", "achieved_tflops", 0.12, "TFLOP/s")
    props += metric_props("amp_bf16", "throughput", amp, "samples/s", verdicts[1], baselines[1], iqr=6.0)
    props += [("dlperf.amp_vs_fp32.speedup", f"{amp / fp32:.6g}"), ("dlperf.amp_vs_fp32.speedup.verdict", "ok"),
              ("dlperf.amp_vs_fp32.speedup.baseline", "2")]
    return case("test_amp[resnet18]", props, failure=failure)


def scaling_case() -> str:
    props = [("dlperf.hardware", HW)]
    for workers, value in ((1, 100.0), (2, 190.0), (4, 340.0)):
        label = f"workers{workers}"
        props.append((f"dlperf.{label}.scenario", f"torch/resnet18 fp32 on cpu, {workers} workers"))
        props += metric_props(label, "throughput", value, "samples/s", "missing", iqr=3.0)
    props += [("dlperf.workers4.scaling_efficiency", "0.85")]
    return case("test_ddp_scaling", props, classname="perf_tests.test_distributed")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- reading -----------------------------------------------------------------------------------

def test_reading_a_report_recovers_node_ids_labels_and_every_metric_field(tmp_path):
    report = write_report(tmp_path / "r.xml", [amp_case(), case("test_plain", [])])
    tests = read_reports([report])
    amp, plain = tests
    assert amp.test == "perf_tests/test_fake.py::test_amp[resnet18]"
    assert amp.hardware == HW and amp.outcome == "passed"
    assert amp.labels == ["fp32", "amp_bf16", "amp_vs_fp32"]
    assert amp.scenarios["fp32"].startswith("torch/resnet18 fp32")
    thr = next(m for m in amp.metrics if (m.label, m.metric) == ("fp32", "throughput"))
    assert (thr.value, thr.unit, thr.iqr, thr.n, thr.verdict, thr.baseline) == (100.0, "samples/s", 4.0, 5, "ok", 100.0)
    speedup = next(m for m in amp.metrics if m.metric == "speedup")
    assert speedup.value == pytest.approx(2.1) and speedup.unit == "" and speedup.delta == pytest.approx(0.05)
    assert plain.metrics == []


@pytest.mark.parametrize("name, direction", [
    ("throughput", "higher"), ("speedup", "higher"), ("accuracy_top1", "higher"), ("scaling_efficiency", "higher"),
    ("achieved_tflops", "higher"), ("step_time", "lower"), ("peak_device_memory", "lower"),
    ("time_to_accuracy", "lower"), ("loss", None),
])
def test_direction_follows_the_metric_name(name, direction):
    assert direction_of(name) == direction


# --- summary -----------------------------------------------------------------------------------

def test_summary_shows_each_metric_with_unit_baseline_delta_and_verdict(tmp_path, capsys):
    report = write_report(tmp_path / "r.xml", [amp_case(fp32=90.0, verdicts=("regression", "ok"))])
    code, out, err = run(capsys, "summary", str(report))
    assert code == 0 and err == ""
    assert "| fp32 | throughput | 90 (IQR 4) | samples/s | 100 | -10.0% | 🔴 regression |" in out
    assert "| amp_bf16 | throughput | 210 (IQR 6) | samples/s | 200 | +5.0% | ok |" in out
    assert "| fp32 | achieved_tflops | 0.12 | TFLOP/s | - | - | recorded |" in out
    assert "`perf_tests/test_fake.py::test_amp[resnet18]` on `cpu-test-4cpu`" in out
    assert "- **fp32**: torch/resnet18 fp32 on cpu, batch 16" in out


def test_summary_counts_verdicts_and_quotes_each_failure_first_line(tmp_path, capsys):
    first = "regression: fp32 throughput 80 samples/s vs baseline 100 (-20.0%, tolerance 10.0%)"
    cpu = write_report(tmp_path / "cpu.xml", [
        amp_case(fp32=80.0, verdicts=("regression", "improvement"), failure=first),
        case("test_skipped", [], skipped="needs a GPU"),
    ])
    other = write_report(tmp_path / "other.xml", [scaling_case()])
    code, out, _ = run(capsys, "summary", str(cpu), str(other))
    assert code == 0
    assert "**3 tests**: 1 passed, 1 failed, 1 skipped" in out
    assert "1 regression, 1 improvement, 3 missing baselines" in out
    assert f"- `perf_tests/test_fake.py::test_amp[resnet18]`: {first}" in out
    assert "traceback..." not in out
    assert "record them with the *update baselines* workflow" in out


def test_summary_output_appends_to_a_file(tmp_path, capsys):
    report = write_report(tmp_path / "r.xml", [amp_case()])
    target = tmp_path / "step_summary.md"
    target.write_text("earlier step\n", encoding="utf-8")
    code, out, _ = run(capsys, "summary", str(report), "--output", str(target))
    assert code == 0 and out == ""
    text = target.read_text(encoding="utf-8")
    assert text.startswith("earlier step\n## dlperf results")


# --- merge -------------------------------------------------------------------------------------

def test_merge_keeps_every_runner_s_tests_and_properties(tmp_path, capsys):
    cpu = write_report(tmp_path / "cpu.xml", [amp_case(failure="regression: x")], hostname="cpu-runner")
    gpu = write_report(tmp_path / "gpu.xml", [scaling_case()], hostname="gpu-runner")
    out_path = tmp_path / "merged.xml"
    code, out, _ = run(capsys, "merge", str(out_path), str(cpu), str(gpu))
    assert code == 0
    assert "2 tests (1 failed, 0 errors, 0 skipped) from 2 reports" in out
    merged = JUnitXml.fromfile(str(out_path))
    assert (merged.tests, merged.failures) == (2, 1)
    assert sorted(s.hostname for s in merged) == ["cpu-runner", "gpu-runner"]
    tests = read_reports([out_path])
    assert {t.test for t in tests} == {"perf_tests/test_fake.py::test_amp[resnet18]",
                                       "perf_tests/test_distributed.py::test_ddp_scaling"}
    assert len([m for t in tests for m in t.metrics]) == len([m for t in read_reports([cpu, gpu]) for m in t.metrics])


def test_merge_into_a_missing_folder_is_a_clear_error(tmp_path, capsys):
    report = write_report(tmp_path / "r.xml", [amp_case()])
    code, _, err = run(capsys, "merge", str(tmp_path / "nope" / "m.xml"), str(report))
    assert code == 2 and "no such directory" in err


# --- compare -----------------------------------------------------------------------------------

def history_of(tmp_path: Path, make=None, jitter=(0.99, 1.01, 1.0)) -> list[str]:
    """``--history`` and three earlier reports of the same test, each figure within 1%."""
    make = make or (lambda f: amp_case(fp32=100.0 * f, amp=210.0 * f, step_time=0.16 * f, memory=2.0e9 * f))
    return ["--history"] + [str(write_report(tmp_path / f"earlier{i}.xml", [make(f)])) for i, f in enumerate(jitter)]


def test_compare_exits_1_when_throughput_fell_beyond_its_noise(tmp_path, capsys):
    old = write_report(tmp_path / "old.xml", [amp_case(fp32=100.0)])
    new = write_report(tmp_path / "new.xml", [amp_case(fp32=90.0)])
    code, out, _ = run(capsys, "compare", str(old), str(new), *history_of(tmp_path))
    assert code == 1
    row = next(line for line in out.splitlines() if "::fp32" in line and " throughput " in line)
    assert "100 samples/s" in row and "90 samples/s" in row and "-10.0%" in row and "REGRESSION" in row
    assert "1 regression," in out


def test_compare_without_noise_calls_a_change_inconclusive(tmp_path, capsys):
    """Two single runs without recorded noise are judged at the stated prior of their device: a 10%
    drop is inconclusive (exit 0), a 50% loss is not."""
    old = write_report(tmp_path / "old.xml", [amp_case(fp32=100.0)])
    new = write_report(tmp_path / "new.xml", [amp_case(fp32=90.0)])
    code, out, _ = run(capsys, "compare", str(old), str(new))
    row = next(line for line in out.splitlines() if "::fp32" in line and " throughput " in line)
    assert code == 0 and "inconclusive" in row and "noise not recorded" in row and "0 regressions" in out
    halved = write_report(tmp_path / "halved.xml", [amp_case(fp32=50.0)])
    code, out, _ = run(capsys, "compare", str(old), str(halved))
    assert code == 1 and "1 regression," in out


def test_compare_is_direction_aware(tmp_path, capsys):
    old = write_report(tmp_path / "old.xml", [amp_case(fp32=100.0, step_time=0.16, memory=2.0e9)])
    faster = write_report(tmp_path / "faster.xml", [amp_case(fp32=120.0, amp=252.0, step_time=0.13)])
    code, out, _ = run(capsys, "compare", str(old), str(faster), *history_of(tmp_path))
    assert code == 0, out
    assert "REGRESSION" not in out and out.count("improvement") >= 2
    # Step time and memory going up are regressions even though the numbers grow.
    slower = write_report(tmp_path / "slower.xml", [amp_case(step_time=0.2, memory=2.5e9)])
    code, out, _ = run(capsys, "compare", str(old), str(slower), *history_of(tmp_path))
    assert code == 1
    worse = [line.split()[1] for line in out.splitlines() if "REGRESSION" in line]
    assert sorted(worse) == ["peak_host_memory", "step_time"]


def test_compare_threshold_decides_and_is_validated(tmp_path, capsys):
    old = write_report(tmp_path / "old.xml", [amp_case(fp32=100.0)])
    new = write_report(tmp_path / "new.xml", [amp_case(fp32=93.0)])
    history = history_of(tmp_path, jitter=(0.998, 1.002, 1.0, 0.999, 1.001))
    assert run(capsys, "compare", str(old), str(new), "--threshold", "0.05", *history)[0] == 1
    assert run(capsys, "compare", str(old), str(new), "--threshold", "0.1", *history)[0] == 0
    with pytest.raises(SystemExit) as exc:
        cli.main(["compare", str(old), str(new), "--threshold", "5%"])
    assert exc.value.code == 2
    assert "give a fraction such as 0.05" in capsys.readouterr().err


def test_compare_lists_metrics_present_on_one_side_only(tmp_path, capsys):
    old = write_report(tmp_path / "old.xml", [amp_case()])
    new = write_report(tmp_path / "new.xml", [amp_case(), scaling_case()])
    code, out, _ = run(capsys, "compare", str(old), str(new))
    assert code == 0
    assert out.count("only in NEW") == 4  # three throughputs and one efficiency
    assert f"4 only in {new}" in out


def test_compare_of_reports_without_a_common_metric_is_an_error(tmp_path, capsys):
    old = write_report(tmp_path / "old.xml", [amp_case()])
    new = write_report(tmp_path / "new.xml", [scaling_case()])
    code, out, err = run(capsys, "compare", str(old), str(new))
    assert code == 2 and out == ""
    assert "have no metric in common" in err


def sampled_case(label: str, metric: str, samples: Sequence[float], direction: str | None = "higher",
                 unit: str = "samples/s", interval: tuple[float, float] | None = None) -> str:
    """A report as the plugin writes it now: median, direction and every round's figure."""
    ordered = sorted(samples)
    median = ordered[len(ordered) // 2] if len(ordered) % 2 else sum(ordered[len(ordered) // 2 - 1:][:2]) / 2
    props = [("dlperf.hardware", HW), (f"dlperf.{label}.{metric}", f"{median:.6g}"),
             (f"dlperf.{label}.{metric}.unit", unit), (f"dlperf.{label}.{metric}.n", str(len(samples))),
             (f"dlperf.{label}.{metric}.samples", " ".join(f"{x:.6g}" for x in samples)),
             (f"dlperf.{label}.{metric}.verdict", "ok")]
    if direction:
        props.append((f"dlperf.{label}.{metric}.direction", direction))
    if interval:
        props.append((f"dlperf.{label}.{metric}.interval", f"{interval[0]:.6g} {interval[1]:.6g}"))
    return case("test_sampled", props)


def compare_once(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
                 *extra: str) -> tuple[int, str]:
    code, out, _ = run(capsys, "compare", str(write_report(tmp_path / "old.xml", [old])),
                       str(write_report(tmp_path / "new.xml", [new])), *extra)
    return code, out


def test_compare_judges_by_the_run_to_run_noise_of_the_history(tmp_path, capsys):
    """The same -10% against a history that drifts 10% run to run is inconclusive, against one that
    varies 0.5% it is worse: each figure by its own noise."""
    old, new = amp_case(fp32=100.0), amp_case(fp32=90.0)
    code, out = compare_once(tmp_path, capsys, old, new, *history_of(tmp_path, jitter=(0.85, 1.1, 0.95, 1.05)))
    row = next(line for line in out.splitlines() if "::fp32" in line and " throughput " in line)
    assert code == 0 and "inconclusive" in row, out
    code, out = compare_once(tmp_path, capsys, old, new, *history_of(tmp_path, jitter=(0.995, 1.005, 1.0)))
    row = next(line for line in out.splitlines() if "::fp32" in line and " throughput " in line)
    # the gate: the tolerance's bound (a 4.8% loss) and the quiet history's noise above it, caught 19 times in 20
    assert code == 1 and "REGRESSION (p=" in row and "±5.8%" in row, out


def test_compare_gives_the_same_verdict_as_the_tests(tmp_path, capsys):
    from pytest_dlperf.judging.baselines import Baseline
    from pytest_dlperf.judging.verdict import compare
    from pytest_dlperf.result import metric_from

    runs = (99.0, 101.0, 100.5, 99.5, 100.0)
    for tolerance in (0.05, 0.1):
        baseline = Baseline(100.0, "samples/s", "higher", (100.0,), 0.0, {}, "", runs=runs)
        expected = compare("t", "fp32", metric_from("throughput", [94.0], "samples/s"), baseline, tolerance).status
        history = history_of(tmp_path, lambda f: amp_case(fp32=100.0 * f), jitter=[r / 100 for r in runs[:-1]])
        code, out = compare_once(tmp_path, capsys, amp_case(fp32=100.0), amp_case(fp32=94.0),
                                 "--tolerance", str(tolerance), *history)
        assert {"regression": 1, "ok": 0}[expected] == code, (tolerance, expected, out)
    assert expected == "ok"  # 6% worse is within 10%


def test_compare_takes_the_direction_from_the_report_not_the_name(tmp_path, capsys):
    # "loss" names no direction; the report says lower is better, so a rise is worse.
    def loss(value):
        return sampled_case("fp32", "final_loss", [value], direction="lower", unit="")
    history = history_of(tmp_path, loss, jitter=(0.99, 1.01, 1.0))
    code, out = compare_once(tmp_path, capsys, loss(1.0), loss(1.3), *history)
    assert code == 1 and "REGRESSION" in out and "direction from name" not in out
    # A metric named like a time but recorded higher-is-better is judged as recorded.
    def saved(value):
        return sampled_case("x", "time_saved", [value], direction="higher", unit="s")
    history = history_of(tmp_path, lambda f: saved(10 * f))
    code, out = compare_once(tmp_path, capsys, saved(10), saved(13), *history)
    assert code == 0 and " improvement" in out


def test_compare_of_old_reports_says_how_it_judged(tmp_path, capsys):
    """Reports without directions (older pytest-dlperf) are judged by the metric's name, and say so."""
    code, out = compare_once(tmp_path, capsys, amp_case(step_time=0.16), amp_case(step_time=0.2),
                             *history_of(tmp_path))
    assert code == 1
    assert "taken from the metric's name" in out
    row = next(line for line in out.splitlines() if " step_time " in line)
    assert "REGRESSION" in row and "direction from name" in row


def test_compare_judges_what_the_tests_judge_and_only_that(tmp_path, capsys):
    """A figure the tests record without judging (achieved TFLOP/s beside the throughput) is shown, not judged."""
    old = amp_case().replace('"dlperf.fp32.achieved_tflops" value="0.12"', '"dlperf.fp32.achieved_tflops" value="0.5"')
    code, out = compare_once(tmp_path, capsys, old, amp_case())
    row = next(line for line in out.splitlines() if " achieved_tflops " in line)
    assert code == 0 and "-76.0%" in row and "recorded (the tests do not judge it)" in row
    assert "1 recorded only" in out
    row = next(line for line in out.splitlines() if " peak_host_memory " in line)
    assert "1.863 GiB" in row


def test_compare_judges_a_paired_speedup_by_its_estimate(tmp_path, capsys):
    def speedup(value):
        return sampled_case("amp_vs_fp32", "speedup", [value * f for f in (1.0, 1.01, 0.99, 1.005, 0.995, 1.0, 1.0)],
                            unit="x", interval=(value * 0.99, value * 1.01))
    code, out = compare_once(tmp_path, capsys, speedup(2.0), speedup(1.5),
                             *history_of(tmp_path, lambda f: speedup(2 * f)))
    assert code == 1 and "-25.0%" in out and "REGRESSION" in out


def test_compare_on_a_real_report_judges_its_figures(tmp_path, capsys):
    """tests/data/perf-torch.xml: four tests of a CI-like run on a shared 2-core VM."""
    real = Path(__file__).parent / "data" / "perf-torch.xml"
    code, out, _ = run(capsys, "compare", str(real), str(real))
    assert code == 0
    assert "0 regressions, 0 improvements" in out and "direction from name" not in out
    # one run against one run at the stated CPU priors: nothing bounds a change within 5%, so every
    # judged figure is inconclusive (before "no change" needed its interval bounded, they read no change)
    judged = [line for line in out.splitlines() if line.endswith(" no change") or " inconclusive (" in line]
    assert len(judged) >= 15 and all("±" in line for line in judged)
    # The same report with the two-worker throughput halved, against two earlier runs 1% apart: worse.
    tests = read_reports([real])
    (m,) = [m for t in tests for m in t.metrics if (m.label, m.metric) == ("two_workers_loopback", "throughput")]
    text = real.read_text(encoding="utf-8")
    name = 'name="dlperf.two_workers_loopback.throughput" value='

    def scaled(factor: float) -> str:
        return text.replace(f'{name}"{m.value:.6g}"', f'{name}"{m.value * factor:.6g}"')
    assert scaled(0.5) != text
    for path, factor in (("slower.xml", 0.5), ("earlier1.xml", 0.99), ("earlier2.xml", 1.01)):
        (tmp_path / path).write_text(scaled(factor), encoding="utf-8")
    code, out, _ = run(capsys, "compare", str(real), str(tmp_path / "slower.xml"),
                       "--history", str(tmp_path / "earlier1.xml"), str(tmp_path / "earlier2.xml"))
    row = next(line for line in out.splitlines() if "::two_workers_loopback" in line and " throughput " in line)
    assert code == 1 and "-50.0%" in row and "REGRESSION (p=" in row, out


SLEEPY_STEP = """
import os, time
import torch

def make_step(scenario):
    model = torch.nn.Linear(4, 2)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    pause = 0.01 * (1 + float(os.environ.get("SLEEPY_SLOWDOWN", "0")))

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        time.sleep(pause)
        return loss.detach()

    return step
"""
SLEEPY_TEST = """
import pytest

@pytest.mark.tolerance(0.6)
def test_sleepy(dlperf):
    dlperf.check(dlperf.run(dlperf.scenario("torch", "sleepy", step="sleepy:make_step", batch_size=8,
                                            warmup_steps=1, rounds=3, steps_per_round=5)))
"""


@pytest.mark.serial  # verdicts on a step's time: a concurrent test changes them
@pytest.mark.framework("torch")
def test_compare_of_a_tolerance_marked_test_gives_the_verdicts_the_plugin_gave(pytester, capsys, monkeypatch):
    """Three recorded runs, then the step 20% and 300% longer under a 60% tolerance marker: ``dlperf compare``
    of the last recording against each judged report (the first two as --history) agrees with the plugin."""
    pytester.makepyfile(sleepy=SLEEPY_STEP, test_sleepy=SLEEPY_TEST)
    for i in (1, 2, 3):
        pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-baselines",
                                      f"--junitxml=rec{i}.xml").assert_outcomes(passed=1)
    history = [str(pytester.path / f"rec{i}.xml") for i in (1, 2)]
    seen = {}
    for slowdown, outcome in (("0.2", "passed"), ("3", "failed")):
        monkeypatch.setenv("SLEEPY_SLOWDOWN", slowdown)
        pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--junitxml=judged{slowdown}.xml"
                                      ).assert_outcomes(**{outcome: 1})
        judged = pytester.path / f"judged{slowdown}.xml"
        (figure,) = [m for t in read_reports([judged]) for m in t.metrics if m.metric == "throughput"]
        capsys.readouterr()  # pytester's own output
        code, out, _ = run(capsys, "compare", str(pytester.path / "rec3.xml"), str(judged), "--history", *history)
        row = next(line for line in out.splitlines() if " throughput " in line)
        shown = {"ok": "no change", "inconclusive": "inconclusive", "regression": "REGRESSION"}[figure.verdict]
        assert shown in row and code == (figure.verdict == "regression"), (figure.verdict, out)
        assert f"±{figure.tolerance:.1%}" in row or f"±{figure.detectable:.1%}" in row, out
        seen[slowdown] = figure.verdict
    # a step 20% longer is inside the marker's 60%: no change where its three runs bound it there, else
    # inconclusive (they borrow the stated 10% CPU prior, and a loaded machine widens them); 300% is not
    assert seen["0.2"] in ("ok", "inconclusive") and seen["3"] == "regression"


# --- bad input ---------------------------------------------------------------------------------

def bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    not_xml = tmp_path / "not.xml"
    not_xml.write_text("this is not xml", encoding="utf-8")
    html = tmp_path / "page.xml"
    html.write_text("<html><body/></html>", encoding="utf-8")
    plain = write_report(tmp_path / "plain.xml", [case("test_unit", [("owner", "me")])])
    return {
        "missing": (tmp_path / "absent.xml", "no such file"),
        "not-xml": (not_xml, "not valid XML"),
        "not-junit": (html, "not a JUnit XML report"),
        "no-dlperf": (plain, "no dlperf.* properties"),
    }


@pytest.mark.parametrize("kind", ["missing", "not-xml", "not-junit", "no-dlperf"])
@pytest.mark.parametrize("command", ["summary", "compare", "merge"])
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path, capsys, command, kind):
    path, expected = bad_inputs(tmp_path)[kind]
    good = write_report(tmp_path / "good.xml", [amp_case()])
    argv = {
        "summary": ["summary", str(path)],
        "compare": ["compare", str(good), str(path)],
        "merge": ["merge", str(tmp_path / "m.xml"), str(good), str(path)],
    }[command]
    code, _, err = run(capsys, *argv)
    if command == "merge" and kind == "no-dlperf":
        assert code == 0  # merging plain JUnit (e.g. unit-test reports) is fine
        return
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"dlperf {command}: error: {path}: ")
    assert expected in err


def test_the_module_runs_as_a_command_without_a_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest_dlperf.reports.cli", "summary", str(tmp_path / "absent.xml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"dlperf summary: error: {tmp_path / 'absent.xml'}: no such file"


# --- a report that pytest itself wrote ---------------------------------------------------------

FAKE_PERF_TEST = '''
import pytest

@pytest.mark.parametrize("throughput", [120.0, 80.0])
def test_fake_throughput(request, throughput):
    # What the dlperf fixture does: figures go to item.user_properties, so any junit_family has them.
    props = request.node.user_properties
    verdict = "improvement" if throughput > 110 else "regression" if throughput < 90 else "ok"
    props += [
        ("dlperf.hardware", "cpu-fake"),
        ("dlperf.fp32.scenario", "fake/model fp32 on cpu"),
        ("dlperf.fp32.throughput", f"{throughput:.6g}"),
        ("dlperf.fp32.throughput.unit", "samples/s"),
        ("dlperf.fp32.throughput.iqr", "2"),
        ("dlperf.fp32.throughput.n", "5"),
        ("dlperf.fp32.throughput.baseline", "100"),
        ("dlperf.fp32.throughput.verdict", verdict),
    ]
    assert verdict != "regression", (
        f"regression: fp32 throughput {throughput:.4g} samples/s vs baseline 100 ({throughput / 100 - 1:+.1%})"
    )
'''


@pytest.mark.parametrize("family", ["xunit1", "xunit2"])
def test_a_report_written_by_pytest_is_summarised_and_compared(pytester, tmp_path, capsys, family):
    pytester.makepyfile(test_fake_perf=FAKE_PERF_TEST)
    report = tmp_path / "run.xml"
    result = pytester.runpytest_subprocess(f"--junitxml={report}", "-o", f"junit_family={family}",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)

    code, out, _ = run(capsys, "summary", str(report))
    assert code == 0, _
    assert "**2 tests**: 1 passed, 1 failed" in out
    assert "1 regression, 1 improvement, 0 missing baselines" in out
    assert "| fp32 | throughput | 80 (IQR 2) | samples/s | 100 | -20.0% | 🔴 regression |" in out
    assert ("- `test_fake_perf.py::test_fake_throughput[80.0]`: AssertionError: regression: fp32 throughput "
            "80 samples/s vs baseline 100 (-20.0%)") in out

    (baseline,) = [t for t in read_reports([report]) if t.test.endswith("[120.0]")]
    assert baseline.metrics[0].value == 120.0
    code, out, _ = run(capsys, "compare", str(report), str(report))
    assert code == 0 and "2 metrics compared" in out and "0 regressions" in out


def test_summary_shows_a_b_ratios_and_paired_intervals(tmp_path, capsys):
    props = metric_props("fp32", "throughput", 95.0, "samples/s") + [
        ("dlperf.fp32.ab_ratio", "0.874112"), ("dlperf.fp32.ab_interval", "0.861 0.889"),
        ("dlperf.fp32.ab_verdict", "regression"),
        ("dlperf.fp32.reference_software", "framework=torch framework_version=2.9.1"),
        ("dlperf.fp32.paired_ratio", "0.874112"), ("dlperf.fp32.pairs", "20"),
        *metric_props("setting", "speedup", 0.59, "x"), ("dlperf.setting.speedup.interval", "0.556 0.631"),
    ]
    report = write_report(tmp_path / "r.xml", [case("test_ab", props, failure="A/B slower: fp32 ...")])
    code, out, _ = run(capsys, "summary", str(report))
    assert code == 0
    assert "### A/B against the reference environment" in out
    assert ("| `perf_tests/test_fake.py::test_ab` | fp32 | 0.874x | [0.861, 0.889] | - | regression | "
            "framework=torch " in out)
    assert "| setting | speedup | 0.59 [0.556, 0.631] | x |" in out
    assert "| pairs |" not in out and "paired_ratio" not in out  # group bookkeeping is not a metric


# --- report defects (issue 23) -----------------------------------------------------------------

GPU_SKIP = "needs 1 CUDA device(s), found 0: run it on a GPU runner (pytest -m gpu)"
NOT_INSTALLED = "mxnet is not installed in this environment: pip install mxnet"


def all_skipped_report(path: Path, reason: str = GPU_SKIP) -> Path:
    return write_report(path, [case(f"test_mxnet_{i}", [], skipped=reason, classname="perf_tests.test_mx")
                               for i in range(3)])


@pytest.mark.parametrize("command", ["summary", "html"])
def test_a_report_where_every_test_was_skipped_is_accepted_and_says_why(tmp_path, capsys, command):
    report = all_skipped_report(tmp_path / "mxnet.xml")
    argv = {"summary": ["summary", str(report)], "html": ["html", str(report), "--out", str(tmp_path / "h")]}[command]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    text = (tmp_path / "h" / "index.html").read_text(encoding="utf-8") if command == "html" else out
    assert f"Every test in {report} was skipped (3 tests): needs 1 CUDA device(s), found 0" in text.replace("`", "")


def test_summary_of_a_report_merged_with_itself_counts_each_metric_once(tmp_path, capsys):
    single = write_report(tmp_path / "a.xml", [amp_case(), scaling_case()])
    copy = tmp_path / "copy.xml"
    copy.write_bytes(single.read_bytes())
    assert run(capsys, "merge", str(tmp_path / "m.xml"), str(single), str(single))[0] == 0
    assert run(capsys, "merge", str(tmp_path / "c.xml"), str(single), str(copy))[0] == 0
    _, expected, _ = run(capsys, "summary", str(single))
    assert "**10 metrics**" in expected
    # a file that already holds every test case twice (merged before the fix) reads the same
    write_report(tmp_path / "d.xml", [amp_case(), scaling_case()] * 2)
    for report in ("m.xml", "c.xml", "d.xml"):
        code, out, _ = run(capsys, "summary", str(tmp_path / report))
        assert code == 0 and out == expected
    assert JUnitXml.fromfile(str(tmp_path / "m.xml")).tests == JUnitXml.fromfile(str(tmp_path / "c.xml")).tests == 2


def test_merge_refuses_to_overwrite_an_input(tmp_path, capsys):
    a = write_report(tmp_path / "a.xml", [amp_case()])
    b = write_report(tmp_path / "b.xml", [scaling_case()])
    before = a.read_bytes()
    code, _, err = run(capsys, "merge", str(a), str(b), str(tmp_path / "." / "a.xml"))
    assert code == 2 and a.read_bytes() == before
    assert err.startswith(f"dlperf merge: error: {a}: the output is also an input") and "new file" in err


def test_a_non_numeric_figure_is_named_as_a_usage_error(tmp_path, capsys):
    props = [("dlperf.fp32.throughput", "fast"), ("dlperf.fp32.throughput.unit", "samples/s"),
             ("dlperf.fp32.settings", "framework defaults")]  # a note is text, and is fine
    report = write_report(tmp_path / "r.xml", [case("test_a", props)])
    for argv in (["summary", str(report)], ["compare", str(report), str(report)]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and err.count("\n") == 1
        assert (f"{report}: test perf_tests/test_fake.py::test_a: property dlperf.fp32.throughput has the value "
                "'fast', which is not a number") in err


def test_each_test_shows_the_skip_reason_of_the_report_that_ran_it(tmp_path, capsys):
    from pytest_dlperf.reports.combine import unique_tests

    gpu = all_skipped_report(tmp_path / "mxnet.xml")  # the MXNet environment on a GPU runner without a GPU
    torch = write_report(tmp_path / "torch.xml", [amp_case()] + [  # the torch environment: no MXNet
        case(f"test_mxnet_{i}", [], skipped=NOT_INSTALLED, classname="perf_tests.test_mx") for i in range(3)])
    for order in ([gpu, torch], [torch, gpu]):
        tests = read_reports(order)
        mx = [t for t in unique_tests(tests) if "test_mxnet" in t.test]
        assert [(t.outcome, t.message, t.source) for t in mx] == [("skipped", GPU_SKIP, str(gpu))] * 3
        code, out, _ = run(capsys, "summary", *map(str, order))
        assert code == 0
        assert f"- 3 tests: {GPU_SKIP} (`mxnet.xml`)" in out and "not installed" not in out


def test_summary_opens_with_the_verdict_line_and_counts_each_figure_once(tmp_path, capsys):
    from test_html_report import big_run  # a run with a regression in two reports, a NaN loss

    expected = big_run(tmp_path / "run")
    code, out, _ = run(capsys, "summary", *map(str, sorted((tmp_path / "run").glob("*.xml"))))
    assert code == 0
    lines = out.splitlines()
    assert lines[2].startswith(f"**FAILED: {expected['regressions']} regressions beyond their noise, "
                               f"{expected['correctness']} correctness failure, "
                               f"{expected['inconclusive']} inconclusive")
    assert out.index("### Correctness failures") < out.index("regressions beyond the figures' noise (each figure once)")
    assert "Roll-up" not in out and "moved up" not in out  # a run's shift is its judged `<kind> shift` figure
    assert "**80 metrics**" in out  # torch.xml and torch-merged.xml hold the same 40: counted once
    assert "amp_vs_fp32 speedup 1.5x [1.41, 1.62], ok" in out
    assert "⚠️cannot detect" in out


# --- the brief, folders, merge --force, --version (issue 47) -----------------------------------

def test_summary_brief_of_a_folder_is_the_verdict_with_a_link(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_report(run_dir / "torch.xml", [amp_case(fp32=90.0, verdicts=("regression", "ok"),
                                                  failure="regression: fp32 throughput 90 ...")])
    code, full, err = run(capsys, "summary", str(run_dir))
    assert code == 0, err
    code, out, err = run(capsys, "summary", "--brief", str(run_dir), "--link", "https://ci.example/runs/7")
    assert code == 0, err
    assert out.splitlines()[:3] == full.splitlines()[:3] and out.splitlines()[2].startswith("**FAILED: 1 regression")
    assert "<br>fp32 throughput<br>paired: amp_vs_fp32 speedup" in out
    assert "| 90\u00a0samples/s | 100\u00a0samples/s | **-10.0%** |" in out
    assert out.endswith("Full report: https://ci.example/runs/7\n") and "### `" not in out  # no per-test tables


def test_summary_link_without_brief_is_a_usage_error(tmp_path, capsys):
    report = write_report(tmp_path / "r.xml", [amp_case()])
    code, _, err = run(capsys, "summary", str(report), "--link", "https://ci.example/runs/7")
    assert code == 2 and err == ("dlperf summary: error: --link goes with --brief (the full summary is the report it "
                                 "links to): dlperf summary --brief REPORT.xml --link URL\n")


def test_merge_refuses_to_overwrite_an_existing_output_unless_forced(tmp_path, capsys):
    a = write_report(tmp_path / "a.xml", [amp_case()])
    out = tmp_path / "merged.xml"
    out.write_text("keep me", encoding="utf-8")
    code, _, err = run(capsys, "merge", str(out), str(a))
    assert code == 2 and out.read_text(encoding="utf-8") == "keep me"
    assert err == (f"dlperf merge: error: {out}: exists, and merging would overwrite it; give --force to replace it, "
                   "or write the merged report to a new file\n")
    code, _, err = run(capsys, "merge", "--force", str(out), str(a))
    assert code == 0 and read_reports([out])[0].metrics


def test_compare_history_accepts_folders(tmp_path, capsys):
    runs = tmp_path / "runs"
    for i, fp32 in enumerate((99.0, 101.0)):
        (runs / str(i)).mkdir(parents=True)
        write_report(runs / str(i) / "torch.xml", [amp_case(fp32=fp32)])
    old, new = runs / "0" / "torch.xml", runs / "1" / "torch.xml"
    code, by_folder, err = run(capsys, "compare", str(old), str(new), "--history", str(runs))
    assert code == 0, err
    _, by_file, _ = run(capsys, "compare", str(old), str(new), "--history", str(old), str(new))
    assert by_folder == by_file


def test_version_is_the_package_s(capsys):
    from pytest_dlperf import __version__

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"dlperf {__version__}\n"


# --- record ------------------------------------------------------------------------------------

#: A suite whose figures cost nothing to measure: each recording of it takes a second or two.
RECORDED_SUITE = """
import pytest
from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.result import TrainingResult, metric_from

@pytest.mark.parametrize("rate", [100.0, 200.0])
def test_figures(dlperf, rate):
    s = dlperf.scenario("torch", "resnet18", rounds=3)
    metrics = {"throughput": metric_from("throughput", [rate] * 3, "samples/s")}
    dlperf.check(TrainingResult(s, metrics, [2.0, 1.0], {"hardware_key": hardware_key("cpu")}))
"""
SUITE = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]


def baseline_file(path: Path, entries: dict[str, int], key: str) -> Path:
    """A baseline file of ``key`` with one throughput per entry, recorded in that many runs."""
    figures = {entry: {"throughput": {"value": 1.0, "unit": "samples/s", "direction": "higher",
                                      "runs": [{"value": 1.0, "recorded": f"2026-01-0{i + 1}T00:00:00Z"}
                                               for i in range(runs)]}}
               for entry, runs in entries.items()}
    path.mkdir(parents=True, exist_ok=True)
    target = path / f"{key}.json"
    target.write_text(json.dumps({"format": 2, "hardware_key": key, "hardware": {}, "entries": figures}, indent=2),
                      encoding="utf-8")
    return target


def test_record_resumes_with_the_recordings_still_missing_and_keeps_every_entry(pytester, capfd):
    """The first of three recordings was made before an interruption: ``dlperf record`` makes the other two,
    each a pytest session of its own, and keeps the entries it does not record (another test's, another
    machine's)."""
    pytester.makepyfile(test_suite=RECORDED_SUITE)
    key = hardware_key("cpu")
    gone = "test_gone.py::test_gone::fp32@smoke"
    mine = baseline_file(pytester.path / "baselines", {gone: 2}, key)
    other = baseline_file(pytester.path / "baselines", {gone: 1}, "cpu-another-machine-4cpu-avx2")
    kept = other.read_bytes()
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--update-baselines", "--junitxml=first.xml"
                                  ).assert_outcomes(passed=2)
    capfd.readouterr()

    code = cli.main(["record", "--estimate-from", "first.xml", "--", *SUITE])
    out = capfd.readouterr().out
    assert code == 0, out
    assert f"3 figures of 3 in baselines/{key}.json have fewer than 3 recorded runs (the fewest 1): " \
           "2 recordings to make" in out
    assert "estimated time: about " in out and "cost profile of 1 report of an earlier run" in out
    assert "recording 1 of 2\n" in out and "recording 2 of 2\n" in out and "recording 3" not in out
    assert "not waited for: 1 figure in these files that this command does not record" in out and gone in out
    assert "recording 1 done in " in out and "1 more to make, about " in out and "none more to make" in out
    assert "done: every figure this command records has 3 or more recorded runs" in out
    entries = json.loads(mine.read_text(encoding="utf-8"))["entries"]
    recorded = [m["throughput"]["runs"] for entry, m in entries.items() if entry != gone]
    assert len(recorded) == 2 and all(len(runs) == 3 for runs in recorded)
    assert all(len({run["session"] for run in runs}) == 3 for runs in recorded)  # three sessions
    assert len(entries[gone]["throughput"]["runs"]) == 2 and other.read_bytes() == kept


def test_record_runs_tox_m_perf_by_default_and_estimates_from_its_last_reports(pytester, capfd, monkeypatch):
    """A stand-in for tox writes its report where tox -m perf does; one left half-written is passed over."""
    pytester.makepyfile(test_suite=RECORDED_SUITE)
    tox = pytester.path / "tox"
    tox.write_text(f"#!/bin/sh\nexec {shlex.join(SUITE)} --junitxml=reports/perf-torch.xml\n", encoding="utf-8")
    tox.chmod(0o755)
    monkeypatch.setenv("PATH", f"{pytester.path}{os.pathsep}{os.environ['PATH']}")
    subprocess.run([str(tox)], env={**os.environ, "DLPERF_UPDATE_BASELINES": "1"}, check=True, capture_output=True)
    mine = pytester.path / "baselines" / f"{hardware_key('cpu')}.json"
    data = json.loads(mine.read_text(encoding="utf-8"))
    for figure in data["entries"].values():
        figure["throughput"]["runs"] *= 2  # two recordings made
    mine.write_text(json.dumps(data), encoding="utf-8")
    (pytester.path / "reports" / "perf-tf.xml").write_text("<testsuites><testsuite", encoding="utf-8")
    capfd.readouterr()

    assert cli.main(["record"]) == 0
    out = capfd.readouterr().out
    assert "1 recording to make" in out and "each recording is one run of: DLPERF_UPDATE_BASELINES=1 tox -m perf" in out
    assert "estimated time: about " in out and "cost profile of 1 report of an earlier run, which has no report of " \
        "perf-torch-slow, perf-tf, perf-tf-slow, perf-mxnet, perf-mxnet-slow: their time is not in it" in out
    assert "recording 1 of 1\n" in out and "none more to make" in out
    entries = json.loads(mine.read_text(encoding="utf-8"))["entries"]
    assert [len(figure["throughput"]["runs"]) for figure in entries.values()] == [3, 3]


def test_record_says_there_is_nothing_to_record_when_every_figure_has_its_runs(pytester, capfd, monkeypatch):
    baseline_file(pytester.path / "baselines", {"test_a.py::test_a::fp32@smoke": 3,
                                               "test_b.py::test_b::fp32@smoke": 5}, hardware_key("cpu"))
    monkeypatch.setenv("PATH", str(pytester.path))  # no tox: tox -m perf is not run
    code = cli.main(["record"])
    out = capfd.readouterr().out
    assert code == 0
    assert out == (f"dlperf record: nothing to record: every one of the 2 figures in baselines/{hardware_key('cpu')}"
                   ".json has 3 or more recorded runs; a test added since is not in them until it runs: give it "
                   "after --, e.g. dlperf record -- pytest PATH/test_new.py\n")


def test_record_of_a_new_test_runs_its_command_though_every_recorded_figure_has_its_runs(pytester, capfd):
    """The figures a command records are known only once it has run: a test added to a fully recorded project
    gets its three recordings, and the recorded figures it does not run are left as they are."""
    pytester.makepyfile(test_suite=RECORDED_SUITE)
    old = "test_old.py::test_old::fp32@smoke"
    mine = baseline_file(pytester.path / "baselines", {old: 3}, hardware_key("cpu"))
    code = cli.main(["record", "--", *SUITE])
    out = capfd.readouterr().out
    assert code == 0, out
    assert "every one of the 1 figure in " in out and "1 recording to find out" in out
    assert "recording 1 of 1\n" in out and "recording 1 done in " in out and "2 more to make" in out
    assert "recording 3 of 3\n" in out and "recording 4" not in out and "not waited for: 1 figure" in out
    entries = json.loads(mine.read_text(encoding="utf-8"))["entries"]
    new = [f"test_suite.py::test_figures[{rate}]::fp32@smoke" for rate in ("100.0", "200.0")]
    assert {entry: len(m["throughput"]["runs"]) for entry, m in entries.items()} == {old: 3, new[0]: 3, new[1]: 3}


@pytest.mark.parametrize("kind", ["no such program", "records nothing", "fails"])
def test_record_with_a_bad_command_stops_with_what_to_do(pytester, capfd, kind):
    command, code, expected = {
        "no such program": (["dlperf-no-such-program", "-x"], 2, "'dlperf-no-such-program' is not a program "
                            "that can be run here; give the suite's command after --, e.g. dlperf record -- "
                            "pytest perf_tests"),
        "records nothing": ([sys.executable, "-c", "pass"], 2, "added no run to any figure of this machine"),
        "fails": ([sys.executable, "-c", "raise SystemExit(3)"], 3, "recording 1 failed with exit status 3 after "),
    }[kind]
    assert cli.main(["record", "--", *command]) == code
    out, err = capfd.readouterr()
    assert "no figure of this machine" in out or kind == "no such program"
    if code == 2:
        assert err.startswith("dlperf record: error: ") and err.count("\n") == 1 and expected in err, err
    else:
        assert expected in out and "stated when the first ends" in out
        assert out.rstrip().endswith(f"resume with: dlperf record -- {sys.executable} -c 'raise SystemExit(3)'")


def test_record_with_a_report_it_cannot_read_names_it(pytester, capfd):
    (pytester.path / "last.xml").write_text("not xml", encoding="utf-8")
    assert cli.main(["record", "--estimate-from", "last.xml", "--", sys.executable, "-c", "pass"]) == 2
    assert capfd.readouterr().err.startswith("dlperf record: error: last.xml: not valid XML")


def test_record_interrupted_by_ctrl_c_says_how_to_resume(pytester, capfd, request):
    """Ctrl-C reaches the recorder and the command alike; here the command sends it to the recorder alone."""
    # A job a non-interactive shell starts in the background inherits SIGINT ignored (POSIX), and Python
    # then keeps it ignored: Ctrl-C's handler is installed here as an interactive session has it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    interrupt = "import os, signal, time; time.sleep(0.3); os.kill(os.getppid(), signal.SIGINT)"
    assert cli.main(["record", "--", sys.executable, "-c", interrupt]) == 130
    last = capfd.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("dlperf record: interrupted in recording 1 after ")
    assert last.endswith(f"; the runs it recorded are kept; resume with: dlperf record -- {sys.executable} -c "
                         f"'{interrupt}'")


def test_record_without_tox_says_how_to_get_it_or_what_to_give_instead(pytester, capfd, monkeypatch):
    monkeypatch.setenv("PATH", str(pytester.path))
    assert cli.main(["record"]) == 2
    assert capfd.readouterr().err == ("dlperf record: error: tox is not on PATH: install it (python3 -m pip "
                                      "install tox), or give the suite's command after --: dlperf record -- "
                                      "pytest perf_tests\n")


def test_record_takes_the_whole_command_after_the_double_dash():
    args = cli.build_parser().parse_args(["record", "--baseline-dir", "b", "--", "tox", "-m", "perf", "--", "-k", "x"])
    assert args.suite == ["tox", "-m", "perf", "--", "-k", "x"] and args.baseline_dir == "b"
    assert cli.build_parser().parse_args(["record"]).suite == []
