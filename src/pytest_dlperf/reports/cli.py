"""``dlperf``: merge, summarise, compare, plot and render as HTML the JUnit reports of pytest-dlperf runs.

    dlperf merge OUT.xml IN.xml [IN.xml ...]
    dlperf summary REPORT.xml [...] [--output FILE]      Markdown, e.g. >> $GITHUB_STEP_SUMMARY
    dlperf compare OLD.xml NEW.xml [--threshold 0.05]    exit 1 when a metric got worse (the tests' rule)
    dlperf plot REPORT.xml [...] --out DIR               PNG charts (needs matplotlib)
    dlperf html REPORT.xml|RUNDIR [...] --out DIR        one self-contained page, with history over runs
                [--history REPORT.xml|DIR|BASELINE.json ...]  plus change points over those runs
    dlperf history REPORT.xml|DIR|BASELINE.json [...]    each figure's change points over runs

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

from pytest_dlperf.reports import digest
from pytest_dlperf.judging.baselines import Baseline
from pytest_dlperf.reports.junit import (MetricRecord, ReportError, TestRecord, all_skipped, direction_of, merge,
                                         metrics_by_key, own_records, read_reports, skipped_note, test_outcomes)
from pytest_dlperf.result import Metric
from pytest_dlperf.sample_stats import sample_stats
from pytest_dlperf import text
from pytest_dlperf.units import count, show
from pytest_dlperf.judging.gates import family_alpha, floor_for
from pytest_dlperf.judging.noise import PRIOR_DF, PRIORS, SHIFT_PRIORS, Spread, device_class, kind_of
from pytest_dlperf.judging.verdict import IMPROVEMENT, INCONCLUSIVE, OK, REGRESSION
from pytest_dlperf.judging.verdict import compare as verdict_compare

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE = 0, 1, 2
OUTCOME_MARK = {"passed": "✅", "failed": "❌", "error": "💥", "skipped": "⏭️"}
VERDICT_MARK = {"regression": "🔴 regression", "improvement": "🟢 improvement", "missing": "⚪ missing",
                "updated": "🔵 updated", "ok": "ok", "inconclusive": "🟡 inconclusive"}


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
    target = Path(args.output)
    for given in args.inputs:
        if target.resolve() == Path(given).resolve():
            raise ReportError(f"{target}: the output is also an input, and merging would overwrite it; write "
                              "the merged report to a new file: dlperf merge OUT.xml IN.xml [IN.xml ...]")
    merged = merge(args.inputs)
    if not target.parent.is_dir():
        raise ReportError(f"{target.parent}: no such directory to write {target.name} into")
    merged.write(str(target))
    print(f"{target}: {merged.tests} tests ({merged.failures} failed, {merged.errors} errors, "
          f"{merged.skipped} skipped) from {len(args.inputs)} reports", file=out)
    return EXIT_OK


# --- summary -------------------------------------------------------------------------------------

def _gate_md(m: MetricRecord) -> str:
    """The gate as ``±x%`` (tolerance where the noise is unknown), with n=1 / noise unknown marked."""
    gate = m.detectable if m.detectable is not None else m.tolerance
    marks = (["n=1"] if m.n == 1 else []) + (["cannot detect"] if digest.cannot_detect(m) else [])
    return (f"±{gate:.0%}" if gate is not None else "-") + "".join(f" ⚠️{x}" for x in marks)


def _figure_rows_md(ms: Sequence[MetricRecord], d: digest.Digest, scales: dict) -> list[str]:
    """The distinct figures ``ms`` as a table: test whole, hardware, one unit per metric, the gate and
    the paired evidence beside a throughput."""
    lines = ["| test | hardware | scenario | metric | observed | baseline | change | ± gate | paired evidence |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |"]
    for m in ms:
        factor, unit = scales.get((m.metric, m.unit), (1.0, m.unit))
        paired = "<br>".join(digest.paired_text(p) for p in digest.paired_evidence(m, d.figures)) or "-"
        lines.append(f"| `{_md(m.test)}` | `{_md(m.hardware or '-')}` | {_md(m.label)} | {_md(m.metric)} "
                     f"| {_num(m.value / factor, unit)} "
                     f"| {_num(m.baseline / factor if m.baseline is not None else None, unit)} "
                     f"| {_pct(m.delta)} | {_gate_md(m)} | {_md(paired)} |")
    return lines + [""]


def verdict_markdown(tests: Sequence[TestRecord]) -> list[str]:
    """The top of the summary: one verdict line, then correctness failures, distinct regressions,
    systematic shifts and the roll-up, and the inconclusive figures."""
    d = digest.digest(tests)
    scales = digest.unit_scales(d.figures)
    lines = [f"**{_md(d.verdict_line())}**", ""]
    if d.failures["correctness"]:
        lines += ["### Correctness failures", "",
                  "Failed tests whose message is about accuracy, the loss, NaN / non-finite values, weights or "
                  "parameter equivalence:", ""]
        lines += [f"- `{t.test}`" + (f" on `{t.hardware}`" if t.hardware else "")
                  + f": {_md(t.message) or '(no message)'}"
                  for t in d.failures["correctness"]]
        lines.append("")
    regressions = sorted(d.by_verdict("regression"), key=lambda m: digest.better_change(m) or 0)
    if regressions:
        lines += [f"### {count(len(regressions), 'regression')} beyond the figures' noise (each figure once)", ""]
        lines += _figure_rows_md(regressions, d, scales)
    warnings = [w for w in (g.shift() for g in d.groups) if w]
    lines += [f"> ⚠️ {_md(w)}" for w in warnings] + ([""] if warnings else [])
    if d.groups:
        lines += ["<details><summary>Roll-up by framework, metric and hardware</summary>", "",
                  f"up / down: moved beyond their tolerance that way; a warning when at least "
                  f"{digest.SHIFT_SHARE:.0%} of a group of at least {digest.SHIFT_MIN_FIGURES} figures "
                  "moved the same way.",
                  "", "| framework | metric | hardware | figures | median change | up | down |",
                  "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {_md(g.framework or '-')} | {_md(g.metric)} | `{_md(g.hardware or '-')}` | {len(g.figures)} "
                  f"| {_pct(g.median)} | {len(g.up)} | {len(g.down)} |" for g in d.groups]
        lines += ["", "</details>", ""]
    inconclusive = d.by_verdict("inconclusive")
    if inconclusive:
        lines += [f"### {count(len(inconclusive), 'inconclusive figure')}", "",
                  "Moved beyond the tolerance but not beyond the figure's own noise, or its noise is unknown; "
                  "they fail nothing.", ""]
        lines += _figure_rows_md(inconclusive, d, scales)
    lines += ["± is each figure's gate: the smallest change its verdict could call (its tolerance, widened by its "
              "run-to-run noise); *noise unknown*: the gate is the tolerance and a change beyond it is inconclusive.",
              ""]
    return lines


def summary_markdown(tests: Sequence[TestRecord]) -> str:
    from pytest_dlperf.reports.html_report import unique_tests

    per_test = test_outcomes(tests)  # a test run in three framework environments counts once
    outcomes = Counter(per_test.values())
    metrics = digest.distinct(tests)  # a figure in several reports counts once
    verdicts = Counter(m.verdict for m in metrics if m.verdict)
    lines = ["## dlperf results", ""]
    lines += verdict_markdown(tests)
    lines.append(f"**{count(len(per_test), 'test')}**: " + ", ".join(
        f"{outcomes[k]} {k}" for k in ("passed", "failed", "error", "skipped") if outcomes[k] or k == "passed"))
    lines.append(f"**{count(len(metrics), 'metric')}**: {count(verdicts['regression'], 'regression')}, "
                 f"{count(verdicts['improvement'], 'improvement')}, {count(verdicts['missing'], 'missing baseline')}"
                 + (f", {count(verdicts['updated'], 'baseline')} updated" if verdicts["updated"] else "")
                 + (f", {verdicts['inconclusive']} inconclusive" if verdicts["inconclusive"] else "")
                 + f", {verdicts['ok']} ok, {len(metrics) - sum(verdicts.values())} recorded only")
    lines.append("")
    lines += [_md(skipped_note(f"`{source}`", reasons)) + "\n" for source, reasons in all_skipped(tests).items()]
    correctness = {t.test for t in tests if digest.failure_kind(t) == "correctness"}
    failing = [t for t in tests if t.outcome in ("failed", "error") and t.test not in correctness]
    if failing:
        lines += ["### Failures", ""]
        lines += [f"- `{t.test}`: {_md(t.message) or '(no message)'}" for t in failing]
        lines.append("")
    lines += _skipped_lines(tests)
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
    scales = digest.unit_scales(metrics)
    for t in unique_tests(tests):
        if not t.metrics:
            continue
        hw = f" on `{t.hardware}`" if t.hardware else ""
        lines += [f"### {OUTCOME_MARK.get(t.outcome, '')} `{t.test}`{hw}", ""]
        for label in t.labels:
            if label in t.scenarios:
                lines.append(f"- **{_md(label)}**: {_md(t.scenarios[label])}")
        if t.scenarios:
            lines.append("")
        lines += ["| scenario | metric | observed | unit | baseline | delta | verdict | ± gate | hardware |",
                  "| --- | --- | ---: | --- | ---: | ---: | --- | --- | --- |"]
        for m in t.metrics:
            scale, unit = scales.get((m.metric, m.unit), (1.0, m.unit))  # one unit per metric: MiB/GiB, img/s
            observed = _num(m.value / scale) + (f" [{m.interval[0]:.3g}, {m.interval[1]:.3g}]" if m.interval
                                                else f" (IQR {m.iqr / scale:.2g})" if m.iqr else "")
            verdict = VERDICT_MARK.get(m.verdict or "", m.verdict or "recorded")
            baseline = _num(m.baseline / scale) if m.baseline is not None else "-"
            lines.append(f"| {_md(m.label)} | {_md(m.metric)} | {observed} | {_md(unit)} | {baseline} "
                         f"| {_pct(m.delta)} | {verdict} | {_gate_md(m)} | `{_md(m.hardware or '-')}` |")
        lines.append("")
    if verdicts["missing"] or verdicts["improvement"]:
        lines.append("Missing baselines or improvements: record them with the *update baselines* workflow "
                     "(`pytest --update-baselines`) and commit `baselines/`.")
        lines.append("")
    lines.append("observed: median of the timed rounds (IQR: their interquartile range); a paired ratio "
                 "(speedup) shows its estimate and 95% interval.")
    return "\n".join(lines) + "\n"


def _skipped_lines(tests: Sequence[TestRecord]) -> list[str]:
    """The skipped tests by reason, each reason from the report that ran the test (its own
    environment's, e.g. no GPU; not another environment's missing framework)."""
    reasons: Counter[tuple[str, str]] = Counter(
        (t.message or "(no reason given)", os.path.basename(t.source)) for t in own_records(tests).values()
        if t.outcome == "skipped")
    if not reasons:
        return []
    return (["### Skipped", ""]
            + [f"- {count(n, 'test')}: {_md(reason)} (`{source}`)" for (reason, source), n in reasons.most_common()]
            + [""])


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

UNJUDGED = "not judged (direction unknown)"
RECORDED = "recorded (the tests do not judge it)"
#: How the table shows each outcome (judging.outcomes' words; a regression in capitals, to be seen).
_SHOWN = {REGRESSION: "REGRESSION", IMPROVEMENT: "improvement", OK: "no change", INCONCLUSIVE: "inconclusive"}


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
                        iqr=sample_stats(old.samples).iqr if old.samples else 0.0, software={}, recorded="",
                        runs=(*history, old.value))
    # the figure's noise, degrees of freedom, level and tolerance as its test judged it, where the report
    # says; else what the plugin assumes of a figure of its kind on that device before anything is recorded
    shared = 0.0
    spread: Spread | None = None  # the history's own runs
    if new.noise is not None:
        tolerance = new.tolerance if new.tolerance is not None else tolerance
        spread = Spread(new.noise, new.df if new.df is not None else max((new.runs or 1) - 1, 0), "recorded noise")
    elif len(history) < 2:
        device = device_class(new.hardware or "")
        spread = Spread(PRIORS[device].get(kind_of(new.metric, new.unit), PRIORS[device]["throughput"]), PRIOR_DF,
                        f"stated {device} prior")
        shared = SHIFT_PRIORS[device].get(kind_of(new.metric, new.unit), SHIFT_PRIORS[device]["throughput"]) ** 2
    v = verdict_compare(new.test, new.label, metric, baseline, tolerance, spread=spread, shared=shared,
                        alpha=new.alpha if new.alpha is not None else family_alpha(1, "check"))
    basis = spread.source if spread is not None else "recorded noise"
    return Change(v.status, v.delta, v.gate if v.gate is not None else v.tolerance, v.p_value,
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
        notes = [f"p={change.p_value:.3f}"] if change.p_value is not None and change.status != OK else []
        if change.basis.startswith("stated") and change.status == INCONCLUSIVE:
            notes.append("noise not recorded: a stated prior")
        if change.guessed_direction and change.status != UNJUDGED:
            notes.append("direction from name")
        tol = f"±{change.tolerance:.1%}" if change.tolerance is not None else "-"
        rows.append((name, metric, show(o.value, o.unit), show(n.value, n.unit), _pct(change.delta), tol,
                     _SHOWN.get(change.status, change.status) + (f" ({', '.join(notes)})" if notes else "")))
    return rows, counts



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
    for line in text.table(("scenario", "metric", "old", "new", "delta", "tolerance", "change"), rows):
        print(line, file=out)
    judged = counts[REGRESSION] + counts[IMPROVEMENT] + counts[OK] + counts[INCONCLUSIVE]
    print("", file=out)
    print(f"{count(judged, 'metric')} compared (tolerance {args.threshold:.1%}, the tests' rule): "
          f"{count(counts[REGRESSION], 'regression')}, {count(counts[IMPROVEMENT], 'improvement')}, "
          f"{counts[OK]} no change, {counts[INCONCLUSIVE]} inconclusive; "
          f"{counts[UNJUDGED]} not judged, {counts[RECORDED]} recorded only (not judged by the tests either), "
          f"{counts['only in OLD']} only in {args.old}, "
          f"{counts['only in NEW']} only in {args.new}.", file=out)
    print("Judged as the tests judge a figure against its baseline (OLD as the baseline, one run): a change "
          "beyond the tolerance is a regression or an improvement only beyond the figure's own run-to-run "
          "noise, at the level and tolerance NEW's test judged it (recorded in the report); where NEW recorded "
          "none, at the stated prior of its device class (docs/verdicts.md).", file=out)
    if counts["guessed"]:
        print(f"note: {counts['guessed']} metrics have no recorded direction (an older report): which way is "
              "better was taken from the metric's name.", file=out)
    return EXIT_REGRESSION if counts[REGRESSION] else EXIT_OK


# --- plot ----------------------------------------------------------------------------------------

def cmd_plot(args: argparse.Namespace, out: TextIO) -> int:
    tests = read_reports(args.reports)
    try:
        from pytest_dlperf.reports import plots
    except ImportError as exc:
        raise ReportError(f"dlperf plot needs matplotlib ({exc}); install it with: pip install matplotlib") from None
    outdir = Path(args.out)
    if outdir.exists() and not outdir.is_dir():
        raise ReportError(f"{outdir}: exists and is not a directory")
    outdir.mkdir(parents=True, exist_ok=True)
    written = plots.draw_all(tests, outdir)
    for source, reasons in all_skipped(tests).items():
        print(skipped_note(source, reasons), file=out)
    if not written:
        print(f"no throughput, speedup or scaling figures in {', '.join(args.reports)}: nothing to plot", file=out)
    for path in written:
        print(path, file=out)
    return EXIT_OK


# --- html ----------------------------------------------------------------------------------------

def cmd_html(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_dlperf.reports.html_report import write

    reports = [r for r in args.reports if not (args.skip_missing and not os.path.exists(r))]
    if not reports:
        raise ReportError(f"none of the reports exist: {', '.join(args.reports)}")
    target = write(reports, Path(args.out), history=args.history, max_pvalue=args.max_pvalue)
    print(target, file=out)
    return EXIT_OK


# --- history -------------------------------------------------------------------------------------

def _pvalue(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a p-value such as 0.001") from None
    if not 0.001 <= value < 1:  # 999 shuffles cannot show a p below 1/1000
        raise argparse.ArgumentTypeError(f"{value} is out of range; give a p-value in [0.001, 1), e.g. 0.001")
    return value


def cmd_history(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_dlperf.reports import history

    analyses = history.history(args.reports, args.max_pvalue)
    shown = [a for a in analyses if a.changes] if args.changed_only else analyses
    for line in history.table(shown) if shown else []:
        print(line, file=out)
    print("", file=out)
    print(history.summary_line(analyses), file=out)
    print(history.method_line(args.max_pvalue), file=out)
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
    p.add_argument("--history", nargs="+", metavar="REPORT.xml|DIR|BASELINE.json",
                   help="add a change-point section over these runs' reports (as dlperf history)")
    p.add_argument("--max-pvalue", type=_pvalue, default=0.001, help="significance of a change point "
                   "(default 0.001; docs/history.md gives the rates)")
    p.set_defaults(func=cmd_html)

    p = sub.add_parser("history", help="each figure over many runs: the run where it changed, by how much, "
                       "and whether the change persisted (changed figures first)")
    p.add_argument("reports", metavar="REPORT.xml|DIR|BASELINE.json", nargs="+",
                   help="reports of runs of one suite, folders of them (every *.xml under it; a run's time is "
                   "its testsuite timestamp, else the file's mtime), or baselines/<key>.json with 'runs'")
    p.add_argument("--changed-only", action="store_true", help="list only the figures that changed")
    p.add_argument("--max-pvalue", type=_pvalue, default=0.001, help="significance of a change point "
                   "(default 0.001; 0.01 finds more steps and more false ones: docs/history.md)")
    p.set_defaults(func=cmd_history)
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
