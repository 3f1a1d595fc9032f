"""One test's records across reports: each framework environment's report holds every test, run or skipped.

A test runs in the environment of its framework and is skipped for want of it in the others; these
rules pick the record that ran it, and count a test, or a figure, once.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Sequence

from pytest_dlperf.reports.records import MetricRecord, TestRecord


#: How one test's runs in several reports (one per framework environment) combine: the worst counts.
_OUTCOME_RANK = {"error": 3, "failed": 2, "passed": 1, "skipped": 0}
#: markers.validate's skip where a test's framework is missing: that report is not the test's own.
_NOT_INSTALLED = re.compile(r"\S+ is not installed in this environment")


def _rank(t: TestRecord) -> int:
    if t.outcome == "skipped" and _NOT_INSTALLED.search(t.message):
        return -1  # below a skip in the test's own environment (no GPU there)
    return _OUTCOME_RANK.get(t.outcome, 0)


def own_records(tests: Iterable[TestRecord]) -> dict[str, TestRecord]:
    """One record per test, from the report that ran it: an error or failure in any report, else a
    pass, else a skip in an environment with the test's framework (its reason: no GPU), else a skip
    for want of the framework; of equals, the later report."""
    out: dict[str, TestRecord] = {}
    for t in tests:
        if t.test not in out or _rank(t) >= _rank(out[t.test]):
            out[t.test] = t
    return out


def test_outcomes(tests: Iterable[TestRecord]) -> dict[str, str]:
    """One outcome per test, however many reports ran it: an error or failure in any of them, else
    passed where any run passed, else skipped (a GPU test skipped in every CPU environment)."""
    return {test: t.outcome for test, t in own_records(tests).items()}


def metrics_by_key(tests: Iterable[TestRecord]) -> dict[tuple[str, str, str], MetricRecord]:
    """Every metric by (test, label, metric); a later report's figure replaces an earlier one's."""
    return {m.key: m for t in tests for m in t.metrics}


def all_skipped(tests: Sequence[TestRecord]) -> dict[str, Counter[str]]:
    """The reports in which every test was skipped (a GPU workflow's MXNet report on an H100), each
    with its own skip reasons and how many tests gave each."""
    by_source: dict[str, list[TestRecord]] = {}
    for t in tests:
        by_source.setdefault(t.source, []).append(t)
    return {source: Counter(t.message or "(no reason given)" for t in ts)
            for source, ts in by_source.items() if all(t.outcome == "skipped" for t in ts)}


def skipped_note(source: str, reasons: Counter[str]) -> str:
    """One line: every test of ``source`` was skipped, and why (the commonest reason first)."""
    total = sum(reasons.values())
    why = "; ".join(f"{reason} ({n} of {total})" if len(reasons) > 1 else reason
                    for reason, n in reasons.most_common())
    return f"Every test in {source} was skipped ({total} tests): {why}"


def unique_tests(tests: Sequence[TestRecord]) -> list[TestRecord]:
    """One record per test: a test in several framework environments' reports counts once, with the
    outcome and skip reason of the report that ran it (``junit.own_records``, as ``dlperf summary``) and the
    figures of every report."""
    own = own_records(tests)  # outcome and skip reason from the report that ran the test
    best: dict[str, TestRecord] = {}
    for t in tests:
        held = best.get(t.test)
        if held is None:
            o = own[t.test]
            best[t.test] = held = TestRecord(t.test, o.outcome, o.message, t.hardware, [], {}, {}, {}, {}, o.source)
        held.metrics = list({m.identity: m for m in held.metrics + t.metrics}.values())  # a figure once
        held.scenarios.update(t.scenarios)
        held.software.update(t.software)
        held.workers.update(t.workers)
        held.hardware = held.hardware or t.hardware
    return list(best.values())
