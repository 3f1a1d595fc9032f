"""``dlperf summary --brief``: a run's verdict as Markdown short enough for a pull-request comment.

The summary's verdict line first, then what failed (failed tests, each regression beyond its noise with
observed, baseline, change and gate), the A/B ratios with their intervals, one line counting what was
not judged, and a link to the full report. Long lists end in an "and N more" line, so that the whole
stays within :data:`BUDGET` characters whatever the size of the run.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from pytest_dlperf.reports import digest
from pytest_dlperf.reports.records import TestRecord
from pytest_dlperf.reports.summary import AB_HEADER, FIGURE_HEADER, ab_row, ab_rows, cell, figure_row, headline_md
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

    failed = d.failures["correctness"] + d.failures["other"]
    ab = sorted(ab_rows(tests), key=lambda row: row[2].get("ab_verdict") != "regression")
    regressions = sorted(d.by_verdict("regression"), key=lambda m: digest.better_change(m) or 0)
    scales = digest.unit_scales(d.figures)
    heading = (f"### {count(len(regressions), 'regression')} against the stored baselines (for information: "
               "in A/B mode they fail nothing)" if d.ab_verdicts else
               f"### {count(len(regressions), 'regression')} beyond the figures' noise")
    listings = [(["### Failed tests", ""],
                 [f"- `{cell(t.test)}`" + (f" on `{cell(t.hardware)}`" if t.hardware else "")
                  + f": {cell(_clip(t.message, MESSAGE_CHARS)) or '(no message)'}" for t in failed], "failed test"),
                (["### A/B against the reference", "", *AB_HEADER], [ab_row(*row) for row in ab], "comparison"),
                ([heading, "", *FIGURE_HEADER], [figure_row(m, d, scales) for m in regressions], "regression")]
    listings = [listing for listing in listings if listing[1]]
    for i, (head, rows, noun) in enumerate(listings):  # each list an equal share; what one leaves, the next gets
        page.listing(head, rows, noun, share=page.left // (len(listings) - i))

    page.left += sum(len(line) + 2 for line in tail)
    for line in tail:
        page.add(line, "")
    return "\n".join(page.lines).rstrip("\n") + "\n"
