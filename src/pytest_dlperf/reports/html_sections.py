"""The HTML page's sections: verdict, regressions and failures, summary, tests, charts, history."""

from __future__ import annotations

import base64
from collections import Counter, defaultdict
from typing import Sequence

from pytest_dlperf.reports.combine import all_skipped, skipped_note
from pytest_dlperf.reports.digest import Digest, better_change, digest, unit_scales
from pytest_dlperf.reports.html_cells import Columns, Scales, change, figure, metric_row, wrapped_name
from pytest_dlperf.reports.records import MetricRecord, TestRecord
from pytest_dlperf.reports.runs import Run
from pytest_dlperf.text import escape as _e
from pytest_dlperf.text import short_test
from pytest_dlperf.units import count

#: At most this many runs in the history table (the newest ones).
HISTORY_RUNS = 12
_OUTCOME_ORDER = {"failed": 0, "error": 0, "passed": 1, "skipped": 2}  # the order tests are listed in
_VERDICT_ORDER = {"regression": 0, "inconclusive": 1, "improvement": 2, "missing": 3, "updated": 4, "ok": 5}


def verdict_section(d: Digest) -> str:
    cls = {"FAILED": "fail", "PASSED": "pass"}.get(d.headline, "unjudged")
    return f'<p id="verdict" class="verdict {cls}">{_e(d.verdict_line())}</p>'


def summary_section(run: Run, tests: list[TestRecord], d: Digest | None = None) -> str:
    skipped = "".join(f'<p class="skipped">{_e(skipped_note(source, reasons))}</p>'
                      for source, reasons in all_skipped(run.tests).items())
    outcomes = Counter(t.outcome for t in tests)
    metrics = d.figures if d is not None else [m for t in tests for m in t.metrics]
    verdicts = Counter(m.verdict or "recorded" for m in metrics)
    hardware = sorted({t.hardware for t in tests if t.hardware})
    software = sorted({s for t in tests for s in t.software.values()})
    parts = [f'<span class="badge">{outcomes[k]} {k}</span>' for k in ("passed", "failed", "error", "skipped")
             if outcomes[k] or k == "passed"]
    vparts = [f'<span class="badge v-{k}">{verdicts[k]} {k}</span>'
              for k in ("regression", "improvement", "inconclusive", "missing", "updated", "ok", "recorded")
              if verdicts[k]]
    return (f'<section id="summary"><h2>Summary</h2>'
            f'<p>Run <b>{_e(run.name)}</b>, started {_e(run.started_at)}; reports: '
            + ", ".join(f"<code>{_e(p.name)}</code>" for p in run.paths) + "</p>"
            f'<p><b>{len(tests)} tests</b> (each counted once, whichever framework environments ran it): '
            + " ".join(parts) + "</p>"
            f'<p><b>{len(metrics)} figures</b> (each counted once): ' + " ".join(vparts) + "</p>" + skipped
            + ("<p>Hardware: " + ", ".join(f"<code>{_e(h)}</code>" for h in hardware) + "</p>" if hardware else "")
            + ("<details><summary>Software</summary><ul>" + "".join(f"<li><code>{_e(s)}</code></li>"
                                                                   for s in software) + "</ul></details>"
               if software else "")
            + "</section>")


def figure_table(ms: Sequence[MetricRecord], d: Digest, scales: Scales) -> str:
    columns = Columns.needed(ms, d.figures)
    shared = ("" if columns.hardware or not ms[0].hardware else
              f'<p class="shared">All on <code>{_e(ms[0].hardware)}</code>.</p>')
    return (shared + "<table>" + columns.head('<th class="test">test</th>')
            + "".join(metric_row(m, with_test=True, scales=scales, figures=d.figures, columns=columns) for m in ms)
            + "</table>")


def failure_table(ts: Sequence[TestRecord], head: str) -> str:
    return (f'<table><tr><th class="test">{_e(head)}</th><th>hardware</th><th>outcome</th>'
            "<th>first line of the message</th></tr>"
            + "".join(f'<tr><td class="test"><code>{wrapped_name(short_test(t.test))}</code></td>'
                      f'<td class="hw"><code>{_e(t.hardware or "–")}</code></td>'
                      f'<td class="v-regression">{_e(t.outcome)}</td><td>{_e(t.message or "(no message)")}</td></tr>'
                      for t in ts) + "</table>")


