"""``dlperf summary --brief``: the verdict, the failures, the regressions and the A/B ratios, within a
pull-request comment's size whatever the size of the run."""

from __future__ import annotations

import dataclasses

from pytest_dlperf.reports import brief, digest
from pytest_dlperf.reports.records import MetricRecord
from pytest_dlperf.reports.records import TestRecord as Record  # (not a test class)
from pytest_dlperf.reports.summary import summary_markdown

HW = "cpu-test-4cpu"
SOFTWARE = {"fp32": "framework=torch framework_version=2.4.0 python=3.11.7"}


def throughput(test: str, value: float, verdict: str = "ok", baseline: float | None = 100.0) -> MetricRecord:
    return MetricRecord(test=test, label="fp32", metric="throughput", value=value, unit="samples/s",
                        baseline=baseline, verdict=verdict, declared_direction="higher", hardware=HW,
                        tolerance=0.05, detectable=0.08, runs=3, n=5)


def huge_run(tests: int = 3000) -> list[Record]:
    """Many long-named tests of four figures each: two in three regressed (the 0th worst), every tenth
    failed on a long message, every one A/B-compared."""
    out = []
    for i in range(tests):
        name = f"perf_tests/test_precision_torch.py::test_amp[resnet{i}-amp_bf16-channels_last-batch64-{'x' * 60}]"
        regressed = i % 3 != 2
        figures = [throughput(name, 50.0 + i * 0.01 if regressed else 100.0, "regression" if regressed else "ok")]
        figures += [dataclasses.replace(figures[0], label=f"s{k}", value=100.0, verdict="ok") for k in range(3)]
        failed = i % 10 == 0
        out.append(Record(name, "failed" if failed else "passed",
                          "AssertionError: the loss is NaN " + "and more " * 200 if failed else "", hardware=HW,
                          metrics=figures, software=SOFTWARE,
                          ab={"fp32": {"ab_verdict": "regression" if regressed else "ok", "ab_ratio": "0.874112",
                                       "ab_interval": "0.861 0.889", "ab_process_pairs": "8"}}))
    return out


def test_a_huge_run_s_brief_fits_a_comment_and_leads_with_its_headline_and_first_regressions():
    tests = [dataclasses.replace(t, ab={}) for t in huge_run()]
    text = brief.brief_markdown(tests, link="https://github.com/o/r/actions/runs/1")
    assert len(text) < brief.COMMENT_LIMIT and len(text) <= brief.BUDGET
    lines = text.splitlines()
    assert lines[2] == f"**{digest.digest(tests).verdict_line()}**" and lines[2].startswith("**FAILED: 2000 ")
    first = next(i for i, line in enumerate(lines) if line.startswith("### 2000 regressions beyond"))
    assert lines[first + 4].startswith("| `perf_tests/test_precision_torch.py::test_amp[resnet0-")  # the worst first
    assert "| 50 img/s | 100 img/s | -50.0% | ±8% |" in lines[first + 4]
    assert any(line.startswith("… and ") and line.endswith("more regressions: the full report lists every one.")
               for line in lines)
    assert any(line.endswith("more failed tests: the full report lists every one.") for line in lines)
    assert max(len(line) for line in lines if line.startswith("- `")) < brief.MESSAGE_CHARS + 200
    assert lines[-1] == "Full report: https://github.com/o/r/actions/runs/1"


def test_a_huge_a_b_run_s_brief_fits_and_shows_the_ratios_with_their_intervals():
    text = brief.brief_markdown(huge_run())
    assert len(text) <= brief.BUDGET
    lines = text.splitlines()
    assert lines[2].startswith("**FAILED: 2000 A/B slower, 0 faster, 1000 no change, 0 inconclusive")
    ab = lines.index("### A/B against the reference")
    assert lines[ab + 4].endswith("| fp32 | 0.874x | [0.861, 0.889] | 8 | regression |  |")
    assert any(line.endswith("more comparisons: the full report lists every one.") for line in lines)


def test_the_brief_s_headline_is_the_summary_s_exactly():
    regressed = throughput("t.py::a", 90.0, "regression")
    tests = [Record("t.py::a", "failed", "regression: fp32 throughput 90 samples/s vs baseline 100 (-10.0%)",
                    hardware=HW, metrics=[regressed], software=SOFTWARE),
             Record("t.py::b", "passed", hardware=HW, software=SOFTWARE,
                    metrics=[throughput("t.py::b", 100.0, "missing", baseline=None)]),
             Record("t.py::c", "skipped", "needs 1 CUDA device(s), found 0")]
    text = brief.brief_markdown(tests)
    headline = ("**FAILED: 1 regression beyond its noise, 0 correctness failures, 0 inconclusive, 1 figure without "
                "a baseline · 1 figure on cpu-test-4cpu against its baselines (3 recorded runs) · "
                "python 3.11.7, torch 2.4.0**")
    assert text.splitlines()[:3] == ["## dlperf results", "", headline]
    assert summary_markdown(tests).splitlines()[2] == headline
    assert ("| `t.py::a` | `cpu-test-4cpu` | fp32 | throughput | 90 img/s | 100 img/s | -10.0% | ±8% | - |"
            in text)
    assert "Not judged: 1 figure without a baseline, 1 skipped test." in text
    assert "### Failed tests" not in text  # the regression is the failure, shown once
    assert "Full report" not in text


def test_a_run_that_passed_says_so_and_little_else():
    tests = [Record("t.py::a", "passed", hardware=HW, software=SOFTWARE, metrics=[throughput("t.py::a", 101.0)])]
    assert brief.brief_markdown(tests, not_run=["gpu-tf.xml"]).splitlines()[2:] == [
        "**PASSED: 0 regressions beyond their noise, 0 correctness failures, 0 inconclusive · 1 figure on "
        "cpu-test-4cpu against its baselines (3 recorded runs) · python 3.11.7, torch 2.4.0**",
        "", "Not judged: 1 report not run (no file)."]
