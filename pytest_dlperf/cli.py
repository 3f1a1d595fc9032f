"""``dlperf``: merge, summarise, compare, plot and render as HTML the JUnit reports of pytest-dlperf runs.

    dlperf merge OUT.xml IN.xml [IN.xml ...]
    dlperf summary REPORT.xml [...] [--output FILE]      Markdown, e.g. >> $GITHUB_STEP_SUMMARY
    dlperf compare OLD.xml NEW.xml [--threshold 0.05]    exit 1 when a metric got worse (the tests' rule)
    dlperf plot REPORT.xml [...] --out DIR               PNG charts (needs matplotlib)
    dlperf html REPORT.xml|RUNDIR [...] --out DIR        one self-contained page, with history over runs

``compare`` judges each metric of NEW against OLD with the rule the tests judge a figure against its
baseline (:func:`pytest_dlperf.judging.verdict.compare` on the per-round samples the reports carry), in the
direction the report records for the metric.

Exit codes: 0 fine, 1 ``compare`` found a metric worse than the tolerance, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, TextIO

from .judging.baselines import Baseline
from .junit import (HIGHER, MetricRecord, ReportError, TestRecord, direction_of, merge, metrics_by_key,
                    read_reports, test_outcomes)
from .result import Metric
from .summary import summarize
from .units import count, readable, show
from .judging.gates import Pool, floor_for
from .judging.verdict import IMPROVEMENT, INCONCLUSIVE, OK, REGRESSION
from .judging.verdict import compare as verdict_compare

EXIT_OK, EXIT_WORSE, EXIT_USAGE = 0, 1, 2
OUTCOME_MARK = {"passed": "✅", "failed": "❌", "error": "💥", "skipped": "⏭️"}
VERDICT_MARK = {"regression": "🔴 regression", "improvement": "🟢 improvement", "missing": "⚪ missing",
                "updated": "🔵 updated", "ok": "ok"}


def _threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a fraction such as 0.05 for 5%") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{value} is out of range; give a fraction in [0, 1), e.g. 0.05 for 5%")
    return value


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" + (f" {unit}" if unit else "")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _md(text: str) -> str:
    """Table-cell safe: no pipes, no newlines."""
    return text.replace("|", "\\|").replace("\n", " ")


# --- merge ---------------------------------------------------------------------------------------

def cmd_merge(args: argparse.Namespace, out: TextIO) -> int:
    merged = merge(args.inputs)
    target = Path(args.output)
    if not target.parent.is_dir():
        raise ReportError(f"{target.parent}: no such directory to write {target.name} into")
    merged.write(str(target))
    print(f"{target}: {merged.tests} tests ({merged.failures} failed, {merged.errors} errors, "
          f"{merged.skipped} skipped) from {len(args.inputs)} reports", file=out)
    return EXIT_OK


# --- summary -------------------------------------------------------------------------------------

def summary_markdown(tests: Sequence[TestRecord]) -> str:
    per_test = test_outcomes(tests)  # a test run in three framework environments counts once
    outcomes = Counter(per_test.values())
    metrics = [m for t in tests for m in t.metrics]
    verdicts = Counter(m.verdict for m in metrics if m.verdict)
    lines = ["## dlperf results", ""]
    lines.append(f"**{count(len(per_test), 'test')}**: " + ", ".join(
        f"{outcomes[k]} {k}" for k in ("passed", "failed", "error", "skipped") if outcomes[k] or k == "passed"))
    lines.append(f"**{count(len(metrics), 'metric')}**: {count(verdicts['regression'], 'regression')}, "
                 f"{count(verdicts['improvement'], 'improvement')}, {count(verdicts['missing'], 'missing baseline')}"
                 + (f", {count(verdicts['updated'], 'baseline')} updated" if verdicts["updated"] else "")
                 + f", {verdicts['ok']} ok, {len(metrics) - sum(verdicts.values())} recorded only")
    lines.append("")
    failing = [t for t in tests if t.outcome in ("failed", "error")]
    if failing:
        lines += ["### Failures", ""]
        lines += [f"- `{t.test}`: {_md(t.message) or '(no message)'}" for t in failing]
        lines.append("")
    ab = [(t, label, fields) for t in tests for label, fields in t.ab.items()]
    if ab:
        lines += ["### A/B against the reference environment", "",
                  "| test | scenario | candidate/reference | 95% interval | verdict | reference software |",
                  "| --- | --- | ---: | --- | --- | --- |"]
        for t, label, f in ab:
            interval = "[" + ", ".join(f"{float(b):.3f}" for b in f.get("ab_interval", "").split()) + "]"
            ratio = f"{float(f['ab_ratio']):.3f}x" if f.get("ab_ratio") else "-"
            lines.append(f"| `{t.test}` | {_md(label)} | {ratio} | {interval} | "
                         f"{f.get('ab_verdict', '-')} | {_md(f.get('reference_software', ''))} |")
        lines.append("")
    for t in tests:
        if not t.metrics:
            continue
        hw = f" on `{t.hardware}`" if t.hardware else ""
        lines += [f"### {OUTCOME_MARK.get(t.outcome, '')} `{t.test}`{hw}", ""]
        for label in t.labels:
            if label in t.scenarios:
                lines.append(f"- **{_md(label)}**: {_md(t.scenarios[label])}")
        if t.scenarios:
            lines.append("")
        lines += ["| scenario | metric | observed | unit | baseline | delta | verdict |",
                  "| --- | --- | ---: | --- | ---: | ---: | --- |"]
        for m in t.metrics:
            shown, unit = readable(m.value, m.unit)  # MiB/GiB, img/s
            scale = m.value / shown if shown else 1.0
            observed = _num(shown) + (f" [{m.interval[0]:.3g}, {m.interval[1]:.3g}]" if m.interval
                                      else f" ± {m.iqr / 2 / scale:.2g}" if m.iqr else "")
            verdict = VERDICT_MARK.get(m.verdict or "", m.verdict or "recorded")
            baseline = _num(m.baseline / scale) if m.baseline is not None else "-"
            lines.append(f"| {_md(m.label)} | {_md(m.metric)} | {observed} | {_md(unit)} | {baseline} "
                         f"| {_pct(m.delta)} | {verdict} |")
        lines.append("")
    if verdicts["missing"] or verdicts["improvement"]:
        lines.append("Missing baselines or improvements: record them with the *update baselines* workflow "
                     "(`pytest --update-baselines`) and commit `baselines/`.")
        lines.append("")
    lines.append("observed: median of the timed rounds ± half the interquartile range; a paired ratio "
                 "(speedup) shows its estimate and 95% interval.")
    return "\n".join(lines) + "\n"


def cmd_summary(args: argparse.Namespace, out: TextIO) -> int:
    reports = list(args.reports)
    absent = [r for r in reports if args.skip_missing and not os.path.exists(r)]
    reports = [r for r in reports if r not in absent]
    if not reports:
        raise ReportError(f"none of the reports exist: {', '.join(absent)}")
    text = summary_markdown(read_reports(reports))
    if absent:
        text += "\nNot run (no report): " + ", ".join(f"`{os.path.basename(r)}`" for r in absent) + "\n"
    if args.output:
        with open(args.output, "a", encoding="utf-8") as fh:
            fh.write(text)
    else:
        out.write(text)
    return EXIT_OK


# --- compare -------------------------------------------------------------------------------------

WORSE, BETTER, SAME, UNDECIDED, UNJUDGED = ("WORSE", "better", "same", "inconclusive",
                                            "not judged (direction unknown)")
RECORDED = "recorded (the tests do not judge it)"
_STATUS = {REGRESSION: WORSE, IMPROVEMENT: BETTER, OK: SAME, INCONCLUSIVE: UNDECIDED}


@dataclass(frozen=True)
class Change:
    """One metric of OLD against NEW, judged as the tests judge a figure against its baseline."""

    status: str
    delta: float | None
    #: The tolerance the decision used (the given one, widened by the noise as the tests widen it).
    tolerance: float | None = None
    p_value: float | None = None
    #: How it was judged: "samples" (verdict.compare), or "medians" for reports without samples.
    basis: str = "samples"
    #: The direction came from the metric's name because the reports do not record it.
    guessed_direction: bool = False


def _direction(old: MetricRecord, new: MetricRecord) -> tuple[str | None, bool]:
    recorded = new.declared_direction or old.declared_direction
    if recorded:
        return recorded, False
    return direction_of(new.metric), True


def judge(old: MetricRecord, new: MetricRecord, tolerance: float, history: Sequence[float] = ()) -> Change:
    """OLD is the baseline, NEW the measurement, judged with the tests' rule (``verdict.compare``).

    One report is one run: the noise a change is judged against is the run-to-run spread NEW's
    test recorded for the figure (its baseline history), when it recorded one; else the noise is
    unknown and a change beyond the tolerance is inconclusive. ``history``: the figure's values in
    earlier runs (``--history``), recorded runs beside OLD's.
    """
    direction, guessed = _direction(old, new)
    delta = (new.value - old.value) / abs(old.value) if old.value else None
    if direction is None:
        return Change(UNJUDGED, delta, basis="-", guessed_direction=guessed)
    tolerance = floor_for(new.metric, tolerance)
    metric = Metric(name=new.metric, samples=new.samples or (new.value,), unit=new.unit, direction=direction,
                    estimate=new.value, interval=new.interval)
    baseline = Baseline(value=old.value, unit=old.unit, direction=direction, samples=old.samples,
                        iqr=summarize(old.samples).iqr if old.samples else 0.0, software={}, recorded="",
                        runs=(*history, old.value))
    pool = Pool(new.noise, max((new.runs or 1) - 1, 0)) if new.noise is not None else None
    v = verdict_compare(new.test, new.label, metric, baseline, tolerance, pool=pool)
    basis = "recorded noise" if (pool is not None and pool.df) or history else "tolerance only"
    return Change(_STATUS[v.status], v.delta, v.gate if v.gate is not None else v.tolerance, v.p_value,
                  basis=basis, guessed_direction=guessed)


def compare_rows(old: dict[tuple[str, str, str], MetricRecord], new: dict[tuple[str, str, str], MetricRecord],
                 threshold: float, history: dict[tuple[str, str, str], list[float]] | None = None,
                 ) -> tuple[list[tuple[str, ...]], Counter[str]]:
    rows: list[tuple[str, ...]] = []
    counts: Counter[str] = Counter()
    for key in sorted(set(old) | set(new)):
        o, n = old.get(key), new.get(key)
        test, label, metric = key
        name = f"{test.split('::', 1)[-1]}::{label}"
        if o is None or n is None:
            status = "only in OLD" if n is None else "only in NEW"
            counts[status] += 1
            rows.append((name, metric, show(o.value, o.unit) if o else "-",
                         show(n.value, n.unit) if n else "-", "-", "-", status))
            continue
        if not (o.verdict or n.verdict):  # recorded only, as step time or TFLOP/s beside the throughput
            counts[RECORDED] += 1
            rows.append((name, metric, show(o.value, o.unit), show(n.value, n.unit),
                         _pct((n.value - o.value) / abs(o.value) if o.value else None), "-", RECORDED))
            continue
        change = judge(o, n, threshold, (history or {}).get(key, ()))
        counts[change.status] += 1
        counts["basis:" + change.basis] += 1 if change.status != UNJUDGED else 0
        counts["guessed"] += change.guessed_direction and change.status != UNJUDGED
        notes = [f"p={change.p_value:.3f}"] if change.p_value is not None else []
        if change.basis == "tolerance only" and change.status == UNDECIDED:
            notes.append("noise unknown")
        if change.guessed_direction and change.status != UNJUDGED:
            notes.append("direction from name")
        tol = f"±{change.tolerance:.1%}" if change.tolerance is not None else "-"
        rows.append((name, metric, show(o.value, o.unit), show(n.value, n.unit), _pct(change.delta), tol,
                     change.status + (f" ({', '.join(notes)})" if notes else "")))
    return rows, counts


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), fmt.format(*("-" * w for w in widths))] + \
        [fmt.format(*r).rstrip() for r in rows]


def cmd_compare(args: argparse.Namespace, out: TextIO) -> int:
    old_tests, new_tests = read_reports([args.old]), read_reports([args.new])
    old, new = metrics_by_key(old_tests), metrics_by_key(new_tests)
    old_hw = {t.hardware for t in old_tests if t.hardware}
    new_hw = {t.hardware for t in new_tests if t.hardware}
    if old_hw and new_hw and old_hw != new_hw:
        print(f"note: the reports come from different machines ({', '.join(sorted(old_hw))} vs "
              f"{', '.join(sorted(new_hw))}); differences may be the hardware's", file=out)
    if not set(old) & set(new):
        raise ReportError(f"{args.old} and {args.new} have no metric in common (same test, scenario label and "
                          "metric name); compare two runs of the same tests")
    history: dict[tuple[str, str, str], list[float]] = {}
    for path in args.history:
        for key, record in metrics_by_key(read_reports([path])).items():
            history.setdefault(key, []).append(record.value)
    rows, counts = compare_rows(old, new, args.threshold, history)
    for line in _table(("scenario", "metric", "old", "new", "delta", "tolerance", "change"), rows):
        print(line, file=out)
    judged = counts[WORSE] + counts[BETTER] + counts[SAME] + counts[UNDECIDED]
    print("", file=out)
    print(f"{count(judged, 'metric')} compared (tolerance {args.threshold:.1%}, the tests' rule): {counts[WORSE]} worse, "
          f"{counts[BETTER]} better, {counts[SAME]} within the tolerance, {counts[UNDECIDED]} inconclusive; "
          f"{counts[UNJUDGED]} not judged, {counts[RECORDED]} recorded only (not judged by the tests either), "
          f"{counts['only in OLD']} only in {args.old}, "
          f"{counts['only in NEW']} only in {args.new}.", file=out)
    print("Judged as the tests judge a figure against its baseline (OLD as the baseline, one run): a change "
          "beyond the tolerance is worse or better only beyond the figure's own run-to-run noise, as NEW's "
          "test recorded it from its baseline history; where NEW recorded none, the noise is unknown and the "
          "change is inconclusive (docs/verdicts.md).", file=out)
    if counts["guessed"]:
        print(f"note: {counts['guessed']} metrics have no recorded direction (an older report): which way is "
              "better was taken from the metric's name.", file=out)
    return EXIT_WORSE if counts[WORSE] else EXIT_OK


# --- plot ----------------------------------------------------------------------------------------

def cmd_plot(args: argparse.Namespace, out: TextIO) -> int:
    tests = read_reports(args.reports)
    try:
        from . import plots
    except ImportError as exc:
        raise ReportError(f"dlperf plot needs matplotlib ({exc}); install it with: pip install matplotlib") from None
    outdir = Path(args.out)
    if outdir.exists() and not outdir.is_dir():
        raise ReportError(f"{outdir}: exists and is not a directory")
    outdir.mkdir(parents=True, exist_ok=True)
    written = plots.draw_all(tests, outdir)
    if not written:
        print(f"no throughput, speedup or scaling figures in {', '.join(args.reports)}: nothing to plot", file=out)
    for path in written:
        print(path, file=out)
    return EXIT_OK


# --- html ----------------------------------------------------------------------------------------

def cmd_html(args: argparse.Namespace, out: TextIO) -> int:
    from .html_report import write

    reports = [r for r in args.reports if not (args.skip_missing and not os.path.exists(r))]
    if not reports:
        raise ReportError(f"none of the reports exist: {', '.join(args.reports)}")
    target = write(reports, Path(args.out))
    print(target, file=out)
    return EXIT_OK


# --- entry point ---------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlperf", description="Merge, summarise, compare and plot the JUnit "
                                     "XML reports of pytest-dlperf runs (pytest --junitxml=FILE).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("merge", help="merge reports from several runners into one JUnit XML file")
    p.add_argument("output", metavar="OUT.xml")
    p.add_argument("inputs", metavar="IN.xml", nargs="+")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("summary", help="Markdown summary (for $GITHUB_STEP_SUMMARY)")
    p.add_argument("reports", metavar="REPORT.xml", nargs="+")
    p.add_argument("--output", "-o", metavar="FILE", help="append to FILE instead of printing")
    p.add_argument("--skip-missing", action="store_true",
                   help="list reports that do not exist as not run instead of failing")
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("compare", help="judge NEW against OLD metric by metric with the tests' rule; "
                       "exit 1 if one got worse")
    p.add_argument("old", metavar="OLD.xml")
    p.add_argument("new", metavar="NEW.xml")
    p.add_argument("--history", metavar="REPORT.xml", nargs="+", default=[],
                   help="reports of earlier runs of the same tests on the same machine: each figure's values "
                        "in them give its run-to-run noise, as the baselines' recorded runs do for the tests")
    p.add_argument("--threshold", "--tolerance", type=_threshold, default=0.05, dest="threshold",
                   help="the tolerance, as pytest --dlperf-tolerance: a change must exceed it (widened by "
                   "the noise of the rounds, as the tests widen it) to count (default 0.05 = 5%%)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("plot", help="PNG charts: throughput against baseline, speedup and scaling curves")
    p.add_argument("reports", metavar="REPORT.xml", nargs="+")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the PNG files (created if needed)")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("html", help="one self-contained HTML page: summary, regressions first, tables, charts "
                       "and, given several runs, each figure's history")
    p.add_argument("reports", metavar="REPORT.xml|RUNDIR", nargs="+",
                   help="reports, or folders of them; the reports of one folder are one run (as CI artifacts "
                   "download), the newest run is shown in detail")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for index.html (created if needed)")
    p.add_argument("--skip-missing", action="store_true", help="leave out reports that do not exist")
    p.set_defaults(func=cmd_html)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args, sys.stdout))
    except ReportError as exc:
        print(f"dlperf {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # reading is checked in junit.load; this is writing the output
        print(f"dlperf {args.command}: error: cannot write {exc.filename or 'the output'}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
