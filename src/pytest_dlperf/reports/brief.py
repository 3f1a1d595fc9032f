"""``dlperf summary --brief``: a run's verdict as Markdown short enough for a pull-request comment.

The summary's verdict line first, then the failed tests that no regression row shows, the A/B ratios
with their intervals, each regression beyond its noise (observed, baseline, change and gate), one line
counting what was not judged, and a link to the full report. Long lists end in an "and N more" line, so that the whole
stays within :data:`BUDGET` characters whatever the size of the run.

Its tables are narrower than the summary's, for the width of a comment: GitHub draws a table no wider
than the comment and scrolls the rest out of sight, and a column is never narrower than its longest
unbreakable word, which a test id is. So the test id shares one column with what was measured, breaks
after its ``/`` and ``::`` and before its ``[`` (``<wbr>``, which copies as nothing), and the numbers
follow it; what every row shares (one machine, one reference) is said once above the table.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from typing import Sequence

from pytest_dlperf.reports import digest
from pytest_dlperf.reports.records import MetricRecord, TestRecord
from pytest_dlperf.reports.summary import (ab_rows, cell, gate_md, headline_md, interval_cell, interval_heading,
                                          mixed_confidence)
from pytest_dlperf.text import number, percent
from pytest_dlperf.units import count

#: GitHub refuses a comment body longer than this many characters.
COMMENT_LIMIT = 65_536
#: What the brief may take: under the limit with room for what a workflow adds around it.
BUDGET = 60_000
#: The most of one failure message shown: its first line, cut here.
MESSAGE_CHARS = 300
#: Kept free in each list for its "and N more" line.
_MORE_ROOM = 120


def _clip(text: str, limit: int) -> str:
    first = (text.strip().splitlines() or [""])[0]
    return first if len(first) <= limit else first[: limit - 1] + "…"


def code(text: str) -> str:
    """``text`` (a test id, a hardware key) as inline code that may break after ``/`` and ``::`` and before
    ``[``. Markdown still parses what an HTML tag holds, so what it would read as markup is escaped: a
    backslash before each of ``\\`*_[]!~|`` (in a table, GFM's escape of a pipe), entities for ``<>&``."""
    escaped = html.escape(text.replace("\n", " "), quote=False)
    escaped = re.sub(r"([\\`*_\[\]!~|])", r"\\\1", escaped)
    return "<code>" + re.sub(r"(?<=/)|(?<=::)|(?=\\\[)", "<wbr>", escaped) + "</code>"


#: The brief's table of regressions: one row per figure, the test over what was measured.
REGRESSION_HEADER = ["| test and figure | observed | baseline | change | ±\u00a0gate |",
                     "| --- | ---: | ---: | ---: | --- |"]


def comment_ab_header(fields: Sequence[dict[str, str]]) -> list[str]:
    """The brief's A/B table (:func:`comment_ab_row`): one row per (test, scenario), narrower than the summary's."""
    return [f"| test and scenario | candidate / reference | {interval_heading(fields)} | process pairs | verdict |",
            "| --- | ---: | --- | ---: | --- |"]


def regression_row(m: MetricRecord, d: digest.Digest, scales: dict, with_hardware: bool) -> str:
    factor, unit = scales.get((m.metric, m.unit), (1.0, m.unit))
    where = f" on {code(m.hardware)}" if with_hardware and m.hardware else ""
    paired = "".join(f"<br>paired: {cell(digest.paired_text(p))}" for p in digest.paired_evidence(m, d.figures))
    baseline = m.baseline / factor if m.baseline is not None else None
    observed, baseline_text = (number(v, unit).replace(" ", "\u00a0") for v in (m.value / factor, baseline))
    return (f"| {code(m.test)}{where}<br>{cell(m.label)} {cell(m.metric)}{paired} | {observed} | {baseline_text} "
            f"| **{percent(m.delta)}** | {gate_md(m)} |")


def failed_line(t: TestRecord, with_hardware: bool) -> str:
    where = f" on {code(t.hardware)}" if with_hardware and t.hardware else ""
    return f"- {code(t.test)}{where}: {cell(_clip(t.message, MESSAGE_CHARS)) or '(no message)'}"


def reference_of(fields: dict[str, str]) -> str:
    return fields.get("reference_commit") or fields.get("reference_software", "")


def comment_ab_row(t: TestRecord, label: str, f: dict[str, str], with_reference: bool, mixed: bool = False) -> str:
    interval = interval_cell(f, mixed)
    ratio = f"{float(f['ab_ratio']):.3f}x" if f.get("ab_ratio") else "-"
    against = f"<br>against {cell(reference_of(f))}" if with_reference and reference_of(f) else ""
    return (f"| {code(t.test)}<br>{cell(label)}{against} | {ratio} | {interval} | {f.get('ab_process_pairs', '-')} "
            f"| {f.get('ab_verdict', '-')} |")


