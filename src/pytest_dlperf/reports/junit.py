"""Reading pytest-dlperf's figures back out of JUnit XML reports, and merging reports.

The names are :mod:`pytest_dlperf.figures`'s (the plugin writes them with it): properties of the
``<testsuite>``, each named after its test (``<node id>::dlperf.<label>.<metric>``). A
``<testcase>`` may hold no ``<properties>`` in the Jenkins xUnit plugin's schema ``junit-10.xsd``,
and that plugin skips an invalid file; pytest's default (xunit2) puts ``user_properties`` there.
Reports from before that change, with the figures in each ``<testcase>``, read the same.

This module turns those back into records; the CLI formats them.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from junitparser import Error, Failure, JUnitXml, JUnitXmlError, Properties, Skipped, TestCase, TestSuite
from junitparser.junitparser import etree

from pytest_dlperf import figures
from pytest_dlperf.figures import AB_FIELDS, PAIRED_FIELDS, split_suite_property
from pytest_dlperf.result import HIGHER, LOWER


#: Name fragments that say which way is better, checked in this order (``time_to_accuracy`` is a time).
_LOWER_WORDS = ("time", "memory", "latency", "seconds", "bytes")
_HIGHER_WORDS = ("throughput", "speedup", "accuracy", "efficiency", "tflops", "flops", "samples_per")


class ReportError(Exception):
    """A report that can't be used: missing, not JUnit XML, or without dlperf figures."""


def direction_of(metric: str) -> str | None:
    """Which way is better for a metric named ``metric``; None when the name doesn't say."""
    name = metric.lower()
    if any(word in name for word in _LOWER_WORDS):
        return LOWER
    if any(word in name for word in _HIGHER_WORDS):
        return HIGHER
    return None


@dataclass
class MetricRecord:
    """One metric of one scenario of one test, as the report holds it."""

    test: str
    label: str
    metric: str
    value: float
    unit: str = ""
    iqr: float | None = None
    n: int | None = None
    verdict: str | None = None
    baseline: float | None = None
    declared_direction: str | None = None
    hardware: str = ""
    source: str = ""
    #: A paired ratio's 95% interval (low, high).
    interval: tuple[float, float] | None = None
    #: Every timed round's figure (reports since samples were recorded; empty in older ones).
    samples: tuple[float, ...] = ()
    #: The tolerance asked for (the floor under the figure's gate), as a fraction.
    tolerance: float | None = None
    #: The figure the test claims at least (a speedup's floor), where the test recorded one.
    floor: float | None = None
    #: The smallest change the verdict could call (its gate), as a fraction; None when unknown.
    detectable: float | None = None
    #: The figure's run-to-run spread (log scale) the gate rested on, and how many runs were recorded.
    noise: float | None = None
    runs: int | None = None
    #: The degrees of freedom behind ``noise`` and the one-sided level the figure was judged at.
    df: float | None = None
    alpha: float | None = None

    @property
    def direction(self) -> str | None:
        return self.declared_direction or direction_of(self.metric)

    @property
    def delta(self) -> float | None:
        """Signed relative change against the baseline (+0.10 = 10% larger)."""
        if self.baseline is None or self.baseline == 0:
            return None
        return (self.value - self.baseline) / abs(self.baseline)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.test, self.label, self.metric)


@dataclass
class TestRecord:
    """One ``<testcase>``: its outcome and the dlperf figures it carries."""

    test: str
    outcome: str  # passed | failed | error | skipped
    message: str = ""
    hardware: str = ""
    metrics: list[MetricRecord] = field(default_factory=list)
    scenarios: dict[str, str] = field(default_factory=dict)
    software: dict[str, str] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)
    #: A/B mode, per label: candidate/reference ratio, its interval, the decision, the reference's software.
    ab: dict[str, dict[str, str]] = field(default_factory=dict)
    source: str = ""

    @property
    def labels(self) -> list[str]:
        seen: dict[str, None] = {}
        for m in self.metrics:
            seen.setdefault(m.label, None)
        return list(seen)


