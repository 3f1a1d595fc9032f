"""What a run's reports say, decided once for ``dlperf summary`` and ``dlperf html``: the verdict line,
the distinct figures, correctness failures, and the paired evidence beside an absolute throughput change.
How far a whole run moved is the plugin's judged ``<kind> shift`` figure (:mod:`pytest_dlperf.judging.run_shift`),
reported like any other.

Rules (written down here and shown on the page):

- **Distinct figure**: one per (test, scenario label, metric, hardware key). A figure that appears in
  several reports (a merged report beside its parts) or several records of one test counts once; the
  later report's copy is kept.
- **Correctness failure**: a failed or errored test whose first message line is not a performance
  verdict (``regression: ...``, ``A/B slower``, ``... vs baseline ...``) and mentions accuracy, NaN,
  inf / non-finite values, the loss, weights or parameters, or equivalence (``equivalent``,
  ``allclose``). Other failures are listed as such.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from pytest_dlperf.figures import NOT_COMPARED
from pytest_dlperf.reports.combine import own_records
from pytest_dlperf.reports.records import MetricRecord, TestRecord
from pytest_dlperf.result import LOWER
from pytest_dlperf.units import count, readable

JUDGED = ("regression", "improvement", "ok", "inconclusive")

_PERFORMANCE = re.compile(r"^(?:[\w.]+: )?(?:also )?regression\b|\bA/B slower\b|\bvs baseline\b", re.I)
_CORRECTNESS = re.compile(r"accura|\bnan\b|non-?finite|not finite|\binf\b|infinit|\bloss\b|\bweights?\b"
                          r"|\bparam(?:eter)?s?\b|equivalen|allclose", re.I)

def distinct(tests: Sequence[TestRecord]) -> list[MetricRecord]:
    """Every figure once (its ``identity``), in first-seen order, the later report's copy kept."""
    out: dict[tuple[str, str, str, str], MetricRecord] = {}
    for t in tests:
        for m in t.metrics:
            out[m.identity] = m
    return list(out.values())


def failure_kind(t: TestRecord) -> str | None:
    """``performance``, ``correctness`` or ``other`` for a failed or errored test; None otherwise."""
    if t.outcome not in ("failed", "error"):
        return None
    if _PERFORMANCE.search(t.message):
        return "performance"
    return "correctness" if _CORRECTNESS.search(t.message) else "other"


def parse_software(text: str) -> dict[str, str]:
    """``framework=torch framework_version=2.4 python=3.11`` -> a dict."""
    return dict(part.partition("=")[::2] for part in text.split() if "=" in part)


def framework_of(t: TestRecord, label: str) -> str:
    """The framework a scenario ran, else the test's (a speedup has no software of its own), else ""."""
    for text in (t.software.get(label, ""), *t.software.values()):
        fw = parse_software(text).get("framework")
        if fw:
            return fw
    return ""


def better_change(m: MetricRecord) -> float | None:
    """The change from the baseline with the sign of better: +0.1 is 10% better, whichever way is better."""
    if m.delta is None:
        return None
    return -m.delta if m.direction == LOWER else m.delta


def gate_of(m: MetricRecord) -> float | None:
    """The figure's gate where the report records it (``.detectable``: the change for the worse it catches
    19 times in 20), else its tolerance."""
    return m.detectable if m.detectable is not None else m.tolerance


def marks_of(m: MetricRecord) -> list[str]:
    """What every table marks beside a judged figure's gate: one sample, or a gate that cannot detect.
    A figure only recorded (no verdict: ``dlperf.check(unjudged=...)``, a derived count) has no gate to mark."""
    if not m.verdict:
        return []
    return (["n=1"] if m.n == 1 else []) + (["cannot detect"] if cannot_detect(m) else [])


def cannot_detect(m: MetricRecord) -> bool:
    """A judged figure whose report says it does not catch a halving or a doubling 19 times in 20 (``.detectable none``;
    ``unknown`` in older reports). A report from before gates were recorded has no ``.runs`` either,
    and is not marked: it does not say."""
    return m.verdict in JUDGED and m.detectable is None and m.runs is not None


def unit_scales(figures: Sequence[MetricRecord]) -> dict[tuple[str, str], tuple[float, str]]:
    """One shown unit per (metric, measured unit): the one its median figure reads best in, so that
    every peak_host_memory on a page is in GiB (or every one in MiB), never a mix."""
    values: dict[tuple[str, str], list[float]] = {}
    for m in figures:
        values.setdefault((m.metric, m.unit), []).append(abs(m.value))
    out = {}
    for (metric, unit), vs in values.items():
        middle = statistics.median(vs)
        shown, name = readable(middle, unit)
        out[(metric, unit)] = (middle / shown if shown else 1.0, name)
    return out


def paired_evidence(m: MetricRecord, figures: Sequence[MetricRecord]) -> list[MetricRecord]:
    """The paired speedups of the same test and machine beside an absolute throughput figure."""
    if m.metric != "throughput":
        return []
    return [p for p in figures if p.metric == "speedup" and p.test == m.test and p.hardware == m.hardware]


def paired_text(p: MetricRecord) -> str:
    interval = f" [{p.interval[0]:.3g}, {p.interval[1]:.3g}]" if p.interval else " (no interval)"
    return f"{p.label} speedup {p.value:.3g}x{interval}" + (f", {p.verdict}" if p.verdict else "")


