"""``dlperf summary --brief``: the verdict, the failures, the regressions and the A/B ratios, within a
pull-request comment's size whatever the size of the run."""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Sequence

import pytest

from pytest_dlperf.reports import brief, digest
from pytest_dlperf.reports.junit import expand, read_reports
from pytest_dlperf.reports.records import MetricRecord
from pytest_dlperf.reports.records import TestRecord as Record  # (not a test class)
from pytest_dlperf.reports.summary import summary_markdown
from pytest_dlperf.text import percent

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


def slowed(tests: Sequence[Record], every: int) -> list[Record]:
    """``tests`` with every ``every``-th throughput that its gate can judge lowered just beyond the gate
    (by the change it catches 19 times in 20, and 5 points more) and judged a regression, its test
    failed as the plugin fails it."""
    out, k = [], 0
    for t in tests:
        metrics, lines = [], []
        for m in t.metrics:
            if m.metric == "throughput" and m.baseline and m.verdict in ("ok", "inconclusive") \
                    and m.detectable is not None and m.detectable < 0.9:
                k += 1
                if k % every == 0:
                    m = dataclasses.replace(m, value=m.baseline * (0.95 - m.detectable), verdict="regression")
                    lines.append(f"regression: {m.label} throughput {m.value:.4g} {m.unit} vs baseline "
                                 f"{m.baseline:.4g} ({m.delta:+.1%}, tolerance {m.tolerance or 0:.1%})")
            metrics.append(m)
        if lines:
            lines[1:] = ["  also " + line for line in lines[1:]]
            message = ("Failed: " + "\n".join(lines) + "\nRefresh with --update-baselines if the change is intended: "
                       f"pytest --update-baselines '{t.test}'")
            t = dataclasses.replace(t, outcome="failed", message=message)
        out.append(dataclasses.replace(t, metrics=metrics))
    return out


def test_a_huge_run_s_brief_fits_a_comment_and_leads_with_its_headline_and_first_regressions():
    tests = [dataclasses.replace(t, ab={}) for t in huge_run()]
    text = brief.brief_markdown(tests, link="https://github.com/o/r/actions/runs/1")
    assert len(text) < brief.COMMENT_LIMIT and len(text) <= brief.BUDGET
    lines = text.splitlines()
    assert lines[2] == f"**{digest.digest(tests).verdict_line()}**" and lines[2].startswith("**FAILED: 2000 ")
    first = next(i for i, line in enumerate(lines) if line.startswith("### 2000 regressions beyond"))
    assert lines[2 + first].startswith("| test and figure |") and "cpu-test-4cpu" in lines[first]  # one machine
    worst = f"perf_tests/test_precision_torch.py::test_amp[resnet0-amp_bf16-channels_last-batch64-{'x' * 60}]"
    assert lines[first + 4].startswith(f"| {brief.code(worst)}<br>")
    assert lines[first + 4].endswith(
        "<br>fp32 throughput | 50\u00a0samples/s | 100\u00a0samples/s | **-50.0%** | ±8% |")
    assert any(line.startswith("… and ") and line.endswith("more regressions: the full report lists every one.")
               for line in lines)
    assert any(line.endswith("more failed tests: the full report lists every one.") for line in lines)
    assert max(len(line) for line in lines if line.startswith("- <code>")) < brief.MESSAGE_CHARS + 250
    assert lines[-1] == "Full report: https://github.com/o/r/actions/runs/1"


def test_a_huge_a_b_run_s_brief_fits_and_shows_the_ratios_with_their_intervals():
    text = brief.brief_markdown(huge_run())
    assert len(text) <= brief.BUDGET
    lines = text.splitlines()
    assert lines[2].startswith("**FAILED: 2000 A/B slower, 0 faster, 1000 no change, 0 inconclusive")
    ab = lines.index("### A/B against the reference")
    assert lines[ab + 4].endswith("</code><br>fp32 | 0.874x | [0.861, 0.889] | 8 | regression |")
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
    assert "### 1 regression beyond the figures' noise on <code>cpu-test-4cpu</code>" in text
    assert ("| <code>t.py::<wbr>a</code><br>fp32 throughput | 90\u00a0samples/s | 100\u00a0samples/s "
            "| **-10.0%** | ±8% |" in text)
    assert "Not judged: 1 figure without a baseline, 1 skipped test." in text
    assert "### Failed tests" not in text  # the regression is the failure, shown once
    assert "Full report" not in text


