"""``dlperf html``: one self-contained HTML page of a run's figures, with their history over earlier runs.

A *run* is the reports in one folder (the layout CI artifacts download to: ``runs/1234/torch.xml``,
``runs/1234/tensorflow.xml``); runs are ordered by the earliest ``timestamp`` of their test suites
(else the files' modification time). The newest run is the page's subject: its summary, regressions
and failures first, a table per test file and the charts of :mod:`pytest_dlperf.reports.plots` (inlined as
PNG data URIs, so the page needs no network and no other file); given several runs, every metric's
value in each of them, with a sparkline (inline SVG).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pytest_dlperf.reports.changepoints import MAX_PVALUE
from pytest_dlperf.reports.combine import unique_tests
from pytest_dlperf.reports.digest import Digest, digest, unit_scales
from pytest_dlperf.reports.history import history as change_history
from pytest_dlperf.reports.history_html import html_section
from pytest_dlperf.reports.html_cells import LEGEND
from pytest_dlperf.reports.html_sections import (attention_section, charts_section, correctness_section,
                                                 history_section, summary_section, tests_section,
                                                 verdict_section)
from pytest_dlperf.reports.records import ReportError
from pytest_dlperf.reports.runs import Run, read_runs
from pytest_dlperf.text import escape as _e


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:1em auto;max-width:1250px;
color:#222;padding:0 1em}
h1{font-size:1.5em;margin:.2em 0}h1 small{font-size:.6em;color:#666;font-weight:normal}
h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.4em}
.verdict{font-size:1.15em;font-weight:bold;padding:.4em .6em;border-radius:.3em;margin:.4em 0}
.verdict.fail{background:#fde8e8;border-left:.4em solid #d62728}
.verdict.pass{background:#e8f6e8;border-left:.4em solid #2ca02c}
.verdict.unjudged{background:#fff4e0;border-left:.4em solid #ff7f0e}
.legend{font-size:.85em;color:#444}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.85em;max-width:100%}th,td{border:1px solid #ddd;
padding:.2em .4em;text-align:left;vertical-align:top}td code{overflow-wrap:break-word}th{background:#f4f4f4}
td.num{white-space:nowrap;text-align:right}td.observed{white-space:normal}td.label{overflow-wrap:anywhere}td.gate{white-space:normal;min-width:5em}td.hw{overflow-wrap:anywhere;min-width:9em}.test{min-width:14em}td.paired{font-size:.9em;min-width:10em}
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
    return f"{', '.join(d.hardware) or 'unnamed machine'} · {run.started.date().isoformat()}"


def page(runs: list[Run], changes: str = "") -> str:
    """The whole page for ``runs`` (oldest first): the newest run in detail, the history of all;
    ``changes``: the change-point section (:func:`pytest_dlperf.reports.history.html_section`), if any."""
    run = runs[-1]
    tests = unique_tests(run.tests)
    d = digest(run.tests)
    scales = unit_scales(d.figures)
    title = run_title(run, d)
    body = [
        f"<h1>pytest-dlperf: {_e(title)} <small>run {_e(run.name)}, started {_e(run.started_at)}</small></h1>",
        verdict_section(d),
        '<nav><a href="#attention">Regressions</a>'
        + '<a href="#summary">Summary</a><a href="#tests">Tests</a><a href="#charts">Charts</a>'
        '<a href="#history">History</a>' + ('<a href="#changes">Change points</a>' if changes else "") + "</nav>",
        f'<p class="legend">{LEGEND}</p>',
        correctness_section(d), attention_section(tests, d, scales),
        summary_section(run, tests, d), tests_section(tests, d, scales), charts_section(tests),
        history_section(runs), changes,
        f"<footer><small>Written by dlperf html from {sum(len(r.paths) for r in runs)} reports of {len(runs)} "
        "runs.</small></footer>",
    ]
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>pytest-dlperf: {_e(title)}</title><style>{STYLE}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")


def write(paths: Sequence[str | Path], outdir: Path, history: Sequence[str | Path] | None = None,
          max_pvalue: float = MAX_PVALUE) -> Path:
    """Read ``paths`` (reports or folders of them), write ``outdir/index.html``; its path. ``history``:
    the reports of earlier runs whose change points the page shows too."""
    runs = read_runs(paths)
    changes = ""
    if history:
        changes = html_section(change_history(history, max_pvalue), max_pvalue)
    if outdir.exists() and not outdir.is_dir():
        raise ReportError(f"{outdir}: exists and is not a directory")
    outdir.mkdir(parents=True, exist_ok=True)
    target = outdir / "index.html"
    target.write_text(page(runs, changes), encoding="utf-8")
    return target
