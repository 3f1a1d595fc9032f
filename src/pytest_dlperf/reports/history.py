"""``dlperf history``: each figure's series over many runs, and the runs where it changed.

A *series* is one figure (hardware key, test, scenario label, metric) over the runs that recorded
it, oldest first: the reports of several runs of the same suite (every ``*.xml`` under a folder, a
run's time the earliest ``timestamp`` of its test suites, else the file's modification time), or a
baseline file's recorded ``older_runs`` and ``runs`` (``baselines/<key>.json``: ``{"value": ...,
"recorded": ...}``).

Change points are found by E-divisive means (:mod:`.changepoints`); only the newest ``WINDOW`` runs
are analysed (the test costs O(n^3) per shuffle). docs/history.md gives the false-alarm and
detection rates this measures.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from pytest_dlperf import text
from pytest_dlperf.judging.baselines import split_entry_key
from pytest_dlperf.reports.changepoints import MAX_PVALUE, MIN_SEGMENT, PERMUTATIONS, change_points, min_runs
from pytest_dlperf.reports.junit import expand, load, records, report_time, utc_time
from pytest_dlperf.reports.records import ReportError, direction_of
from pytest_dlperf.result import HIGHER, LOWER, FigureId
from pytest_dlperf.units import show

#: The newest runs analysed; older runs are shown but not searched.
WINDOW = 60


# --- series --------------------------------------------------------------------------------------

@dataclass
class Point:
    """One run's figure: its value, when the run was, and where it was read."""

    value: float
    when: _dt.datetime
    source: str


@dataclass(frozen=True)
class Series(FigureId):
    """One figure's values over runs, oldest first."""

    unit: str = ""
    direction: str | None = None
    points: list[Point] = field(default_factory=list)

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]

    def name(self, with_hardware: bool = False) -> str:
        where = f" on {self.hardware}" if with_hardware and self.hardware else ""
        return f"{text.short_test(self.test)}::{self.label} {self.metric}{where}"


@dataclass
class Level:
    """A stretch of runs between change points: [start, end), its mean and run-to-run spread."""

    start: int
    end: int
    mean: float
    std: float


@dataclass
class Change:
    """A change point: ``index`` is the first run on the new level (0-based)."""

    index: int
    before: Level
    after: Level
    p: float
    #: The newest runs are still on the new level's side, at least half the change away from the old one.
    persisted: bool

    @property
    def size(self) -> float | None:
        """Relative change of the level (+0.10: 10% larger)."""
        return (self.after.mean - self.before.mean) / abs(self.before.mean) if self.before.mean else None


@dataclass
class Analysis:
    series: Series
    changes: list[Change]
    levels: list[Level]
    #: The index of the first run analysed (older runs lie outside the window).
    first: int = 0
    #: The runs a series needs to be analysed (:func:`min_runs`).
    needed: int = 0

    @property
    def too_short(self) -> bool:
        return len(self.series.points) - self.first < self.needed


def _level(values: np.ndarray, start: int, end: int) -> Level:
    part = values[start:end]
    return Level(start, end, float(part.mean()), float(part.std(ddof=1)) if len(part) > 1 else 0.0)


def analyse(series: Series, max_pvalue: float = MAX_PVALUE, permutations: int = PERMUTATIONS,
            min_size: int = MIN_SEGMENT, window: int = WINDOW) -> Analysis:
    values = np.asarray(series.values, dtype=float)
    first = max(0, len(values) - window)
    needed = min_runs(max_pvalue, min_size)
    if len(values) - first < needed:
        return Analysis(series, [], [_level(values, 0, len(values))] if len(values) else [], first, needed)
    seed = zlib.crc32("\0".join(series.identity).encode())  # the same report set gives the same answer
    found = [(first + i, p) for i, p in change_points(values[first:], max_pvalue, permutations, min_size, seed)]
    cuts = [first, *(i for i, _ in found), len(values)]  # runs before the window belong to no level
    levels = [_level(values, lo, hi) for lo, hi in zip(cuts, cuts[1:])]
    newest = levels[-1].mean
    changes = []
    for k, (index, p) in enumerate(found):
        before, after = levels[k], levels[k + 1]
        step = after.mean - before.mean
        persisted = step * (newest - before.mean) > 0 and abs(newest - before.mean) >= abs(step) / 2
        changes.append(Change(index, before, after, p, persisted))
    return Analysis(series, changes, levels, first, needed)


# --- reading -------------------------------------------------------------------------------------