@dataclass
class Digest:
    """A run's reports, decided: what the verdict line and the first sections say."""

    tests: list[TestRecord]
    figures: list[MetricRecord]
    failures: dict[str, list[TestRecord]]
    hardware: list[str]
    software: list[str]
    runs: tuple[int, int] | None

    def by_verdict(self, verdict: str) -> list[MetricRecord]:
        return [m for m in self.figures if m.verdict == verdict]

    @property
    def ab_verdicts(self) -> list[str]:
        """A/B mode: each (test, scenario)'s candidate-against-reference decision, once."""
        found: dict[tuple[str, str], str] = {}
        for t in self.tests:
            for label, fields in t.ab.items():
                found[(t.test, label)] = fields.get("ab_verdict", "")
        return list(found.values())

    @property
    def failed(self) -> bool:
        # In A/B mode the stored baselines are information: only the A/B decisions and failed tests fail.
        if self.ab_verdicts:
            return "regression" in self.ab_verdicts or any(self.failures.values())
        return bool(self.by_verdict("regression") or any(self.failures.values()))

    @property
    def judged(self) -> int:
        return sum(1 for m in self.figures if m.verdict in JUDGED)

    @property
    def headline(self) -> str:
        """FAILED, PASSED, RECORDED or NOT JUDGED: a run that failed nothing and judged no figure passed
        nothing a performance gate could fail; it recorded baselines (``--update-baselines``), or it had
        none to judge against (every baseline missing, every test skipped)."""
        if self.failed:
            return "FAILED"
        if self.judged or self.ab_verdicts:
            return "PASSED"
        return "RECORDED" if self.by_verdict("updated") else "NOT JUDGED"

    def verdict_line(self) -> str:
        """One line: what happened, and what was compared with what."""
        if self.ab_verdicts:
            return self.ab_line()
        if self.headline == "RECORDED":
            return self.recorded_line()
        regressions = self.by_verdict("regression")
        parts = [count(len(regressions), "regression") + " beyond its noise" if len(regressions) == 1 else
                 count(len(regressions), "regression") + " beyond their noise",
                 count(len(self.failures["correctness"]), "correctness failure")]
        if self.failures["other"]:
            parts.append(count(len(self.failures["other"]), "other failed test"))
        parts.append(f"{len(self.by_verdict('inconclusive'))} inconclusive")
        judged = self.judged
        where = ", ".join(self.hardware) or "an unnamed machine"
        runs = ""
        if self.runs:
            low, high = self.runs
            runs = (f" ({low} recorded run{'s' if high > 1 else ''})" if low == high
                    else f" ({low}-{high} recorded runs)")
        compared = (f"{count(judged, 'figure')} on {where} against "
                    f"{'its' if len(self.hardware) < 2 else 'their'} baselines{runs}")
        missing = len(self.by_verdict("missing"))
        if missing:
            parts.append(count(missing, "figure") + " without a baseline")
        hint = (" · record baselines with `dlperf record` (or --update-baselines) and commit them"
                if missing and self.headline == "NOT JUDGED" else "")
        return (f"{self.headline}: " + ", ".join(parts) + f" · {compared}"
                + (f" · {', '.join(self.software)}" if self.software else "") + hint)

    def recorded_line(self) -> str:
        """A recording run's line (``--update-baselines``): what it wrote and for which machine; it judged nothing."""
        where = ", ".join(self.hardware) or "an unnamed machine"
        missing = len(self.by_verdict("missing"))
        extra = f", {count(missing, 'figure')} without a baseline" if missing else ""
        return (f"RECORDED: {count(len(self.by_verdict('updated')), 'figure')} written as baselines for {where}, "
                f"none judged{extra}" + (f" · {', '.join(self.software)}" if self.software else ""))


    def ab_line(self) -> str:
        """A/B mode's line: the candidate-against-reference decisions lead; the stored baselines follow as
        information, since in A/B mode they fail no test."""
        c = Counter(self.ab_verdicts)
        parts = [f"{c['regression']} A/B slower", f"{c['improvement']} faster", f"{c['ok']} no change",
                 f"{c['inconclusive']} inconclusive", count(len(self.failures["correctness"]), "correctness failure")]
        if self.failures["other"]:
            parts.append(count(len(self.failures["other"]), "other failed test"))
        new = f" ({c[NOT_COMPARED]} new in the candidate, not compared)" if c[NOT_COMPARED] else ""
        stored = (f"stored baselines, for information: {count(len(self.by_verdict('regression')), 'regression')} "
                  f"of {count(self.judged, 'figure')} judged")
        compared = count(len(self.ab_verdicts) - c[NOT_COMPARED], "scenario")
        return (f"{self.headline}: " + ", ".join(parts) + f" · {compared} compared with the reference{new} · {stored}"
                + (f" · {', '.join(self.software)}" if self.software else ""))


def digest(tests: Sequence[TestRecord]) -> Digest:
    """Decide what ``tests`` (every record of a run's reports) say."""
    own = own_records(tests)
    figures = distinct(tests)
    failures: dict[str, list[TestRecord]] = {"correctness": [], "performance": [], "other": []}
    for t in own.values():
        kind = failure_kind(t)
        if kind:
            failures[kind].append(t)
    software: Counter[str] = Counter()
    for t in tests:
        for text in t.software.values():
            sw = parse_software(text)
            if sw.get("framework"):
                software[f"{sw['framework']} {sw.get('framework_version', '?')}"] += 1
            if sw.get("python"):
                software[f"python {sw['python']}"] += 1
    runs = [m.runs for m in figures if m.runs]
    return Digest(list(tests), figures, failures, sorted({m.hardware for m in figures if m.hardware}
                                                          | {t.hardware for t in tests if t.hardware}),
                  sorted(software), (min(runs), max(runs)) if runs else None)