def load(path: str | Path) -> JUnitXml:
    """Parse one JUnit XML file; ReportError names the file and what is wrong with it."""
    p = Path(path)
    if not p.is_file():
        raise ReportError(f"{p}: no such file" + (" (it is a directory)" if p.is_dir() else ""))
    try:
        return JUnitXml.fromfile(str(p))
    except JUnitXmlError:
        raise ReportError(f"{p}: not a JUnit XML report (the root element is neither <testsuites> nor "
                          "<testsuite>); write one with pytest --junitxml=FILE") from None
    except SyntaxError as exc:  # xml.etree's ParseError and lxml's XMLSyntaxError both are
        raise ReportError(f"{p}: not valid XML ({exc}); write a report with pytest --junitxml=FILE") from None
    except OSError as exc:
        raise ReportError(f"{p}: cannot read it ({exc.strerror or exc})") from None


def merge(inputs: Sequence[str | Path]) -> JUnitXml:
    """All test suites of ``inputs`` in one report, properties kept, statistics recomputed; a file
    given twice, or a report merged with itself, adds its test cases once."""
    merged = JUnitXml()
    seen: set[Path] = set()
    for path in inputs:
        if Path(path).resolve() in seen:
            continue
        seen.add(Path(path).resolve())
        merged += load(path)
    for suite in merged:  # junitparser puts the cases of equal suites (same name, host, time) in one
        kept: set[bytes] = set()
        for elem in list(suite._elem):
            if elem.tag != "testcase":
                continue
            text = etree.tostring(elem)
            if text in kept:
                suite._elem.remove(elem)
            kept.add(text)
    merged.update_statistics()
    return merged





def test_address(nodeid: str) -> tuple[str, str]:
    """(classname, name) of the ``<testcase>`` pytest's junitxml writes for ``nodeid`` (as its
    ``mangle_test_address``: the path dotted without ``.py``, then classes; parameters stay in the name)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def _suite_figures(suite: object) -> dict[tuple[str, str], tuple[str, list[tuple[str, str]]]]:
    """A suite's figures by test address: {(classname, name): (node id, [(dlperf name, value)])}."""
    out: dict[tuple[str, str], tuple[str, list[tuple[str, str]]]] = {}
    for prop in getattr(suite, "properties", lambda: [])():
        split = split_suite_property(prop.name or "")
        if split is None:
            continue
        nodeid, name = split
        out.setdefault(test_address(nodeid), (nodeid, []))[1].append((name, prop.value or ""))
    return out


def _figures_of(case: TestCase, figures: dict[tuple[str, str], tuple[str, list[tuple[str, str]]]]
                ) -> tuple[str, list[tuple[str, str]]] | None:
    """The suite figures of ``case``; a ``junit_suite_name``/``--junit-prefix`` prefix on its classname is allowed."""
    classname, name = case.classname or "", case.name or ""
    for (cls, test), found in figures.items():
        if test == name and (cls == classname or classname.endswith("." + cls) or (not cls and not classname)):
            return found
    return None


def _nodeid(case: TestCase) -> str:
    """pytest's junitxml writes ``classname="a.b.test_x"``, ``name="test_y[p]"``: back to a node id."""
    classname = case.classname or ""
    name = case.name or ""
    if not classname:
        return name
    parts = classname.split(".")
    # perf_tests.test_x.TestClass -> perf_tests/test_x.py::TestClass; the module is the last test_*/*_test part.
    module_end = max((i for i, part in enumerate(parts) if part.startswith("test_") or part.endswith("_test")),
                     default=len(parts) - 1)
    path = "/".join(parts[: module_end + 1]) + ".py"
    return "::".join([path, *parts[module_end + 1:], name])


def _outcome(case: TestCase) -> tuple[str, str]:
    for result in case.result:
        kind = {Failure: "failed", Error: "error", Skipped: "skipped"}.get(type(result))
        if kind:
            message = result.message or result.text or ""
            first = next((line.strip() for line in message.splitlines() if line.strip()), "")
            return kind, first
    return "passed", ""


