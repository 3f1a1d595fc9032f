"""``dlperf html``: one self-contained HTML page of a run's figures, with their history over earlier runs.

A *run* is the reports in one folder (the layout CI artifacts download to: ``runs/1234/torch.xml``,
``runs/1234/tensorflow.xml``); runs are ordered by the earliest ``timestamp`` of their test suites
(else the files' modification time). The newest run is the page's subject: its summary, regressions
and failures first, a table per test file and the charts of :mod:`pytest_dlperf.reports.plots` (inlined as
PNG data URIs, so the page needs no network and no other file); given several runs, every metric's
value in each of them, with a sparkline (inline SVG).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from pytest_dlperf.reports.junit import (MetricRecord, ReportError, TestRecord, all_skipped, load, own_records,
                                         records, skipped_note)
from pytest_dlperf.reports.digest import (SHIFT_MIN_FIGURES, SHIFT_SHARE, Digest, better_change, digest, key_of,
                                          cannot_detect, paired_evidence, paired_text, unit_scales)
from pytest_dlperf.result import LOWER
from pytest_dlperf.text import short_test
from pytest_dlperf.units import count, show

#: At most this many runs in the history table (the newest ones).
HISTORY_RUNS = 12
_OUTCOME_ORDER = {"failed": 0, "error": 0, "passed": 1, "skipped": 2}  # the order tests are listed in
_VERDICT_ORDER = {"regression": 0, "inconclusive": 1, "improvement": 2, "missing": 3, "updated": 4, "ok": 5}


@dataclass
class Run:
    """The reports of one run: its name (the folder), when it started, and its test records."""

    name: str
    started: str
    paths: list[Path]
    tests: list[TestRecord] = field(default_factory=list)


def _expand(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.xml"))
            if not found:
                raise ReportError(f"{p}: a folder without any .xml report in it")
            out += found
        else:
            out.append(p)
    return out


def _started(path: Path, xml: object) -> str:
    own = getattr(xml, "timestamp", None)  # a report whose root is one <testsuite>
    stamps = [own] if own else [s.timestamp for s in xml if getattr(s, "timestamp", None)]  # type: ignore[attr-defined]
    if stamps:
        return min(stamps)[:19]  # to the second: 2026-11-23T23:04:21
    return _dt.datetime.fromtimestamp(os.path.getmtime(path)).isoformat(timespec="seconds")


def read_runs(paths: Iterable[str | Path]) -> list[Run]:
    """The reports grouped into runs by folder, oldest run first."""
    by_folder: dict[Path, Run] = {}
    for path in _expand(paths):
        xml = load(path)
        folder = path.resolve().parent
        run = by_folder.setdefault(folder, Run(name=folder.name or str(folder), started="", paths=[]))
        run.paths.append(path)
        run.tests += records(xml, source=str(path))
        started = _started(path, xml)
        run.started = min(run.started, started) if run.started else started
    runs = sorted(by_folder.values(), key=lambda r: (r.started, r.name))
    tests = [t for r in runs for t in r.tests]
    if not any(t.metrics for t in tests) and not (tests and all(t.outcome == "skipped" for t in tests)):
        raise ReportError(f"{', '.join(str(p) for r in runs for p in r.paths)}: no dlperf.* properties in any "
                          "test case; are these reports of a pytest-dlperf run (pytest --junitxml=FILE)?")
    names = Counter(r.name for r in runs)
    for r in runs:  # two folders of one name (a/run1, b/run1): tell them apart
        if names[r.name] > 1:
            r.name = str(r.paths[0].parent)
    return runs


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
        held.metrics = list({key_of(m): m for m in held.metrics + t.metrics}.values())  # a figure once
        held.scenarios.update(t.scenarios)
        held.software.update(t.software)
        held.workers.update(t.workers)
        held.hardware = held.hardware or t.hardware
    return list(best.values())


# --- formatting ----------------------------------------------------------------------------------

def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


Scales = dict[tuple[str, str], tuple[float, str]]


def figure(value: float | None, unit: str = "", scale: tuple[float, str] | None = None) -> str:
    """A value in units a person reads (``units.show``: MiB/GiB, img/s), or in the page's one unit
    for its metric (``scale``: divisor and name, :func:`digest.unit_scales`); ``–`` for none."""
    if value is None:
        return "–"
    if scale is not None:
        return f"{value / scale[0]:.4g} {scale[1]}".rstrip()
    return show(value, unit)



def _name(test: str) -> str:
    """A test name, escaped, whole, with line-break opportunities after ``::``, ``/``, ``[``, ``_``, ``-``
    and ``,``: a narrow column wraps it between words instead of cutting it."""
    return re.sub(r"(::|[/\[_,-])", r"\1<wbr>", _e(test))


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1%}"


def _observed(m: MetricRecord, scale: tuple[float, str] | None = None) -> str:
    text = figure(m.value, m.unit, scale)
    if m.interval:
        text += f" [{m.interval[0]:.3g}, {m.interval[1]:.3g}]"
    return text


def _spread(m: MetricRecord, scale: tuple[float, str] | None = None) -> str:
    """The rounds' spread, named (``±`` on the page is the gate, not this)."""
    if m.interval or not m.iqr:
        return ""
    divisor = scale[0] if scale else 1.0
    return f" <small>IQR {m.iqr / divisor:.3g}</small>"


def _gate(m: MetricRecord) -> str:
    """The figure's gate as ``±x%``; the tolerance where the noise is unknown, and marks for n=1."""
    marks = []
    if m.n == 1:
        marks.append("n=1")
    if cannot_detect(m):
        marks.append("cannot detect")
    gate = m.detectable if m.detectable is not None else m.tolerance
    text = f"±{gate:.0%}" if gate is not None else "–"
    return _e(text) + "".join(f' <span class="mark">{_e(x)}</span>' for x in marks)


def _verdict_cell(m: MetricRecord) -> str:
    verdict = m.verdict or "recorded"
    return f'<td class="v-{_e(verdict)}">{_e(verdict)}</td>'


def _metric_row(m: MetricRecord, with_test: bool = False, hardware: str = "", scales: Scales | None = None,
                figures: Sequence[MetricRecord] = ()) -> str:
    """One figure: its machine key in a column of its own; ``figures``: the page's, for the paired
    evidence beside a throughput (the test's speedups)."""
    scale = (scales or {}).get((m.metric, m.unit))
    cells = [f'<td class="test"><code>{_name(short_test(m.test))}</code></td>'] if with_test else []
    direction = " <small>(lower is better)</small>" if m.direction == LOWER else ""
    floor = f" <small>claim ≥ {m.floor:.3g}x</small>" if m.floor is not None else ""
    paired = "<br>".join(_e(paired_text(p)) for p in paired_evidence(m, figures))
    cells += [f'<td class="hw"><code>{_e(m.hardware or hardware or "–")}</code></td>', f"<td>{_e(m.label)}</td>",
              f"<td>{_e(m.metric)}{direction}</td>",
              f'<td class="num">{_e(_observed(m, scale))}{_spread(m, scale)}{floor}</td>',
              f'<td class="num">{_e(figure(m.baseline, m.unit, scale))}</td>',
              f'<td class="num">{_e(_pct(m.delta))}</td>', f'<td class="num">{_gate(m)}</td>', _verdict_cell(m),
              f'<td class="paired">{paired or "–"}</td>']
    return "<tr>" + "".join(cells) + "</tr>"


_METRIC_HEAD = ("<tr>{test}<th>hardware</th><th>scenario</th><th>metric</th><th>observed</th><th>baseline</th>"
                "<th>change</th><th>± gate</th><th>verdict</th><th>paired evidence</th></tr>")
LEGEND = ("<b>±</b> is each figure's gate: the smallest change its verdict could call (its tolerance, widened "
          "by its run-to-run noise over the recorded runs). <b>noise unknown</b>: nothing measured that noise, "
          "so the gate is the tolerance and a change beyond it is inconclusive; <b>n=1</b>: one sample. "
          "<b>IQR</b>: the spread of the run's own rounds. <b>paired evidence</b>: the same test's paired "
          "speedups (variants timed in turn, 95% interval) beside an absolute throughput. Each figure "
          "(test, scenario, metric, hardware) is counted once, however many reports hold it.")


# --- sections ------------------------------------------------------------------------------------

def verdict_section(d: Digest) -> str:
    cls = "fail" if d.failed else "pass"
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
            f'<p>Run <b>{_e(run.name)}</b>, started {_e(run.started)}; reports: '
            + ", ".join(f"<code>{_e(p.name)}</code>" for p in run.paths) + "</p>"
            f'<p><b>{len(tests)} tests</b> (each counted once, whichever framework environments ran it): '
            + " ".join(parts) + "</p>"
            f'<p><b>{len(metrics)} figures</b> (each counted once): ' + " ".join(vparts) + "</p>" + skipped
            + ("<p>Hardware: " + ", ".join(f"<code>{_e(h)}</code>" for h in hardware) + "</p>" if hardware else "")
            + ("<details><summary>Software</summary><ul>" + "".join(f"<li><code>{_e(s)}</code></li>"
                                                                   for s in software) + "</ul></details>"
               if software else "")
            + "</section>")