def _baseline_points(path: Path) -> list[tuple[FigureId, str, str | None, Point]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ReportError(f"{path}: not valid JSON ({exc}); give a baselines/<key>.json file") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        raise ReportError(f"{path}: not a baseline file (no 'entries' object); give baselines/<key>.json")
    out = []
    for key, metrics in data["entries"].items():
        nodeid, label, profile = split_entry_key(key)
        for metric, rec in (metrics or {}).items():
            runs = rec.get("runs") if isinstance(rec, dict) else None
            if not isinstance(runs, list):
                continue  # a baseline recorded before run history was kept
            older = rec.get("older_runs", [])  # the runs no longer judged against, kept for history
            if not isinstance(older, list):
                raise ReportError(f"{path}: entry {key!r} metric {metric!r}: 'older_runs' is not a list of runs")
            runs = older + runs
            for i, run in enumerate(runs):
                value = run.get("value") if isinstance(run, dict) else None
                when = utc_time(str(run.get("recorded", ""))) if isinstance(run, dict) else None
                if not isinstance(value, (int, float)) or isinstance(value, bool) or when is None:
                    raise ReportError(f"{path}: entry {key!r} metric {metric!r} run {i}: expected "
                                      f"{{\"value\": number, \"recorded\": ISO time}}, got {run!r}")
                out.append((FigureId(nodeid, f"{label}@{profile}" if profile else label, metric, hardware=path.stem),
                            str(rec.get("unit", "")), rec.get("direction"), Point(float(value), when, str(path))))
    return out


def read_series(paths: Iterable[str | Path]) -> list[Series]:
    """Every figure's series in ``paths`` (reports, folders of them, baseline files), oldest run first."""
    found: dict[tuple[str, str, str, str], Series] = {}
    # the latest direction a run recorded, where any did; else the metric's name says
    directions: dict[tuple[str, str, str, str], str] = {}
    files = expand(paths)
    if not files:
        raise ReportError("no reports given")
    for path in files:
        if path.suffix == ".json":
            for figure, unit, direction, point in _baseline_points(path):
                found.setdefault(figure.identity, _series(figure, unit)).points.append(point)
                if direction in (HIGHER, LOWER):
                    directions[figure.identity] = direction
            continue
        xml = load(path)
        when = report_time(path, xml)
        per_run: dict[tuple[str, str, str, str], Point] = {}
        for t in records(xml, source=str(path)):
            for m in t.metrics:
                found.setdefault(m.identity, _series(m, m.unit))
                if m.direction:
                    directions[m.identity] = m.direction
                per_run[m.identity] = Point(m.value, when, str(path))  # a test twice in one report counts once
        for key, point in per_run.items():
            found[key].points.append(point)
    for s in found.values():
        s.points.sort(key=lambda p: (p.when, p.source))
    return sorted((dataclasses.replace(s, direction=directions.get(key) or direction_of(s.metric))
                   for key, s in found.items()), key=lambda s: s.identity)


def _series(figure: FigureId, unit: str) -> Series:
    """An empty series of ``figure`` (a plain id, or a report's record of it)."""
    return Series(figure.test, figure.label, figure.metric, hardware=figure.hardware, unit=unit)


def history(paths: Iterable[str | Path], max_pvalue: float = MAX_PVALUE) -> list[Analysis]:
    """The analyses of every series in ``paths``; changed figures first, the latest change first."""
    paths = list(paths)
    series = read_series(paths)
    if not series:
        raise ReportError(f"{', '.join(map(str, paths))}: no dlperf figures and no baseline 'runs' to follow; "
                          "give reports of pytest-dlperf runs (pytest --junitxml=FILE) or baselines/<key>.json")
    analyses = [analyse(s, max_pvalue) for s in series]
    def newest_change(a: Analysis) -> float:
        return -a.series.points[a.changes[-1].index].when.timestamp() if a.changes else 0.0

    return sorted(analyses, key=lambda a: (not a.changes, newest_change(a), a.series.identity))


# --- output --------------------------------------------------------------------------------------

def show_date(when: _dt.datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M")


def show_size(change: Change, direction: str | None) -> str:
    if change.size is None:
        return "-"
    better = (change.size > 0) == (direction == HIGHER) if direction else None
    return f"{change.size:+.1%}" + ("" if better is None else " (better)" if better else " (worse)")


def _noise(a: Analysis) -> str:
    rel = [lv.std / abs(lv.mean) for lv in a.levels if lv.mean and lv.end - lv.start > 1]
    return f"±{max(rel):.1%}" if rel else "-"


def rows(analyses: Sequence[Analysis]) -> list[tuple[str, ...]]:
    several = len({a.series.hardware for a in analyses}) > 1
    out: list[tuple[str, ...]] = []
    for a in analyses:
        s = a.series
        name, runs, last = s.name(several), str(len(s.points)), show(s.points[-1].value, s.unit)
        if a.too_short:
            out.append((name, runs, last, f"too few runs (fewer than {a.needed})", "-", "-", "-", _noise(a)))
        elif not a.changes:
            out.append((name, runs, last, "none", "-", "-", "-", _noise(a)))
        for c in reversed(a.changes):
            out.append((name, runs, last, f"run {c.index + 1} ({show_date(s.points[c.index].when)})",
                        show_size(c, s.direction), "yes" if c.persisted else "no", f"{c.p:.3f}", _noise(a)))
    return out


HEADER = ("figure", "runs", "last value", "change at", "size", "persisted", "p", "noise")


def table(analyses: Sequence[Analysis]) -> list[str]:
    return text.table(HEADER, rows(analyses))


def method_line(max_pvalue: float = MAX_PVALUE) -> str:
    return (f"Change points: E-divisive means, kept at p <= {max_pvalue:g} in a permutation test of "
            f"{PERMUTATIONS} shuffles; each level at least {MIN_SEGMENT} runs (a series needs "
            f"{min_runs(max_pvalue)}), "
            f"the newest {WINDOW} runs analysed. Persisted: the newest runs stay on the new level's side, at "
            "least half the change away from the old one. Noise: the largest run-to-run standard deviation "
            "of a level. See docs/history.md.")


def summary_line(analyses: Sequence[Analysis]) -> str:
    changed = sum(1 for a in analyses if a.changes)
    short = [a for a in analyses if a.too_short]
    return (f"{changed} of {len(analyses)} figures changed"
            + (f"; {len(short)} have fewer than {short[0].needed} runs and are not analysed" if short else "") + ".")