def test_a_run_that_passed_says_so_and_little_else():
    tests = [Record("t.py::a", "passed", hardware=HW, software=SOFTWARE, metrics=[throughput("t.py::a", 101.0)])]
    assert brief.brief_markdown(tests, not_run=["gpu-tf.xml"]).splitlines()[2:] == [
        "**PASSED: 0 regressions beyond their noise, 0 correctness failures, 0 inconclusive · 1 figure on "
        "cpu-test-4cpu against its baselines (3 recorded runs) · python 3.11.7, torch 2.4.0**",
        "", "Not judged: 1 report not run (no file)."]


# --- the brief as GitHub renders it ----------------------------------------------------------------

#: A whole ``tox -m perf`` run: its twelve reports (every framework, both tiers, the ISA-capped reruns) on a
#: 2-core AVX2 VM, 244 figures.
WHOLE_RUN = Path(__file__).parent / "data" / "whole-run-avx2"
#: The tags GitHub's sanitizer keeps that the brief uses; anything else would show as text or vanish.
ALLOWED_TAGS = {"code", "wbr", "br"}
#: The longest word a table may hold: about 460 px of GitHub's 12 px code in a comment about 850 px wide,
#: so that the figures' columns beside the widest test id stay in sight.
WIDEST_WORD = 64


