"""The change points of ``dlperf history`` on the HTML page: the table, and a chart per changed figure."""

from __future__ import annotations

from typing import Sequence

from pytest_dlperf.reports.changepoints import MAX_PVALUE
from pytest_dlperf.reports.history import HEADER, Analysis, method_line, rows, show_date, show_size, summary_line
from pytest_dlperf.text import escape as _e
from pytest_dlperf.units import show


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
                   f'run {c.index + 1}: {_e(show_size(c, s.direction))}</text>')
    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    out.append(f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{points}"/>')
    out += [f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="2.2" fill="#1f77b4"><title>run {i + 1}, '
            f'{_e(show_date(s.points[i].when))}: {_e(show(v, s.unit))}</title></circle>' for i, v in enumerate(values)]
    out.append(f'<text x="{left - 4}" y="{y(high) + 10:.1f}" font-size="10" text-anchor="end">'
               f'{_e(show(high, s.unit, 3))}</text><text x="{left - 4}" y="{y(low):.1f}" font-size="10" '
               f'text-anchor="end">{_e(show(low, s.unit, 3))}</text>'
               f'<text x="{left}" y="{height - 8}" font-size="10">run 1, {_e(show_date(s.points[0].when))}</text>'
               f'<text x="{width - right}" y="{height - 8}" font-size="10" text-anchor="end">run {len(values)}, '
               f'{_e(show_date(s.points[-1].when))}</text></svg>')
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
