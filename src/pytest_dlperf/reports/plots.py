"""Charts of a report's figures (``dlperf html``). Needs matplotlib; only this module imports it.

- ``deltas-<file>.png``, one per test file (and framework, where a file ran several): every figure
  judged against a baseline, as its change from the baseline in percent (whiskers: half the
  interquartile range of the rounds, or a paired ratio's 95% interval), inside the tolerance band
  the verdict used, coloured by verdict. Figures of different sizes (12,000 samples/s of a loader,
  2 samples/s of a ResNet-50) share one axis this way.
- ``speedups-<file>.png``: every paired ``speedup`` with its 95% interval, the baseline, the 1x
  line and the floor the test claims (``dlperf.<label>.speedup.floor``) where it records one.
- ``scaling-<file>.png``: the suite's own scaling tests: throughput per worker against the worker
  count (``dlperf.<label>.workers``; else read from the label, ``workers4``, ``4 gpus``, ``two_workers``)
  with the ideal, and the weak-scaling efficiency.

A chart holds at most ``MAX_ROWS`` rows (a longer file gets parts), and its height grows with its
rows, so every label stays readable at the PNG's own size.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from pytest_dlperf.reports.digest import better_change, framework_of, gate_of, marks_of
from pytest_dlperf.reports.records import MetricRecord, TestRecord
from pytest_dlperf.result import LOWER
from pytest_dlperf.text import short_test
from pytest_dlperf.units import show

VERDICT_COLOUR = {"regression": "#d62728", "improvement": "#2ca02c", "ok": "#1f77b4", "missing": "#7f7f7f",
                  "updated": "#9467bd"}
RECORDED_COLOUR = "#17becf"
BAND_COLOUR = "#e8e8e8"
BASELINE_COLOUR = "#555555"
FLOOR_COLOUR = "#ff7f0e"
DPI = 100
FONT = 10
MAX_ROWS = 24
ROW_INCHES = 0.5
#: A change beyond this is drawn clipped at the edge, with its figure written beside it.
MAX_DELTA_AXIS = 1.5
_NUMBER_WORDS = {"one": 1, "single": 1, "two": 2, "three": 3, "four": 4, "eight": 8}
_WORKERS = (
    re.compile(r"(?:workers?|gpus?|ranks?|procs?|nodes?|np)[-_ =]?(\d+)", re.I),
    re.compile(r"(?<![\w.])(\d+)[-_ ]?(?:workers?|gpus?|ranks?|procs?|nodes?|w)\b", re.I),
    re.compile(r"\b(one|single|two|three|four|eight)[-_ ]?(?:workers?|gpus?|ranks?|procs?|nodes?)", re.I),
)


@dataclass
class Chart:
    """One figure: its file name, a one-line title and what it shows (the HTML page's caption)."""

    name: str
    title: str
    caption: str
    figure: Figure

    def png(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png")
        return buffer.getvalue()



def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "report"


def test_file(test: str) -> str:
    """``perf_tests/test_x.py::test_y[p]`` -> ``test_x``."""
    return Path(test.split("::", 1)[0]).stem or "tests"


def wrap_name(text: str, width: int = 56) -> str:
    """``text`` whole, broken into lines of at most ``width`` characters after ``::``, ``_``, ``-`` or ``,``
    or before ``[`` (a single piece longer than ``width`` stays whole on its line): never cut or elided."""
    pieces = [p for p in re.split(r"(?<=::)|(?<=[_,-])|(?=\[)", text) if p]
    lines = [""]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(lines)


def _short_test(test: str, width: int = 56) -> str:
    """The test's name with its file's, whole, wrapped to ``width``."""
    return wrap_name(short_test(test), width)


def _marks(m: MetricRecord) -> str:
    """n=1 and "cannot detect", as the tables mark them."""
    marks = marks_of(m)
    return f"  [{', '.join(marks)}]" if marks else ""


def _row_label(m: MetricRecord) -> str:
    worse = " (lower is better)" if m.direction == LOWER else ""
    return f"{m.label} · {m.metric}{worse}\n{_short_test(m.test)}"


def _row_inches(labels: Sequence[str]) -> float:
    """Height per row: enough for the tallest label's lines at the tick font (a wrapped name grows it)."""
    lines = max((label.count("\n") + 1 for label in labels), default=1)
    return max(ROW_INCHES, 0.19 * lines)


def workers_of(test: TestRecord, label: str) -> int | None:
    """A scenario's worker count: the recorded ``workers`` property, else its label or description."""
    if label in test.workers:
        return test.workers[label]
    for text in (label, test.scenarios.get(label, "")):
        for pattern in _WORKERS:
            match = pattern.search(text)
            if match:
                word = match.group(1).lower()
                return _NUMBER_WORDS[word] if word in _NUMBER_WORDS else int(word)
    return None


def _by_file(tests: Sequence[TestRecord], keep: Callable[[MetricRecord], bool]) -> dict[str, list[MetricRecord]]:
    """The kept metrics per test file, and per framework where a file ran several (test_cpu_tuning)."""
    rows = [(test_file(t.test), framework_of(t, m.label), m) for t in tests for m in t.metrics if keep(m)]
    frameworks: dict[str, set[str]] = defaultdict(set)
    for group, fw, _ in rows:
        frameworks[group].add(fw)
    groups: dict[str, list[MetricRecord]] = defaultdict(list)
    for group, fw, m in rows:
        groups[f"{group} ({fw})" if fw and len(frameworks[group]) > 1 else group].append(m)
    return dict(groups)


def _parts(metrics: list[MetricRecord]) -> list[list[MetricRecord]]:
    return [metrics[i:i + MAX_ROWS] for i in range(0, len(metrics), MAX_ROWS)] or [[]]


def _part_name(base: str, index: int, count: int) -> tuple[str, str]:
    return (f"{base}.png", "") if count == 1 else (f"{base}-{index + 1}.png", f" (part {index + 1} of {count})")


def _hardware(metrics: list[MetricRecord]) -> str:
    keys = sorted({m.hardware for m in metrics if m.hardware})
    return f" on {', '.join(keys)}" if keys else ""


def _figure(rows: int, row_inches: float = ROW_INCHES) -> Figure:
    return Figure(figsize=(12, 1.9 + row_inches * rows), dpi=DPI)


def _title_and_legend(fig: Figure, title: str, handles: list) -> None:
    """Title at the top left, legend in a row at the bottom, the axes in between."""
    height = fig.get_figheight()
    fig.suptitle(title, fontsize=FONT + 2, x=0.01, ha="left")
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=FONT - 1, frameon=False)
    fig.tight_layout(rect=(0, 0.45 / height, 1, 1))


def _relative_spread(m: MetricRecord) -> tuple[float, float]:
    """Whisker on the worse and the better side of the change, relative to the baseline."""
    assert m.baseline
    if m.interval is not None:
        low, high = (m.value - m.interval[0]) / abs(m.baseline), (m.interval[1] - m.value) / abs(m.baseline)
    else:
        low = high = (m.iqr or 0.0) / 2 / abs(m.baseline)
    return (high, low) if m.direction == LOWER else (low, high)


def delta_chart(metrics: list[MetricRecord], name: str, title: str) -> Chart:
    """Each figure's change from its baseline, in percent, signed so that right is better for every
    figure (a lower-is-better figure's change is flipped), in its gate's band, coloured by verdict."""
    rows = len(metrics)
    labels = [_row_label(m) for m in metrics]
    fig = _figure(rows, _row_inches(labels))
    ax = fig.add_subplot()
    # The axis fits the changes and the bands (a whisker far wider than both does not widen it).
    limit = 0.1
    for m in metrics:
        better = better_change(m) or 0.0
        low, high = _relative_spread(m)
        reach = max(abs(better), gate_of(m) or 0.0)
        limit = max(limit, min(MAX_DELTA_AXIS, abs(better) + min(max(low, high), reach)), gate_of(m) or 0.0)
    edge = 1.15 * limit
    for i, m in enumerate(metrics):
        y = rows - 1 - i
        delta = m.delta or 0.0
        better = better_change(m) or 0.0
        low, high = _relative_spread(m)
        tol = gate_of(m)
        if tol is not None:
            ax.fill_betweenx([y - 0.42, y + 0.42], -100 * tol, 100 * tol, color=BAND_COLOUR, zorder=0)
        colour = VERDICT_COLOUR.get(m.verdict or "", RECORDED_COLOUR)
        shown = max(-edge, min(edge, better))
        ax.barh(y, 100 * shown, 0.55, color=colour, zorder=2)
        if low or high:
            # Whiskers end at the axis; one that ran past it ends in an arrowhead there.
            left, right = max(-edge, shown - low), min(edge, shown + high)
            ax.errorbar(100 * shown, y, xerr=[[100 * (shown - left)], [100 * (right - shown)]], fmt="none",
                        ecolor="#222222", capsize=4, zorder=3)
            for end, cut, marker in ((left, shown - low < -edge, "<"), (right, shown + high > edge, ">")):
                if cut:
                    ax.plot(100 * end, y, marker=marker, color="#222222", markersize=7, zorder=4, clip_on=False)
        baseline = show(m.baseline, m.unit) if m.baseline is not None else "-"
        note = (f"{show(m.value, m.unit)} vs {baseline}" + f"  {delta:+.1%}"
                + (f"  ±{tol:.0%}" if tol is not None else "") + f"  {m.verdict or 'recorded'}" + _marks(m))
        ax.text(1.01, y, note, transform=ax.get_yaxis_transform(), va="center", fontsize=FONT - 1)
    ax.axvline(0, color=BASELINE_COLOUR, linewidth=1)
    ax.set_xlim(-100 * edge, 100 * edge)
    ax.set_ylim(-0.7, rows - 0.3)
    ax.set_yticks(range(rows - 1, -1, -1), labels, fontsize=FONT - 1)
    ax.set_xlabel("change from the baseline (%), right = better: lower-is-better figures (time, memory) are flipped\n"
                  "whiskers: ±IQR/2 of the rounds or a paired ratio's 95% interval, cut at the axis (▸)",
                  fontsize=FONT)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=c, label=v) for v, c in VERDICT_COLOUR.items() if any(m.verdict == v for m in metrics)]
    handles.append(Patch(color=BAND_COLOUR,
                         label="gate: the change caught 19 times in 20 (± its tolerance where no gate is recorded)"))
    _title_and_legend(fig, title, handles)
    caption = ("Each judged figure's change from this machine's baseline (0 = the baseline), right = better "
               "for every bar (the change of a lower-is-better figure, time or memory, is flipped), inside the "
               "band of its gate (its tolerance where the report records no gate). A bar outside the band is past "
               "the figure's bound (a regression or an improvement); a bar inside it may be one too, as the "
               "bound is narrower than the band. A bar or whisker past "
               "the axis is cut at its edge; the text on the right gives the figures and their raw change.")
    return Chart(name, title, caption, fig)