def _figure_table(ms: Sequence[MetricRecord], d: Digest, scales: Scales) -> str:
    return ("<table>" + _METRIC_HEAD.format(test='<th class="test">test</th>')
            + "".join(_metric_row(m, with_test=True, scales=scales, figures=d.figures) for m in ms) + "</table>")


def _failure_table(ts: Sequence[TestRecord], head: str) -> str:
    return (f'<table><tr><th class="test">{_e(head)}</th><th>hardware</th><th>outcome</th>'
            "<th>first line of the message</th></tr>"
            + "".join(f'<tr><td class="test"><code>{_name(short_test(t.test))}</code></td>'
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
            "computes the same thing, whatever its speed.</p>" + _failure_table(ts, "failed test") + "</section>")


def attention_section(tests: list[TestRecord], d: Digest | None = None, scales: Scales | None = None) -> str:
    """Distinct regressions and the other failed tests first; inconclusive figures next; improvements
    and missing baselines folded away."""
    d = d if d is not None else digest(tests)
    scales = scales if scales is not None else unit_scales(d.figures)
    failing = d.failures["performance"] + d.failures["other"]
    regressions = sorted(d.by_verdict("regression"), key=lambda m: (better_change(m) or 0))
    out = ['<section id="attention"><h2>Regressions and failures</h2>']
    if not failing and not regressions and not d.failures["correctness"]:
        out.append('<p class="good">No regression and no failed test.</p>')
    if regressions:
        out.append(f"<h3>{_e(count(len(regressions), 'regression'))} beyond the figures' noise, worst first</h3>"
                   + _figure_table(regressions, d, scales))
    if failing:
        out.append("<h3>Failed tests</h3>" + _failure_table(failing, "failed test"))
    inconclusive = d.by_verdict("inconclusive")
    if inconclusive:
        out.append(f'<h3 id="inconclusive">{_e(count(len(inconclusive), "inconclusive figure"))}</h3><p>Moved beyond '
                   "the tolerance but not beyond the figure's own noise, or its noise is unknown: more recorded "
                   "runs (<code>pytest --update-baselines</code>) or a paired run decides them. They fail nothing.</p>"
                   + _figure_table(sorted(inconclusive, key=lambda m: (better_change(m) or 0)), d, scales))
    other = sorted((m for m in d.figures if m.verdict in ("improvement", "missing")),
                   key=lambda m: (_VERDICT_ORDER[m.verdict or "ok"], -abs(m.delta or 0)))
    if other:
        kinds = Counter(m.verdict for m in other if m.verdict is not None)  # all are: improvement or missing
        counted = ", ".join(count(n, k, k + "s" if k != "missing" else k) for k, n in kinds.items())
        out.append(f"<details><summary>{_e(counted)}"
                   " (improvements and figures without a baseline)</summary>" + _figure_table(other, d, scales)
                   + "</details>")
    out.append("</section>")
    return "".join(out)


def rollup_section(d: Digest) -> str:
    """Framework x metric x hardware: a systematic shift shows as a whole group moving one way."""
    if not d.groups:
        return ""
    warnings = [w for w in (g.shift() for g in d.groups) if w]
    out = ['<section id="rollups"><h2>Roll-up by framework, metric and hardware</h2>']
    out += [f'<p class="warn">⚠ {_e(w)}</p>' for w in warnings]
    out.append(f"<p>Figures with a baseline. <b>up / down</b>: moved beyond their tolerance that way. A warning "
               f"is shown when at least {SHIFT_SHARE:.0%} of a group of at least {SHIFT_MIN_FIGURES} figures moved "
               "the same way.</p>")
    out.append("<table><tr><th>framework</th><th>metric</th><th>hardware</th><th>figures</th>"
               "<th>median change</th><th>up</th><th>down</th><th>within</th></tr>")
    for g in d.groups:
        n, up, down = len(g.figures), len(g.up), len(g.down)
        cls = ' class="warn"' if g.shift() else ""
        direction = " <small>(lower is better)</small>" if g.figures[0].direction == LOWER else ""
        out.append(f"<tr{cls}><td>{_e(g.framework or '–')}</td><td>{_e(g.metric)}{direction}</td>"
                   f'<td class="hw"><code>{_e(g.hardware or "–")}</code></td><td class="num">{n}</td>'
                   f'<td class="num">{_e(_pct(g.median))}</td><td class="num">{up}</td><td class="num">{down}</td>'
                   f'<td class="num">{n - up - down}</td></tr>')
    out.append("</table></section>")
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
            out.append(f'<div class="test"><p><code>{_name(t.test.split("::", 1)[-1])}</code> '
                       f'<span class="{cls}">{_e(t.outcome)}</span>'
                       + (f" <small>{_e(t.message)}</small>" if t.message and t.outcome != "passed" else "")
                       + (f" <small>on {_e(t.hardware)}</small>" if t.hardware else "") + "</p>")
            if t.metrics:
                out.append("<table>" + _METRIC_HEAD.format(test="") + "".join(
                    _metric_row(m, hardware=t.hardware, scales=scales, figures=d.figures if d else t.metrics)
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
        from pytest_dlperf.reports import plots
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
    per_run = [{(m.hardware, *m.key): m for t in r.tests for m in t.metrics} for r in shown]
    keys = sorted(per_run[-1])  # the newest run's figures; one it no longer has is history of a gone test
    gone = len({k for ms in per_run[:-1] for k in ms} - set(keys))
    several_machines = len({k[0] for k in keys}) > 1
    out.append(f"<p>The newest run's {len(keys)} figures over the last {len(shown)} runs (oldest left); the red "
               "dot is the newest; the change is the newest against the run before it."
               + (f" {gone} figures of earlier runs that the newest run does not have are left out." if gone else "")
               + "</p><table><tr><th>test</th>"
               "<th>scenario</th><th>metric</th>"
               + "".join(f'<th title="{_e(r.started)}">{_e(r.name)}</th>' for r in shown)
               + "<th>change</th><th>trend</th></tr>")
    for key in keys:
        ms = [ms.get(key) for ms in per_run]
        unit = next(m.unit for m in ms if m is not None)
        values = [m.value if m is not None else None for m in ms]
        last_two = [v for v in values if v is not None][-2:]
        change = (last_two[1] - last_two[0]) / abs(last_two[0]) if len(last_two) == 2 and last_two[0] else None
        hardware, test, label, metric = key
        where = f" <small>on {_e(hardware)}</small>" if several_machines and hardware else ""
        out.append(f'<tr><td class="test"><code>{_name(short_test(test))}</code></td>'
                   f"<td>{_e(label)}{where}</td><td>{_e(metric)}</td>"
                   + "".join(f'<td class="num">{_e(figure(v, unit))}</td>' for v in values)
                   + f'<td class="num">{_e(_pct(change))}</td><td>{sparkline(values)}</td></tr>')
    out.append("</table></section>")
    return "".join(out)


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:1em auto;max-width:1250px;
color:#222;padding:0 1em}
h1{font-size:1.5em;margin:.2em 0}h1 small{font-size:.6em;color:#666;font-weight:normal}
h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.4em}
.verdict{font-size:1.15em;font-weight:bold;padding:.4em .6em;border-radius:.3em;margin:.4em 0}
.verdict.fail{background:#fde8e8;border-left:.4em solid #d62728}
.verdict.pass{background:#e8f6e8;border-left:.4em solid #2ca02c}
.legend{font-size:.85em;color:#444}.warn{background:#fff4d6}p.warn{padding:.3em .5em;border-left:.4em solid #ff7f0e}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.85em;max-width:100%}th,td{border:1px solid #ddd;
padding:.2em .4em;text-align:left;vertical-align:top}td code{overflow-wrap:break-word}th{background:#f4f4f4}
td.num,td.hw{white-space:nowrap}td.num{text-align:right}.test{min-width:14em}td.paired{font-size:.9em;min-width:10em}
.mark{display:inline-block;font-size:.8em;padding:0 .3em;border:1px solid #ff7f0e;border-radius:.3em;color:#8a4b00}
.v-regression{color:#fff;background:#d62728}.v-improvement{color:#fff;background:#2ca02c}
.v-missing{background:#eee}.v-updated{background:#e6dcf3}.v-ok{color:#1f77b4}.v-inconclusive{background:#fff4d6}
.skipped{color:#777}
.badge{display:inline-block;padding:.1em .5em;border-radius:.6em;border:1px solid #ccc;margin-right:.3em}
.good{color:#2ca02c;font-weight:bold}figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.9em;color:#444}.test{margin-left:1em}nav a{margin-right:1em}
"""


def run_title(run: Run, d: Digest) -> str:
    """What the run was: its hardware keys and the day it started (the folder name says neither)."""
    return f"{', '.join(d.hardware) or 'unnamed machine'} · {run.started[:10]}"


def page(runs: list[Run], changes: str = "") -> str:
    """The whole page for ``runs`` (oldest first): the newest run in detail, the history of all;
    ``changes``: the change-point section (:func:`pytest_dlperf.reports.history.html_section`), if any."""
    run = runs[-1]
    tests = unique_tests(run.tests)
    d = digest(run.tests)
    scales = unit_scales(d.figures)
    title = run_title(run, d)
    body = [
        f"<h1>pytest-dlperf: {_e(title)} <small>run {_e(run.name)}, started {_e(run.started)}</small></h1>",
        verdict_section(d),
        '<nav><a href="#attention">Regressions</a>' + ('<a href="#rollups">Roll-up</a>' if d.groups else "")
        + '<a href="#summary">Summary</a><a href="#tests">Tests</a><a href="#charts">Charts</a>'
        '<a href="#history">History</a>' + ('<a href="#changes">Change points</a>' if changes else "") + "</nav>",
        f'<p class="legend">{LEGEND}</p>',
        correctness_section(d), attention_section(tests, d, scales), rollup_section(d),
        summary_section(run, tests, d), tests_section(tests, d, scales), charts_section(tests),
        history_section(runs), changes,
        f"<footer><small>Written by dlperf html from {sum(len(r.paths) for r in runs)} reports of {len(runs)} "
        "runs.</small></footer>",
    ]
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>pytest-dlperf: {_e(title)}</title><style>{STYLE}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")


def write(paths: Sequence[str | Path], outdir: Path, history: Sequence[str | Path] | None = None,
          max_pvalue: float = 0.001) -> Path:
    """Read ``paths`` (reports or folders of them), write ``outdir/index.html``; its path. ``history``:
    the reports of earlier runs whose change points the page shows too."""
    runs = read_runs(paths)
    changes = ""
    if history:
        from pytest_dlperf.reports import history as _history

        changes = _history.html_section(_history.history(history, max_pvalue), max_pvalue)
    if outdir.exists() and not outdir.is_dir():
        raise ReportError(f"{outdir}: exists and is not a directory")
    outdir.mkdir(parents=True, exist_ok=True)
    target = outdir / "index.html"
    target.write_text(page(runs, changes), encoding="utf-8")
    return target