def correctness_section(d: Digest) -> str:
    """Failed tests about accuracy, NaN / non-finite values or parameter equivalence, above performance."""
    ts = d.failures["correctness"]
    if not ts:
        return ""
    return ('<section id="correctness"><h2>Correctness failures</h2><p>Failed tests whose message is about '
            "accuracy, the loss, NaN / non-finite values, weights or parameter equivalence: the model no longer "
            "computes the same thing, whatever its speed.</p>" + failure_table(ts, "failed test") + "</section>")


def attention_section(tests: list[TestRecord], d: Digest | None = None, scales: Scales | None = None) -> str:
    """Distinct regressions and the other failed tests first; inconclusive figures next; improvements
    and missing baselines folded away."""
    d = d if d is not None else digest(tests)
    scales = scales if scales is not None else unit_scales(d.figures)
    failing = d.failures["performance"] + d.failures["other"]
    regressions = sorted(d.by_verdict("regression"), key=lambda m: (better_change(m) or 0))
    out = ['<section id="attention"><h2>Regressions and failures</h2>']
    if not failing and not regressions and not d.failures["correctness"]:
        out.append('<p class="good">No regression and no failed test.</p>' if d.judged else
                   '<p class="unjudged">No failed test, and no figure compared with a baseline: nothing here '
                   'could have caught a slowdown.</p>')
    if regressions:
        out.append(f"<h3>{_e(count(len(regressions), 'regression'))} beyond the figures' noise, worst first</h3>"
                   + figure_table(regressions, d, scales))
    if failing:
        out.append("<h3>Failed tests</h3>" + failure_table(failing, "failed test"))
    inconclusive = d.by_verdict("inconclusive")
    if inconclusive:
        out.append(f'<h3 id="inconclusive">{_e(count(len(inconclusive), "inconclusive figure"))}</h3><p>Within the '
                   "figure's gate, but the evidence does not bound the change within the tolerance (its interval "
                   "reaches past it, or its noise is unknown): more recorded runs "
                   "(<code>pytest --update-baselines</code>), a quieter machine or a paired run decides them. "
                   "They fail nothing.</p>"
                   + figure_table(sorted(inconclusive, key=lambda m: (better_change(m) or 0)), d, scales))
    other = sorted((m for m in d.figures if m.verdict in ("improvement", "missing")),
                   key=lambda m: (_VERDICT_ORDER[m.verdict or "ok"], -abs(m.delta or 0)))
    if other:
        kinds = Counter(m.verdict for m in other if m.verdict is not None)  # all are: improvement or missing
        counted = ", ".join(count(n, k, k + "s" if k != "missing" else k) for k, n in kinds.items())
        out.append(f"<details><summary>{_e(counted)}"
                   " (improvements and figures without a baseline)</summary>" + figure_table(other, d, scales)
                   + "</details>")
    out.append("</section>")
    return "".join(out)


def tests_section(tests: list[TestRecord], d: Digest | None = None, scales: Scales | None = None) -> str:
    by_file: dict[str, list[TestRecord]] = defaultdict(list)
    for t in tests:
        by_file[t.test.split("::", 1)[0]].append(t)
    out = ['<section id="tests"><h2>Tests</h2>']
    for path, ts in by_file.items():
        ts = sorted(ts, key=lambda t: (_OUTCOME_ORDER.get(t.outcome, 1), t.test))
        out.append(f"<h3><code>{_e(path)}</code></h3>")
        for t in ts:
            cls = {"failed": "v-regression", "error": "v-regression", "skipped": "skipped"}.get(t.outcome, "")
            out.append(f'<div class="test"><p><code>{wrapped_name(t.test.split("::", 1)[-1])}</code> '
                       f'<span class="{cls}">{_e(t.outcome)}</span>'
                       + (f" <small>{_e(t.message)}</small>" if t.message and t.outcome != "passed" else "")
                       + (f" <small>on {_e(t.hardware)}</small>" if t.hardware else "") + "</p>")
            if t.metrics:
                out.append("<table>" + Columns().head("") + "".join(
                    metric_row(m, hardware=t.hardware, scales=scales, figures=d.figures if d else t.metrics)
                    for m in t.metrics) + "</table>")
                described = [(label, t.scenarios[label]) for label in t.labels if label in t.scenarios]
                if described:
                    out.append("<details><summary>scenarios</summary><ul>" + "".join(
                        f"<li><b>{_e(label)}</b>: {_e(text)}</li>" for label, text in described) + "</ul></details>")
            out.append("</div>")
    out.append("</section>")
    return "".join(out)