def speedup_chart(metrics: list[MetricRecord], name: str, title: str) -> Chart:
    """Paired speedups: estimate with 95% interval, the baseline, 1x and the test's claimed floor."""
    rows = len(metrics)
    labels = [_row_label(m) for m in metrics]
    fig = _figure(rows, _row_inches(labels))
    ax = fig.add_subplot()
    right = 1.2
    for i, m in enumerate(metrics):
        y = rows - 1 - i
        colour = VERDICT_COLOUR.get(m.verdict or "", RECORDED_COLOUR)
        low, high = m.interval if m.interval else (m.value, m.value)
        ax.errorbar(m.value, y, xerr=[[m.value - low], [high - m.value]], fmt="o", color=colour, ecolor=colour,
                    capsize=5, markersize=8, linewidth=2, zorder=3)
        if m.baseline is not None:
            ax.plot(m.baseline, y, marker="D", color=BASELINE_COLOUR, markersize=7, fillstyle="none", zorder=2)
        if m.floor is not None:
            ax.plot([m.floor, m.floor], [y - 0.35, y + 0.35], color=FLOOR_COLOUR, linewidth=3, zorder=2)
        right = max(right, high, m.baseline or 0, m.floor or 0)
        note = (f"{m.value:.3g}x" + (f" [{low:.3g}, {high:.3g}]" if m.interval else "")
                + (f"  baseline {m.baseline:.3g}x" if m.baseline is not None else "")
                + (f"  claim ≥ {m.floor:.3g}x" if m.floor is not None else "") + f"  {m.verdict or 'recorded'}")
        ax.text(1.01, y, note, transform=ax.get_yaxis_transform(), va="center", fontsize=FONT - 1)
    ax.axvline(1.0, color="#333333", linestyle=":", linewidth=1.2)
    ax.set_xlim(0, right * 1.1)
    ax.set_ylim(-0.7, rows - 0.3)
    ax.set_yticks(range(rows - 1, -1, -1), labels, fontsize=FONT - 1)
    ax.set_xlabel("speedup (x, paired rounds), right = better; dotted: 1x, no change", fontsize=FONT)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], marker="o", color="#1f77b4", label="speedup, 95% interval (colour: verdict)"),
               Line2D([], [], marker="D", color=BASELINE_COLOUR, fillstyle="none", linestyle="", label="baseline")]
    if any(m.floor is not None for m in metrics):
        handles.append(Line2D([], [], color=FLOOR_COLOUR, linewidth=3, label="claimed floor"))
    _title_and_legend(fig, title, handles)
    caption = ("Paired speedups (the variants took timed rounds in turn) with their 95% interval, against the "
               "baseline and, where the test claims one, its floor (the orange bar): an interval left of the "
               "floor misses the claim.")
    return Chart(name, title, caption, fig)


