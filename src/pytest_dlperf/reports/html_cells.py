"""The HTML page's cells: a figure's value, change, gate and verdict, and a test's name, all escaped."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from pytest_dlperf.reports.digest import cannot_detect, gate_of, marks_of, paired_evidence, paired_text
from pytest_dlperf.reports.records import MetricRecord
from pytest_dlperf.result import LOWER
from pytest_dlperf.text import escape as _e
from pytest_dlperf.text import number, percent, short_test
from pytest_dlperf.units import show

Scales = dict[tuple[str, str], tuple[float, str]]


def figure(value: float | None, unit: str = "", scale: tuple[float, str] | None = None) -> str:
    """A value in units a person reads (``units.show``: MiB/GiB), or in the page's one unit
    for its metric (``scale``: divisor and name, :func:`digest.unit_scales`); ``–`` for none."""
    if value is None or scale is None:
        return "–" if value is None else show(value, unit)
    return number(value / scale[0], scale[1])


def wrapped_name(test: str) -> str:
    """A test name, escaped, whole, with line-break opportunities after ``::``, ``/``, ``[``, ``_``, ``-``
    and ``,``: a narrow column wraps it between words instead of cutting it."""
    return re.sub(r"(::|[/\[_,-])", r"\1<wbr>", _e(test))


def change(value: float | None) -> str:
    """A relative change; an en dash for none, as every empty cell of the page."""
    return percent(value, missing="–")


def observed(m: MetricRecord, scale: tuple[float, str] | None = None) -> str:
    text = figure(m.value, m.unit, scale)
    if m.interval:
        text += f" [{m.interval[0]:.3g}, {m.interval[1]:.3g}]"
    return text


def spread(m: MetricRecord, scale: tuple[float, str] | None = None) -> str:
    """The rounds' spread, named (``±`` on the page is the gate, not this)."""
    if m.interval or not m.iqr:
        return ""
    divisor = scale[0] if scale else 1.0
    return f"<br><small>IQR {m.iqr / divisor:.3g}</small>"


def gate_cell(m: MetricRecord) -> str:
    """The figure's gate as ``±x%`` (the change it catches 19 times in 20); the tolerance where the report
    records no gate, and marks for n=1."""
    if cannot_detect(m):  # its tolerance would read as a gate it does not have
        return '<span class="mark">cannot detect</span>' + "".join(
            f' <span class="mark">{_e(x)}</span>' for x in marks_of(m) if x != "cannot detect")
    gate = gate_of(m)
    text = f"±{gate:.0%}" if gate is not None else "–"
    return _e(text) + "".join(f' <span class="mark">{_e(x)}</span>' for x in marks_of(m))


def verdict_cell(m: MetricRecord) -> str:
    verdict = m.verdict or "recorded"
    return f'<td class="v-{_e(verdict)}">{_e(verdict)}</td>'


def metric_row(m: MetricRecord, with_test: bool = False, hardware: str = "", scales: Scales | None = None,
               figures: Sequence[MetricRecord] = (), columns: Columns | None = None) -> str:
    """One figure: its machine key in a column of its own; ``figures``: the page's, for the paired
    evidence beside a throughput (the test's speedups); ``columns``: which optional columns the table has."""
    columns = columns or Columns()
    scale = (scales or {}).get((m.metric, m.unit))
    cells = [f'<td class="test"><code>{wrapped_name(short_test(m.test))}</code></td>'] if with_test else []
    direction = " <small>(lower is better)</small>" if m.direction == LOWER else ""
    floor = f" <small>claim ≥ {m.floor:.3g}x</small>" if m.floor is not None else ""
    if columns.hardware:
        cells.append(f'<td class="hw"><code>{_e(m.hardware or hardware or "–")}</code></td>')
    cells += [f'<td class="label">{_e(m.label)}</td>', f"<td>{_e(m.metric)}{direction}</td>",
              f'<td class="num observed">{_e(observed(m, scale))}{spread(m, scale)}{floor}</td>',
              f'<td class="num">{_e(figure(m.baseline, m.unit, scale))}</td>',
              f'<td class="num">{_e(change(m.delta))}</td>', f'<td class="num gate">{gate_cell(m)}</td>',
              verdict_cell(m)]
    if columns.paired:
        paired = "<br>".join(_e(paired_text(p)) for p in paired_evidence(m, figures))
        cells.append(f'<td class="paired">{paired or "–"}</td>')
    return "<tr>" + "".join(cells) + "</tr>"


@dataclass(frozen=True)
class Columns:
    """A figure table's optional columns: left out where every row would show the same thing, so the
    table fits the page (the shared hardware key is said once above it)."""

    hardware: bool = True
    paired: bool = True

    @classmethod
    def needed(cls, ms: Sequence[MetricRecord], figures: Sequence[MetricRecord]) -> Columns:
        return cls(hardware=len({m.hardware for m in ms}) > 1,
                   paired=any(paired_evidence(m, figures) for m in ms))

    def head(self, test: str) -> str:
        return ("<tr>" + test + ("<th>hardware</th>" if self.hardware else "")
                + "<th>scenario</th><th>metric</th><th>observed</th><th>baseline</th><th>change</th><th>± gate</th>"
                + "<th>verdict</th>" + ("<th>paired evidence</th>" if self.paired else "") + "</tr>")


LEGEND = ("<b>±</b> is each figure's gate: the change for the worse its verdict catches 19 times in 20 in one "
          "new run (its tolerance, widened by its run-to-run noise over the recorded runs; half as often at "
          "a smaller change). <b>no change</b>: the evidence bounds the change within the tolerance. "
          "<b>cannot detect</b>: not even a halving or a doubling is caught 19 times in 20; <b>n=1</b>: one sample. "
          "<b>IQR</b>: the spread of the run's own rounds. <b>paired evidence</b>: the same test's paired "
          "speedups (variants timed in turn, 95% interval) beside an absolute throughput. Each figure "
          "(test, scenario, metric, hardware) is counted once, however many reports hold it.")