def charts_section(tests: list[TestRecord]) -> str:
    try:
        from pytest_dlperf.reports import plots  # imports matplotlib, an optional dependency
    except ImportError as exc:
        return (f'<section id="charts"><h2>Charts</h2><p>No charts: matplotlib is not installed ({_e(exc)}); '
                "pip install matplotlib.</p></section>")
    out = ['<section id="charts"><h2>Charts</h2>']
    drawn = plots.charts(tests)
    if not drawn:
        out.append("<p>No figure with a baseline, no speedup and no scaling test: nothing to chart.</p>")
    for chart in drawn:
        data = base64.b64encode(chart.png()).decode("ascii")
        out.append(f'<figure><img alt="{_e(chart.title)}" src="data:image/png;base64,{data}">'
                   f"<figcaption><b>{_e(chart.title)}</b>. {_e(chart.caption)}</figcaption></figure>")
    out.append("</section>")
    return "".join(out)


def sparkline(values: Sequence[float | None], width: int = 120, height: int = 28) -> str:
    """An inline SVG polyline of ``values`` (None: that run lacks the figure), the last point marked."""
    known = [(i, v) for i, v in enumerate(values) if v is not None]
    if len(known) < 2:
        return ""
    low, high = min(v for _, v in known), max(v for _, v in known)
    span = (high - low) or abs(high) or 1.0
    step = (width - 8) / max(1, len(values) - 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        if high == low:  # a flat line through the middle
            return 4 + i * step, height / 2
        return 4 + i * step, height - 4 - (v - low) / span * (height - 8)

    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, v) for i, v in known))
    lx, ly = xy(*known[-1])
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="history"><polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{points}"/>'
            f'<circle cx="{lx:.1f}" cy="{ly:.1f}" r="2.5" fill="#d62728"/></svg>')


def history_section(runs: list[Run]) -> str:
    shown = runs[-HISTORY_RUNS:]
    out = ['<section id="history"><h2>History</h2>']
    if len(shown) < 2:
        out.append("<p>One run only. Give the reports of earlier runs too, each run's reports in a folder of "
                   "their own (as CI artifacts download), for every figure's history: "
                   "<code>dlperf html runs/*/ --out report</code>.</p></section>")
        return "".join(out)
    per_run = [{m.identity: m for t in r.tests for m in t.metrics} for r in shown]
    keys = sorted(per_run[-1])  # the newest run's figures; one it no longer has is history of a gone test
    gone = len({k for ms in per_run[:-1] for k in ms} - set(keys))
    several_machines = len({k[0] for k in keys}) > 1
    out.append(f"<p>The newest run's {len(keys)} figures over the last {len(shown)} runs (oldest left); the red "
               "dot is the newest; the change is the newest against the run before it."
               + (f" {gone} figures of earlier runs that the newest run does not have are left out." if gone else "")
               + "</p><table><tr><th>test</th>"
               "<th>scenario</th><th>metric</th>"
               + "".join(f'<th title="{_e(r.started_at)}">{_e(r.name)}</th>' for r in shown)
               + "<th>change</th><th>trend</th></tr>")
    for key in keys:
        ms = [ms.get(key) for ms in per_run]
        unit = next(m.unit for m in ms if m is not None)
        values = [m.value if m is not None else None for m in ms]
        last_two = [v for v in values if v is not None][-2:]
        newest = (last_two[1] - last_two[0]) / abs(last_two[0]) if len(last_two) == 2 and last_two[0] else None
        hardware, test, label, metric = key
        where = f" <small>on {_e(hardware)}</small>" if several_machines and hardware else ""
        out.append(f'<tr><td class="test"><code>{wrapped_name(short_test(test))}</code></td>'
                   f"<td>{_e(label)}{where}</td><td>{_e(metric)}</td>"
                   + "".join(f'<td class="num">{_e(figure(v, unit))}</td>' for v in values)
                   + f'<td class="num">{_e(change(newest))}</td><td>{sparkline(values)}</td></tr>')
    out.append("</table></section>")
    return "".join(out)