def _df(text: str | None) -> float | None:
    """Degrees of freedom: a number, infinite included."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _properties(case: TestCase) -> list[tuple[str, str]]:
    out = []
    for props in case.iterchildren(Properties):
        out += [(p.name or "", p.value or "") for p in props]
    return out


def record_of(case: TestCase, source: str = "",
              suite_figures: tuple[str, list[tuple[str, str]]] | None = None) -> TestRecord:
    """One test case's outcome and dlperf figures: its own properties (older reports) and, given
    ``suite_figures`` (node id, properties) from its ``<testsuite>``, those."""
    outcome, message = _outcome(case)
    nodeid, suite_props = suite_figures or (_nodeid(case), [])
    rec = TestRecord(test=nodeid, outcome=outcome, message=message, source=source)
    values: dict[tuple[str, str], str] = {}
    extras: dict[tuple[str, str], dict[str, str]] = {}
    for prop, value in _properties(case) + suite_props:
        parsed = figures.parse(prop)
        if parsed is None:
            continue
        label, key = parsed.label, parsed.key
        if parsed.field:
            extras.setdefault((label, key), {})[parsed.field] = value
        elif key == figures.HARDWARE and not label:
            rec.hardware = value
        elif key == "scenario":
            rec.scenarios[label] = value
        elif key == "software":
            rec.software[label] = value
        elif key in AB_FIELDS:
            rec.ab.setdefault(label, {})[key] = value
        elif key in PAIRED_FIELDS:
            continue  # a paired group's ratio; the test's ``speedup`` metric carries the figures
        elif key == "workers":
            try:
                rec.workers[label] = int(value)
            except ValueError:
                pass
        else:
            values[(label, key)] = value
    for (label, metric), text in values.items():
        number = _float(text)
        extra = extras.get((label, metric), {})
        if number is None and (extra or direction_of(metric)) and not _parses(text):
            # a figure (it has metric fields, or a metric's name) that is no number; a note such as
            # dlperf.<label>.settings is text and stays out of the figures
            raise ReportError(f"{source or 'report'}: test {rec.test}: property {figures.name(label, metric)} has the "
                              f"value {text!r}, which is not a number; a dlperf figure must be a number: fix the "
                              "test that records it, or rerun it")
        if number is None:
            continue
        n = _float(extra.get("n"))
        rec.metrics.append(MetricRecord(
            test=rec.test, label=label, metric=metric, value=number, unit=extra.get("unit", ""),
            iqr=_float(extra.get("iqr")), n=int(n) if n is not None else None,
            verdict=extra.get("verdict"), baseline=_float(extra.get("baseline")),
            declared_direction=extra.get("direction") if extra.get("direction") in (HIGHER, LOWER) else None,
            hardware=rec.hardware, source=source, interval=_interval(extra.get("interval")),
            samples=_samples(extra.get("samples")), tolerance=_float(extra.get("tolerance")),
            floor=_float(extra.get("floor")), detectable=_float(extra.get("detectable")),
            noise=_float(extra.get("noise")), runs=int(_float(extra.get("runs")) or 0) or None,
            df=_df(extra.get("df")), alpha=_float(extra.get("alpha")),
        ))
    return rec


def _parses(text: str) -> bool:
    """``text`` is a number, finite or not (``nan`` from a failed measurement is no typo)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _samples(text: str | None) -> tuple[float, ...]:
    values = [_float(part) for part in (text or "").split()]
    return tuple(v for v in values if v is not None)


def _interval(text: str | None) -> tuple[float, float] | None:
    bounds = [_float(part) for part in (text or "").split()]
    return (bounds[0], bounds[1]) if len(bounds) == 2 and None not in bounds else None  # type: ignore[return-value]


def records(xml: JUnitXml | TestSuite, source: str = "") -> list[TestRecord]:
    """Every test case of a report, in file order; an identical test case (a report merged with
    itself) once."""
    out = []
    seen: set[str] = set()
    for suite in [xml] if isinstance(xml, TestSuite) else xml:  # a file whose root is one <testsuite>
        figures = _suite_figures(suite)
        for case in suite:
            rec = record_of(case, source, _figures_of(case, figures))
            if repr(rec) not in seen:
                seen.add(repr(rec))
                out.append(rec)
    return out


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


def read_reports(paths: Iterable[str | Path], require_metrics: bool = True) -> list[TestRecord]:
    """The test records of all ``paths``; with ``require_metrics``, a report set without any dlperf
    figure is an error, unless every test in it was skipped (which the summary then says)."""
    out: list[TestRecord] = []
    paths = list(paths)
    seen: set[Path] = set()
    for path in paths:
        if Path(path).resolve() in seen:  # one file given twice counts once
            continue
        seen.add(Path(path).resolve())
        out += records(load(path), source=str(path))
    if require_metrics and not any(r.metrics for r in out) and not (out and all(r.outcome == "skipped" for r in out)):
        names = ", ".join(str(p) for p in paths)
        raise ReportError(f"{names}: no dlperf.* properties in any test or suite; are these reports of a "
                          "pytest-dlperf run (pytest --junitxml=FILE with tests that use the dlperf fixture)?")
    return out


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