class Comment(HTMLParser):
    """The rendered comment as a reviewer reads it: its blocks in order (heading, paragraph, list item,
    table) and each table's rows of cell texts, as they copy (``<wbr>`` nothing, ``<br>`` a newline)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.blocks: list[tuple[str, str]] = []
        self.tables: list[list[list[str]]] = []
        #: Each table's longest run of characters without a break opportunity.
        self.widest: list[int] = []
        self._buffer: list[str] | None = None
        self._block: str | None = None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table":
            self.tables.append([])
            self.widest.append(0)
            self.blocks.append(("table", ""))
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th") or (tag in ("h2", "h3", "p", "li") and self._buffer is None):
            self._buffer, self._block = [], tag
        elif tag in ("br", "wbr") and self._buffer is not None:
            self._buffer.append("\n" if tag == "br" else "\u200b")

    def handle_endtag(self, tag: str) -> None:
        if tag != self._block or self._buffer is None:
            return
        raw = "".join(self._buffer)
        text = raw.replace("\u200b", "").strip()
        if tag in ("td", "th"):
            self.tables[-1][-1].append(text)
            words = re.split(r"[\s\u200b]+|(?<=-)", raw)
            self.widest[-1] = max([self.widest[-1], *map(len, words)])
        else:
            self.blocks.append((tag, text))
        self._buffer = self._block = None

    def handle_data(self, data: str) -> None:
        if self._buffer is not None:
            self._buffer.append(data)


def as_github_renders(markdown: str) -> Comment:
    """``markdown`` through cmark-gfm with GitHub's extensions, inline HTML kept as GitHub keeps the tags
    its sanitizer allows."""
    cmarkgfm = pytest.importorskip("cmarkgfm", reason="rendering as GitHub does needs cmarkgfm (tox.ini: torch env)")
    from cmarkgfm.cmark import Options

    assert set(re.findall(r"</?([a-z]+)", markdown)) <= ALLOWED_TAGS
    return Comment(cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE))


def reads_as_a_comment(markdown: str, tests: Sequence[Record]) -> Comment:
    """The checks every brief passes once rendered: within a comment's limit, the headline first, each table
    a table (no Markdown pipes left in the text) whose words leave its figures in sight."""
    assert len(markdown) < brief.COMMENT_LIMIT
    comment = as_github_renders(markdown)
    assert comment.blocks[:2] == [("h2", "dlperf results"), ("p", digest.digest(tests).verdict_line())]
    assert len(comment.tables) == len(re.findall(r"^\| test and ", markdown, flags=re.M))
    for _, text in comment.blocks:
        assert not (text.startswith("|") or "| --- |" in text), f"a table left as text: {text[:200]!r}"
    for table, widest in zip(comment.tables, comment.widest):
        assert len(table) > 1 and len({len(row) for row in table}) == 1  # every row as wide as the header
        assert not any("\\|" in cell for row in table for cell in row)
        assert widest <= WIDEST_WORD
    return comment


def regression_rows(comment: Comment) -> list[list[str]]:
    return [row for table in comment.tables if table[0][0] == "test and figure" for row in table[1:]]


def test_a_whole_suite_s_brief_renders_its_headline_alone_when_nothing_regressed() -> None:
    tests = read_reports(expand([WHOLE_RUN]))
    markdown = brief.brief_markdown(tests, link="https://github.com/o/r/actions/runs/1")
    comment = reads_as_a_comment(markdown, tests)
    assert comment.blocks[1][1].startswith("PASSED: 0 regressions") and not comment.tables
    assert comment.blocks[-1] == ("p", "Full report: https://github.com/o/r/actions/runs/1")


def test_a_whole_suite_s_brief_with_regressions_shows_each_one_as_a_table_row() -> None:
    tests = slowed(read_reports(expand([WHOLE_RUN])), 3)
    regressions = digest.digest(tests).by_verdict("regression")
    assert len(regressions) == 6
    markdown = brief.brief_markdown(tests, link="https://github.com/o/r/actions/runs/1")
    comment = reads_as_a_comment(markdown, tests)
    assert comment.blocks[1][1].startswith("FAILED: 6 regressions beyond their noise")
    assert comment.blocks[2] == ("h3", "6 regressions beyond the figures' noise on cpu-amd-epyc-f25m1-2cpu-avx2")
    rows = regression_rows(comment)
    for m in regressions:  # the whole test id as it copies, what was measured, and the change
        assert any(row[0].split("\n")[:2] == [m.test, f"{m.label} {m.metric}"] and row[3] == percent(m.delta)
                   for row in rows), m
    assert len(rows) == len(regressions)


def test_a_huge_run_s_brief_renders_within_a_comment_and_says_what_it_left_out() -> None:
    tests = huge_run()
    markdown = brief.brief_markdown(tests)
    comment = reads_as_a_comment(markdown, tests)
    assert [h for kind, h in comment.blocks if kind == "h3"] == [
        "Failed tests", "A/B against the reference",
        "2000 regressions on cpu-test-4cpu against the stored baselines (for information: in A/B mode they fail "
        "nothing)"]
    assert regression_rows(comment)[0][0].startswith("perf_tests/test_precision_torch.py::test_amp[resnet0-")
    assert sum(text.startswith("… and ") for _, text in comment.blocks) == 3


def test_pipes_and_backticks_in_test_ids_read_as_they_are() -> None:
    odd = "t.py::test_a[x|y-`z`-__init__-<b>]"
    tests = [Record(odd, "failed", "AssertionError: loss | accuracy", hardware=HW, software=SOFTWARE,
                    metrics=[throughput(odd, 90.0, "regression")]),
             Record("t.py::test_b[a|b]", "failed", "RuntimeError: NaN", hardware=HW, software=SOFTWARE,
                    metrics=[throughput("t.py::test_b[a|b]", 100.0)])]
    comment = reads_as_a_comment(brief.brief_markdown(tests), tests)
    assert ("li", "t.py::test_b[a|b]: RuntimeError: NaN") in comment.blocks
    assert regression_rows(comment)[0][0] == f"{odd}\nfp32 throughput"


def test_a_test_failed_on_performance_with_no_regression_row_is_listed() -> None:
    """The run as a whole regressed after its common shift while no figure alone did (as in a CI rehearsal's
    perf-torch.xml): the headline says FAILED, so the failure must say why."""
    message = ("after the run's shift: t.py::b: regression: fp32 throughput 34.31 samples/s vs baseline 53.42 "
               "(-35.8%, tolerance 10.0%)")
    tests = [Record("t.py::a", "passed", hardware=HW, software=SOFTWARE, metrics=[throughput("t.py::a", 95.0)]),
             Record("dlperf.py::run", "failed", message)]
    comment = reads_as_a_comment(brief.brief_markdown(tests), tests)
    assert comment.blocks[1][1].startswith("FAILED: 0 regressions")
    assert comment.blocks[2:4] == [("h3", "Failed tests"), ("li", f"dlperf.py::run: {message}")]


def test_the_a_b_interval_column_names_the_confidence_its_reports_carry():
    """A/B intervals are 99% since ``ab_confidence`` was written; reports without it are read as 95%, and a
    mix of both names the confidence in each row rather than one wrong heading."""
    older, newer = (Record(f"t.py::test_{i}", "passed", "", hardware=HW, metrics=[throughput(f"t.py::test_{i}", 99.0)],
                           software=SOFTWARE, ab={"fp32": {"ab_verdict": "ok", "ab_ratio": "1.0", "ab_interval":
                                                           "0.97 1.03", "ab_process_pairs": "4", **extra}})
                    for i, extra in enumerate(({}, {"ab_confidence": "0.99"})))
    for render in (summary_markdown, brief.brief_markdown):
        assert "| 95% interval |" in render([older]) and "[0.970, 1.030] |" in render([older])
        assert "| 99% interval |" in render([newer])
        mixed = render([older, newer])
        assert "| interval (confidence in each row) |" in mixed
        assert "[0.970, 1.030] at 95% |" in mixed and "[0.970, 1.030] at 99% |" in mixed