class _Page:
    """Lines under a character budget; each list stops with an "and N more" line where it would not fit."""

    def __init__(self, budget: int) -> None:
        self.lines: list[str] = []
        self.left = budget

    def add(self, *lines: str) -> bool:
        size = sum(len(line) + 1 for line in lines)
        if size > self.left:
            return False
        self.lines += lines
        self.left -= size
        return True

    def listing(self, heading: Sequence[str], rows: Sequence[str], noun: str, share: int) -> None:
        """``heading`` and as many of ``rows`` as fit in ``share`` characters, then how many did not."""
        held = self.left - min(share, self.left) + _MORE_ROOM
        self.left -= held
        shown = 0
        if self.add(*heading):
            for row in rows:
                if not self.add(row):
                    break
                shown += 1
        self.left += held
        if shown < len(rows):
            self.add("", f"… and {count(len(rows) - shown, 'more ' + noun)}: the full report lists every one.")
        self.add("")


def not_judged_line(d: digest.Digest, not_run: Sequence[str] = ()) -> str | None:
    """What the verdict did not judge, counted in one line; None when it judged everything."""
    verdicts = Counter(m.verdict for m in d.figures)
    parts = []
    if verdicts["missing"]:
        parts.append(count(verdicts["missing"], "figure") + " without a baseline")
    if verdicts["updated"]:
        parts.append(count(verdicts["updated"], "figure") + " recorded by --update-baselines")
    if verdicts["inconclusive"]:
        parts.append(f"{verdicts['inconclusive']} inconclusive")
    ab_inconclusive = Counter(d.ab_verdicts)["inconclusive"]
    if ab_inconclusive:
        parts.append(f"{ab_inconclusive} A/B inconclusive")
    skipped = sum(1 for t in d.tests if t.outcome == "skipped")
    if skipped:
        parts.append(count(skipped, "skipped test"))
    if not_run:
        parts.append(count(len(not_run), "report") + " not run (no file)")
    return ("Not judged: " + ", ".join(parts) + ".") if parts else None


def brief_markdown(tests: Sequence[TestRecord], link: str | None = None, not_run: Sequence[str] = (),
                   budget: int = BUDGET) -> str:
    """The brief of ``tests`` (every record of a run's reports), ``link`` to the full report at its end."""
    d = digest.digest(tests)
    page = _Page(budget)
    page.add("## dlperf results", "", headline_md(d), "")
    tail = [line for line in (not_judged_line(d, not_run),) if line]
    if link:
        tail.append(f"Full report: {link}")
    page.left -= sum(len(line) + 2 for line in tail)

    regressions = sorted(d.by_verdict("regression"), key=lambda m: digest.better_change(m) or 0)
    # a test failed on performance is its regression rows, unless none shows it (the run as a whole, after
    # its common shift): then it is listed, or the headline's FAILED would go unexplained
    shown = {m.test for m in regressions}
    failed = (d.failures["correctness"] + d.failures["other"]
              + [t for t in d.failures["performance"] if t.test not in shown])
    ab = sorted(ab_rows(tests), key=lambda row: row[2].get("ab_verdict") != "regression")
    ab_fields = [f for *_, f in ab]
    references = {reference_of(fields) for _, _, fields in ab}
    reference = [f"Reference: {next(iter(references))}", ""] if len(references) == 1 and "" not in references else []
    machines = {m.hardware for m in regressions}
    on = f" on {code(next(iter(machines)))}" if len(machines) == 1 and None not in machines else ""
    scales = digest.unit_scales(d.figures)
    heading = (f"### {count(len(regressions), 'regression')}{on} against the stored baselines (for information: "
               "in A/B mode they fail nothing)" if d.ab_verdicts else
               f"### {count(len(regressions), 'regression')} beyond the figures' noise{on}")
    several = len({t.hardware for t in failed}) > 1
    listings = [(["### Failed tests", ""], [failed_line(t, several) for t in failed], "failed test"),
                (["### A/B against the reference", "", *reference, *comment_ab_header(ab_fields)],
                 [comment_ab_row(*row, with_reference=not reference, mixed=mixed_confidence(ab_fields)) for row in ab],
                 "comparison"),
                ([heading, "", *REGRESSION_HEADER], [regression_row(m, d, scales, not on) for m in regressions],
                 "regression")]
    listings = [listing for listing in listings if listing[1]]
    for i, (head, rows, noun) in enumerate(listings):  # each list an equal share; what one leaves, the next gets
        page.listing(head, rows, noun, share=page.left // (len(listings) - i))

    page.left += sum(len(line) + 2 for line in tail)
    for line in tail:
        page.add(line, "")
    return "\n".join(page.lines).rstrip("\n") + "\n"
