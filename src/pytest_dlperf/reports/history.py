"""``dlperf history``: each figure's series over many runs, and the runs where it changed.

A *series* is one figure (hardware key, test, scenario label, metric) over the runs that recorded
it, oldest first: the reports of several runs of the same suite (every ``*.xml`` under a folder, a
run's time the earliest ``timestamp`` of its test suites, else the file's modification time), or a
baseline file's recorded ``runs`` (``baselines/<key>.json``: ``{"value": ..., "recorded": ...}``).

Change points are found by E-divisive means (Matteson and James 2014, as Apache Otava/Hunter use
it): the split of a segment that maximises the energy distance between its two sides is a
candidate; a permutation test (the values shuffled within each segment, ``PERMUTATIONS`` times)
keeps it when no more than ``MAX_PVALUE`` of the shuffles give as large a statistic; the sides
are then split again until no candidate passes. Each side keeps at least ``MIN_SEGMENT`` runs, so
a change in the last ``MIN_SEGMENT - 1`` runs waits for more runs; and a series needs
:func:`min_runs` runs (17 at p <= 0.001): with fewer, even a clean step ``MIN_SEGMENT`` runs from an
end cannot reach that p, as too few shuffles differ from it. Only the newest ``WINDOW`` runs are
analysed (the test costs O(n^3) per shuffle).
docs/history.md gives the false-alarm and detection rates this measures.

Pure Python and numpy: the TensorFlow and MXNet environments have no scipy.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from pytest_dlperf.reports.junit import ReportError, direction_of, load, records
from pytest_dlperf.result import HIGHER, LOWER
from pytest_dlperf import text
from pytest_dlperf.units import show

#: Significance of a change point, Otava's default.
MAX_PVALUE = 0.001
#: Shuffles per test: with 999 a change needs every shuffle below it (p = 1/1000).
PERMUTATIONS = 999
#: Runs each side of a change must have at least.
MIN_SEGMENT = 4
#: The newest runs analysed; older runs are shown but not searched.
WINDOW = 60
_BATCH = 111  # shuffles per numpy batch; 9 batches make PERMUTATIONS


# --- the method ----------------------------------------------------------------------------------

def min_runs(max_pvalue: float = MAX_PVALUE, min_size: int = MIN_SEGMENT) -> int:
    """The shortest series in which a clean step ``min_size`` runs from an end can reach ``max_pvalue``:
    the shuffles that split it as the step does (either way round) must be rarer than ``max_pvalue``."""
    n = 2 * min_size
    while 2 / math.comb(n, min_size) > max_pvalue:
        n += 1
    return n


def q_grid(x: np.ndarray, min_size: int = MIN_SEGMENT) -> np.ndarray:
    """E-divisive's statistic for each row of ``x`` (shape (rows, n)): ``[:, t, k]`` is Q of the sides
    ``[:t]`` and ``[t:k]`` (Matteson and James's Q-hat, as Otava computes it); -inf where a side would be
    shorter than ``min_size``."""
    rows, n = x.shape
    out = np.full((rows, n + 1, n + 1), -np.inf)
    if n < 2 * min_size:
        return out
    d = np.abs(x[:, :, None] - x[:, None, :])
    s = np.zeros((rows, n + 1, n + 1))
    s[:, 1:, 1:] = d.cumsum(1).cumsum(2)  # s[:, a, b] = the sum of d[:, :a, :b]
    t = np.arange(n + 1)[:, None]
    k = np.arange(n + 1)[None, :]
    valid = (t >= min_size) & (k - t >= min_size)
    ti, ki = np.nonzero(valid)
    within_left = s[:, ti, ti]  # every ordered pair of the left side: twice the pairs
    cross = s[:, ti, ki] - within_left
    within_right = s[:, ki, ki] - 2 * s[:, ti, ki] + within_left
    a, b = ti.astype(float), (ki - ti).astype(float)
    e = 2 * cross / (a * b) - within_left / (a * (a - 1)) - within_right / (b * (b - 1))
    out[:, ti, ki] = a * b / (a + b) * e
    return out


def qhats(x: np.ndarray, min_size: int = MIN_SEGMENT) -> np.ndarray:
    """The largest Q of each split ``t`` of each row of ``x`` (over where its right side ends):
    shape (rows, n), -inf where no split is allowed."""
    return q_grid(x, min_size).max(axis=2)[:, : x.shape[1]]


def _best(values: np.ndarray, bounds: Sequence[int], min_size: int) -> tuple[float, int]:
    """The largest Q over the segments ``bounds`` cut ``values`` into, and its split (an index of values)."""
    best, where = -np.inf, -1
    for lo, hi in zip(bounds, bounds[1:]):
        q = qhats(values[None, lo:hi], min_size)[0]
        i = int(np.argmax(q))
        if q[i] > best:
            best, where = float(q[i]), lo + i
    return best, where


def _permutation_p(values: np.ndarray, bounds: Sequence[int], observed: float, min_size: int,
                   rng: np.random.Generator, permutations: int, max_pvalue: float) -> float:
    """p of ``observed`` against the largest Q of ``values`` shuffled within each segment; stops
    shuffling once p can no longer reach ``max_pvalue`` (the returned p then only bounds it below)."""
    allowed = max_pvalue * (permutations + 1) - 1  # shuffles at or above ``observed`` that still pass
    at_least, done = 0, 0
    tolerance = 1e-9 * max(abs(observed), 1e-300)
    while done < permutations:
        size = min(_BATCH, permutations - done)
        top = np.full(size, -np.inf)
        for lo, hi in zip(bounds, bounds[1:]):
            if hi - lo < 2 * min_size:
                continue
            shuffled = rng.permuted(np.tile(values[lo:hi], (size, 1)), axis=1)
            top = np.maximum(top, qhats(shuffled, min_size).max(axis=1))
        at_least += int(np.sum(top >= observed - tolerance))
        done += size
        if at_least > allowed:
            break
    return (at_least + 1) / (done + 1)


def change_points(values: Sequence[float] | np.ndarray, max_pvalue: float = MAX_PVALUE,
                  permutations: int = PERMUTATIONS, min_size: int = MIN_SEGMENT,
                  seed: int = 0) -> list[tuple[int, float]]:
    """E-divisive means: [(index of the first value on the new level, p)], in series order."""
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    found: list[tuple[int, float]] = []
    while True:
        bounds = [0, *sorted(i for i, _ in found), len(x)]
        observed, where = _best(x, bounds, min_size)
        if where < 0 or not np.isfinite(observed) or observed <= 0:
            return sorted(found)
        p = _permutation_p(x, bounds, observed, min_size, rng, permutations, max_pvalue)
        if p > max_pvalue:
            return sorted(found)
        found.append((where, p))


# --- series --------------------------------------------------------------------------------------

@dataclass
class Point:
    """One run's figure: its value, when the run was, and where it was read."""

    value: float
    when: _dt.datetime
    source: str


@dataclass
class Series:
    hardware: str
    test: str
    label: str
    metric: str
    unit: str = ""
    direction: str | None = None
    points: list[Point] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.hardware, self.test, self.label, self.metric)

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]

    def name(self, with_hardware: bool = False) -> str:
        path, _, rest = self.test.partition("::")
        test = f"{Path(path).name}::{rest}" if rest else self.test
        where = f" on {self.hardware}" if with_hardware and self.hardware else ""
        return f"{test}::{self.label} {self.metric}{where}"


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
    seed = zlib.crc32("\0".join(series.key).encode())  # the same report set gives the same answer
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