def _scaling_points(test: TestRecord) -> list[tuple[int, MetricRecord]]:
    by_workers: dict[int, MetricRecord] = {}
    for m in test.metrics:
        if m.metric == "throughput":
            w = workers_of(test, m.label)
            if w is not None:
                by_workers.setdefault(w, m)
    return sorted(by_workers.items())


def scaling_chart(tests: list[TestRecord], name: str, title: str) -> Chart:
    """Per scaling test: throughput against workers with the ideal, and the weak-scaling efficiency."""
    fig = Figure(figsize=(12, 4.8), dpi=DPI)
    left, right = fig.subplots(1, 2)
    workers_seen: set[int] = set()
    top = 110.0
    for i, t in enumerate(tests):
        points = _scaling_points(t)
        workers = [w for w, _ in points]
        workers_seen.update(workers)
        values = [m.value for _, m in points]
        unit = points[0][1].unit or "?"
        per_worker = unit.endswith("/worker")
        w0, v0 = workers[0], values[0]
        ideal = [v0 if per_worker else v0 * w / w0 for w in workers]
        efficiency = [100 * v / ideal_v for v, ideal_v in zip(values, ideal)]
        colour = f"C{i % 10}"
        name_ = _short_test(t.test, 48)  # whole, wrapped
        left.errorbar(workers, values, yerr=[(m.iqr or 0) / 2 for _, m in points], marker="o", capsize=4,
                      color=colour, label=name_)
        left.plot(workers, ideal, linestyle="--", color=colour, alpha=0.5)
        baselines = [(w, m.baseline) for w, m in points if m.baseline is not None]
        if baselines:
            left.plot(*zip(*baselines), marker="D", linestyle="", color=BASELINE_COLOUR, fillstyle="none")
        right.plot(workers, efficiency, marker="o", color=colour, label=name_)
        for w, e in zip(workers, efficiency):
            right.annotate(f"{e:.0f}%", (w, e), textcoords="offset points", xytext=(0, 7), ha="center",
                           fontsize=FONT - 1)
        top = max(top, max(efficiency) * 1.15)
    unit = _scaling_points(tests[0])[0][1].unit or "?"  # samples/s/worker
    left.set_xlabel("workers", fontsize=FONT)
    left.set_ylabel(f"throughput ({unit}), median ± IQR/2", fontsize=FONT)
    left.set_title("measured (dashed: ideal; ◇ baseline)", fontsize=FONT)
    left.legend(fontsize=FONT - 1)
    right.axhline(100, color="#7f7f7f", linestyle="--", linewidth=1)
    right.set_xlabel("workers", fontsize=FONT)
    right.set_ylabel("weak-scaling efficiency (%)", fontsize=FONT)
    right.set_ylim(0, top)
    right.set_title("throughput per worker / one worker's", fontsize=FONT)
    for ax in (left, right):
        ax.set_xticks(sorted(workers_seen))
        ax.tick_params(labelsize=FONT)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=FONT + 2, x=0.01, ha="left")
    fig.tight_layout()
    caption = ("The suite's own data-parallel tests: throughput against the worker count (dashed: perfect "
               "scaling from the fewest workers) and the efficiency that leaves.")
    return Chart(name, title, caption, fig)


