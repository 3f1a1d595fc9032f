"""PNG charts of a report's figures (``dlperf plot``). Needs matplotlib; only this module imports it.

- ``throughput[-<hardware>].png``: each scenario's throughput (median, whiskers = interquartile
  range) beside its baseline, coloured by verdict.
- ``speedup[-<hardware>].png``: every ``speedup`` figure against its baseline and the 1x line.
- ``scaling-<test>.png``: for a test whose scenarios differ in worker count, throughput against
  workers with the ideal linear line, and the scaling efficiency.

A scenario's worker count comes from the ``dlperf.<label>.workers`` property, else from its label
or description (``workers4``, ``4w``, ``4 workers``, ``8gpus``, ``2 ranks``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .junit import MetricRecord, TestRecord

VERDICT_COLOUR = {"regression": "#d62728", "improvement": "#2ca02c", "ok": "#1f77b4", "missing": "#7f7f7f",
                  "updated": "#9467bd"}
RECORDED_COLOUR = "#17becf"
BASELINE_COLOUR = "#c7c7c7"
_WORKERS = (
    re.compile(r"(?:workers?|gpus?|ranks?|procs?|nodes?|np)[-_ =]?(\d+)", re.I),
    re.compile(r"(?<![\w.])(\d+)[-_ ]?(?:workers?|gpus?|ranks?|procs?|nodes?|w)\b", re.I),
)
DPI = 110


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "report"


def _name(m: MetricRecord, with_source: bool) -> str:
    test = m.test.split("::", 1)[-1]
    if len(test) > 48:  # keep the start and the parameters: test_cpu_precisions_tra...hput[resnet18]
        test = test[:22] + "..." + test[-23:]
    return f"{m.label}\n{test}" + (f" ({Path(m.source).name})" if with_source else "")


def workers_of(test: TestRecord, label: str) -> int | None:
    if label in test.workers:
        return test.workers[label]
    for text in (label, test.scenarios.get(label, "")):
        for pattern in _WORKERS:
            match = pattern.search(text)
            if match:
                return int(match.group(1))
    return None


def _by_hardware(metrics: list[MetricRecord]) -> dict[str, list[MetricRecord]]:
    groups: dict[str, list[MetricRecord]] = defaultdict(list)
    for m in metrics:
        groups[m.hardware or "unknown"].append(m)
    return dict(groups)


def _suffix(hardware: str, many: bool) -> str:
    return f"-{_safe(hardware)}" if many else ""


def _bars_against_baseline(metrics: list[MetricRecord], title: str, xlabel: str, path: Path,
                           reference: float | None = None) -> Path:
    """Horizontal bars: observed (verdict colour, IQR whiskers) above its baseline (grey)."""
    rows = len(metrics)
    with_source = len({m.source for m in metrics}) > 1
    fig = Figure(figsize=(10, 1.4 + 0.7 * rows), dpi=DPI)
    ax = fig.add_subplot()
    height = 0.38
    for i, m in enumerate(metrics):
        y = rows - 1 - i
        colour = VERDICT_COLOUR.get(m.verdict or "", RECORDED_COLOUR)
        xerr = [[m.iqr / 2], [m.iqr / 2]] if m.iqr else None
        ax.barh(y + height / 2, m.value, height, color=colour, xerr=xerr, capsize=3, ecolor="#333333")
        if m.baseline is not None:
            ax.barh(y - height / 2, m.baseline, height, color=BASELINE_COLOUR, edgecolor="#999999")
        note = f"{m.value:.4g}" + (f" ({m.delta:+.1%})" if m.delta is not None else "")
        note += f" {m.verdict or 'recorded'}"
        ax.text(m.value + (m.iqr / 2 if m.iqr else 0), y + height / 2, "  " + note, va="center", fontsize=8)
    ax.set_yticks(range(rows - 1, -1, -1), [_name(m, with_source) for m in metrics], fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    if reference is not None:
        ax.axvline(reference, color="#333333", linestyle=":", linewidth=1)
    right = max(max(m.value + (m.iqr or 0), m.baseline or 0) for m in metrics)
    ax.set_xlim(0, right * 1.45)  # room for the notes
    handles = [Patch(color=c, label=v) for v, c in VERDICT_COLOUR.items() if any(m.verdict == v for m in metrics)]
    if any(not m.verdict for m in metrics):
        handles.append(Patch(color=RECORDED_COLOUR, label="recorded (not checked)"))
    if any(m.baseline is not None for m in metrics):
        handles.append(Patch(facecolor=BASELINE_COLOUR, edgecolor="#999999", label="baseline"))
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    return path


def throughput_charts(tests: Sequence[TestRecord], outdir: Path) -> list[Path]:
    metrics = [m for t in tests for m in t.metrics if m.metric == "throughput"]
    groups = _by_hardware(metrics)
    out = []
    for hw, ms in groups.items():
        unit = ms[0].unit if len({m.unit for m in ms}) == 1 else "mixed units"
        path = outdir / f"throughput{_suffix(hw, len(groups) > 1)}.png"
        out.append(_bars_against_baseline(ms, f"Throughput per scenario on {hw}", f"throughput ({unit})", path))
    return out


def speedup_charts(tests: Sequence[TestRecord], outdir: Path) -> list[Path]:
    metrics = [m for t in tests for m in t.metrics if "speedup" in m.metric]
    groups = _by_hardware(metrics)
    out = []
    for hw, ms in groups.items():
        path = outdir / f"speedup{_suffix(hw, len(groups) > 1)}.png"
        out.append(_bars_against_baseline(ms, f"Speedups on {hw} (dotted: 1x)", "speedup (x)", path, reference=1.0))
    return out


def scaling_charts(tests: Sequence[TestRecord], outdir: Path) -> list[Path]:
    out = []
    for t in tests:
        by_workers: dict[int, MetricRecord] = {}
        for m in t.metrics:
            w = workers_of(t, m.label) if m.metric == "throughput" else None
            if w is not None:
                by_workers.setdefault(w, m)
        if len(by_workers) < 2:
            continue
        points = sorted(by_workers.items())
        workers = [w for w, _ in points]
        values = [m.value for _, m in points]
        w0, v0 = workers[0], values[0]
        ideal = [v0 * w / w0 for w in workers]
        efficiency = [100 * v / i for v, i in zip(values, ideal)]
        fig = Figure(figsize=(10, 4), dpi=DPI)
        left, right = fig.subplots(1, 2)
        left.errorbar(workers, values, yerr=[m.iqr / 2 if m.iqr else 0 for _, m in points], marker="o",
                      capsize=3, label="measured")
        left.plot(workers, ideal, linestyle="--", color="#7f7f7f", label=f"linear from {w0}")
        baselines = [(w, m.baseline) for w, m in points if m.baseline is not None]
        if baselines:
            left.plot(*zip(*baselines), marker="s", linestyle=":", color="#ff7f0e", label="baseline")
        left.set_xlabel("workers")
        left.set_ylabel(f"throughput ({points[0][1].unit or '?'})")
        left.set_xticks(workers)
        left.legend(fontsize=8)
        left.grid(alpha=0.3)
        right.plot(workers, efficiency, marker="o", color="#2ca02c")
        right.axhline(100, color="#7f7f7f", linestyle="--", linewidth=1)
        for w, e in zip(workers, efficiency):
            right.annotate(f"{e:.0f}%", (w, e), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
        right.set_xlabel("workers")
        right.set_ylabel("scaling efficiency (%)")
        right.set_xticks(workers)
        right.set_ylim(0, max(110, max(efficiency) * 1.15))
        right.grid(alpha=0.3)
        fig.suptitle(f"Scaling: {t.test.split('::', 1)[-1]}" + (f" on {t.hardware}" if t.hardware else ""),
                     fontsize=10)
        fig.tight_layout()
        path = outdir / f"scaling-{_safe(t.test.split('::', 1)[-1])}.png"
        fig.savefig(path)
        out.append(path)
    return out


def draw_all(tests: Sequence[TestRecord], outdir: Path) -> list[Path]:
    """Every chart the report has figures for; the paths written."""
    return throughput_charts(tests, outdir) + speedup_charts(tests, outdir) + scaling_charts(tests, outdir)