def _utc(stamp: str) -> _dt.datetime | None:
    try:
        when = _dt.datetime.fromisoformat(stamp.strip())
    except ValueError:
        return None
    return when.replace(tzinfo=_dt.timezone.utc) if when.tzinfo is None else when.astimezone(_dt.timezone.utc)


def _mtime(path: Path) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(os.path.getmtime(path), _dt.timezone.utc)


def report_time(path: Path, xml: object) -> _dt.datetime:
    """A report's run time: the earliest ``timestamp`` of its test suites, else the file's mtime."""
    own = getattr(xml, "timestamp", None)  # a report whose root is one <testsuite>
    stamps = [own] if own else [getattr(s, "timestamp", None) for s in xml]  # type: ignore[attr-defined]
    times = [t for t in (_utc(s) for s in stamps if s) if t is not None]
    return min(times) if times else _mtime(path)


def expand(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; a folder gives every ``*.xml`` under it."""
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
    for p in out:  # a file given twice, or also found in a folder given, is one run
        unique.setdefault(p.resolve(), p)
    return list(unique.values())


def _baseline_points(path: Path) -> list[tuple[tuple[str, str, str, str], str, str | None, Point]]:
    from pytest_dlperf.judging.baselines import split_entry_key

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
            for i, run in enumerate(runs):
                value = run.get("value") if isinstance(run, dict) else None
                when = _utc(str(run.get("recorded", ""))) if isinstance(run, dict) else None
                if not isinstance(value, (int, float)) or isinstance(value, bool) or when is None:
                    raise ReportError(f"{path}: entry {key!r} metric {metric!r} run {i}: expected "
                                      f"{{\"value\": number, \"recorded\": ISO time}}, got {run!r}")
                out.append(((path.stem, nodeid, f"{label}@{profile}" if profile else label, metric),
                            str(rec.get("unit", "")), rec.get("direction"), Point(float(value), when, str(path))))
    return out


def read_series(paths: Iterable[str | Path]) -> list[Series]:
    """Every figure's series in ``paths`` (reports, folders of them, baseline files), oldest run first."""
    found: dict[tuple[str, str, str, str], Series] = {}
    files = expand(paths)
    if not files:
        raise ReportError("no reports given")
    for path in files:
        if path.suffix == ".json":
            for key, unit, direction, point in _baseline_points(path):
                s = found.setdefault(key, Series(*key, unit=unit))
                s.direction = direction if direction in (HIGHER, LOWER) else s.direction
                s.points.append(point)
            continue
        xml = load(path)
        when = report_time(path, xml)
        per_run: dict[tuple[str, str, str, str], Point] = {}
        for t in records(xml, source=str(path)):
            for m in t.metrics:
                key = (m.hardware, *m.key)
                s = found.setdefault(key, Series(*key, unit=m.unit))
                s.direction = m.direction or s.direction
                per_run[key] = Point(m.value, when, str(path))  # a test twice in one report counts once
        for key, point in per_run.items():
            found[key].points.append(point)
    for s in found.values():
        s.points.sort(key=lambda p: (p.when, p.source))
        s.direction = s.direction or direction_of(s.metric)
    return sorted(found.values(), key=lambda s: s.key)


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

    return sorted(analyses, key=lambda a: (not a.changes, newest_change(a), a.series.key))


# --- output --------------------------------------------------------------------------------------

def _date(when: _dt.datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M")


def _size(change: Change, direction: str | None) -> str:
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
            out.append((name, runs, last, f"run {c.index + 1} ({_date(s.points[c.index].when)})",
                        _size(c, s.direction), "yes" if c.persisted else "no", f"{c.p:.3f}", _noise(a)))
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


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def svg_chart(a: Analysis, width: int = 640, height: int = 190) -> str:
    """The series as an inline SVG: each level's noise band (mean ± one standard deviation) and
    mean, the runs, and a dashed red line before each change point's first run."""
    s, values = a.series, a.series.values
    left, right, top, bottom = 70, 10, 10, 28
    low = min([*values, *(lv.mean - lv.std for lv in a.levels)])
    high = max([*values, *(lv.mean + lv.std for lv in a.levels)])
    span = (high - low) or abs(high) or 1.0
    low, high = low - 0.05 * span, high + 0.05 * span
    step = (width - left - right) / max(1, len(values) - 1)

    def x(i: float) -> float:
        return left + i * step

    def y(v: float) -> float:
        return top + (high - v) / (high - low) * (height - top - bottom)

    out = [f'<svg class="history" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{_e(s.name())}">']
    for lv in a.levels:
        x0, x1 = x(max(lv.start - 0.5, 0)), x(min(lv.end - 0.5, len(values) - 1))
        out.append(f'<rect x="{x0:.1f}" y="{y(lv.mean + lv.std):.1f}" width="{max(x1 - x0, 1):.1f}" '
                   f'height="{max(y(lv.mean - lv.std) - y(lv.mean + lv.std), 1):.1f}" fill="#dde6f0"/>'
                   f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y(lv.mean):.1f}" y2="{y(lv.mean):.1f}" '
                   'stroke="#7f9fbf" stroke-width="1"/>')
    for c in a.changes:
        cx = x(c.index - 0.5)
        out.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{top}" y2="{height - bottom}" stroke="#d62728" '
                   f'stroke-dasharray="4 3"/><text x="{cx + 3:.1f}" y="{top + 10}" font-size="10" fill="#d62728">'
                   f'run {c.index + 1}: {_e(_size(c, s.direction))}</text>')
    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    out.append(f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{points}"/>')
    out += [f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="2.2" fill="#1f77b4"><title>run {i + 1}, '
            f'{_e(_date(s.points[i].when))}: {_e(show(v, s.unit))}</title></circle>' for i, v in enumerate(values)]
    out.append(f'<text x="{left - 4}" y="{y(high) + 10:.1f}" font-size="10" text-anchor="end">'
               f'{_e(show(high, s.unit, 3))}</text><text x="{left - 4}" y="{y(low):.1f}" font-size="10" '
               f'text-anchor="end">{_e(show(low, s.unit, 3))}</text>'
               f'<text x="{left}" y="{height - 8}" font-size="10">run 1, {_e(_date(s.points[0].when))}</text>'
               f'<text x="{width - right}" y="{height - 8}" font-size="10" text-anchor="end">run {len(values)}, '
               f'{_e(_date(s.points[-1].when))}</text></svg>')
    return "".join(out)


def html_section(analyses: Sequence[Analysis], max_pvalue: float = MAX_PVALUE) -> str:
    """The HTML page's section: the table, then a chart per changed figure."""
    changed = [a for a in analyses if a.changes]
    out = ['<section id="changes"><h2>Change points</h2>', f"<p>{_e(summary_line(analyses))} "
           f"{_e(method_line(max_pvalue))}</p>", "<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in HEADER) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>" for row in rows(changed)]
    out.append("</table>")
    for a in changed:
        out.append(f"<figure>{svg_chart(a)}<figcaption><b>{_e(a.series.name(True))}</b>: "
                   f"{len(a.series.points)} runs; band: each level's mean ± one standard deviation of its runs."
                   "</figcaption></figure>")
    unchanged = [a for a in analyses if not a.changes]
    if unchanged:
        out.append(f"<details><summary>{len(unchanged)} figures without a change</summary><table><tr>"
                   + "".join(f"<th>{_e(h)}</th>" for h in HEADER) + "</tr>"
                   + "".join("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>"
                             for row in rows(unchanged)) + "</table></details>")
    out.append("</section>")
    return "".join(out)