def charts(tests: Sequence[TestRecord]) -> list[Chart]:
    """Every chart the records have figures for, per test file."""
    out: list[Chart] = []
    for group, ms in _by_file(tests, lambda m: m.baseline is not None and m.delta is not None).items():
        parts = _parts(ms)
        for i, part in enumerate(parts):
            name, part_note = _part_name(f"deltas-{_safe(group)}", i, len(parts))
            out.append(delta_chart(part, name, f"{group}: change from the baseline{_hardware(part)}{part_note}"))
    for group, ms in _by_file(tests, lambda m: m.metric == "speedup").items():
        parts = _parts(ms)
        for i, part in enumerate(parts):
            name, part_note = _part_name(f"speedups-{_safe(group)}", i, len(parts))
            out.append(speedup_chart(part, name, f"{group}: speedups{_hardware(part)}{part_note}"))
    scaling: dict[str, list[TestRecord]] = defaultdict(list)
    for t in tests:
        if len(_scaling_points(t)) >= 2:
            scaling[test_file(t.test)].append(t)
    for group, ts in scaling.items():
        hw = sorted({t.hardware for t in ts if t.hardware})
        out.append(scaling_chart(ts, f"scaling-{_safe(group)}.png",
                                 f"{group}: scaling" + (f" on {', '.join(hw)}" if hw else "")))
    return out

