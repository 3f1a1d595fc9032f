"""Reading pytest-dlperf's figures back out of JUnit XML reports, finding them, and merging reports.

The names are :mod:`pytest_dlperf.figures`'s (the plugin writes them with it): properties of the
``<testsuite>``, each named after its test (``<node id>::dlperf.<label>.<metric>``). A
``<testcase>`` may hold no ``<properties>`` in the Jenkins xUnit plugin's schema ``junit-10.xsd``,
and that plugin skips an invalid file; pytest's default (xunit2) puts ``user_properties`` there.
Reports from before that change, with the figures in each ``<testcase>``, read the same.

This module turns those back into records (:mod:`.records`); the commands format them.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

from junitparser import Error, Failure, JUnitXml, JUnitXmlError, Properties, Skipped, TestCase, TestSuite
from junitparser.junitparser import etree

from pytest_dlperf import figures
from pytest_dlperf.figures import AB_FIELDS, PAIRED_FIELDS, split_suite_property
from pytest_dlperf.reports.records import MetricRecord, ReportError, TestRecord, direction_of
from pytest_dlperf.result import HIGHER, LOWER


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


#: markers.validate's skip where a test's framework is missing: that report is not the test's own.
_NOT_INSTALLED = re.compile(r"\S+ is not installed in this environment")


def expand(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; a folder gives every ``*.xml`` under it, at any depth. A file given twice, or
    also found in a folder given, is listed once: it is one run."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.rglob("*.xml") if q.is_file())
            if not found:
                raise ReportError(f"{p}: a folder without any .xml report under it")
            out += found
        else:
            out.append(p)
    unique: dict[Path, Path] = {}
    for p in out:
        unique.setdefault(p.resolve(), p)
    return list(unique.values())


def utc_time(stamp: str) -> _dt.datetime | None:
    """An ISO time in UTC; one without a zone is taken as UTC. None when ``stamp`` is no ISO time."""
    try:
        when = _dt.datetime.fromisoformat(stamp.strip())
    except ValueError:
        return None
    return when.replace(tzinfo=_dt.timezone.utc) if when.tzinfo is None else when.astimezone(_dt.timezone.utc)


def _mtime(path: Path) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(os.path.getmtime(path), _dt.timezone.utc)


def report_time(path: Path, xml: object) -> _dt.datetime:
    """A report's run time, in UTC: the earliest ``timestamp`` of its test suites, else the file's mtime."""
    own = getattr(xml, "timestamp", None)  # a report whose root is one <testsuite>
    stamps = [own] if own else [getattr(s, "timestamp", None) for s in xml]  # type: ignore[attr-defined]
    times = [t for t in (utc_time(s) for s in stamps if s) if t is not None]
    return min(times) if times else _mtime(path)
