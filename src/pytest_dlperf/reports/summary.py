"""``dlperf summary``: a run's reports as Markdown (for ``$GITHUB_STEP_SUMMARY``).

The verdict line and the sections of :mod:`.digest` first (correctness failures, distinct regressions,
inconclusive figures), then the counts, failures, skips, A/B comparisons and a
table per test.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Sequence

from pytest_dlperf.reports import digest
from pytest_dlperf.reports.combine import all_skipped, own_records, skipped_note, test_outcomes, unique_tests
from pytest_dlperf.reports.records import MetricRecord, TestRecord
from pytest_dlperf.text import number as _num
from pytest_dlperf.text import percent as _pct
from pytest_dlperf.units import count

OUTCOME_MARK = {"passed": "✅", "failed": "❌", "error": "💥", "skipped": "⏭️"}
VERDICT_MARK = {"regression": "🔴 regression", "improvement": "🟢 improvement", "missing": "⚪ missing",
                "updated": "🔵 updated", "ok": "ok", "inconclusive": "🟡 inconclusive"}


def cell(text: str) -> str:
    """Table-cell safe: no pipes, no newlines."""
    return text.replace("|", "\\|").replace("\n", " ")


def gate_md(m: MetricRecord) -> str:
    """The gate as ``±x%``, with n=1 and "cannot detect" marked."""
    gate = digest.gate_of(m)
    return (f"±{gate:.0%}" if gate is not None else "-") + "".join(f" ⚠️{x}" for x in digest.marks_of(m))


#: The table of distinct figures: its header and rule, then one :func:`figure_row` each.
FIGURE_HEADER = ["| test | hardware | scenario | metric | observed | baseline | change | ± gate | paired evidence |",
                 "| --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |"]


def figure_row(m: MetricRecord, d: digest.Digest, scales: dict) -> str:
    """One distinct figure: test whole, hardware, one unit per metric, the gate and the paired evidence
    beside a throughput."""
    factor, unit = scales.get((m.metric, m.unit), (1.0, m.unit))
    paired = "<br>".join(digest.paired_text(p) for p in digest.paired_evidence(m, d.figures)) or "-"
    return (f"| `{cell(m.test)}` | `{cell(m.hardware or '-')}` | {cell(m.label)} | {cell(m.metric)} "
            f"| {_num(m.value / factor, unit)} "
            f"| {_num(m.baseline / factor if m.baseline is not None else None, unit)} "
            f"| {_pct(m.delta)} | {gate_md(m)} | {cell(paired)} |")


def _figure_rows_md(ms: Sequence[MetricRecord], d: digest.Digest, scales: dict) -> list[str]:
    return FIGURE_HEADER + [figure_row(m, d, scales) for m in ms] + [""]


#: An A/B interval's confidence where its report predates the ``ab_confidence`` field.
EARLIER_AB_CONFIDENCE = 0.95


def mixed_confidence(fields: Sequence[dict[str, str]]) -> bool:
    """Whether the A/B rows' intervals differ in confidence, so each row must name its own."""
    return len({float(f.get("ab_confidence") or EARLIER_AB_CONFIDENCE) for f in fields}) > 1


def interval_heading(fields: Sequence[dict[str, str]]) -> str:
    """The A/B table's interval column: its confidence, when every row has the same one."""
    if mixed_confidence(fields) or not fields:
        return "interval (confidence in each row)"
    return f"{float(fields[0].get('ab_confidence') or EARLIER_AB_CONFIDENCE):.0%} interval"


def interval_cell(f: dict[str, str], mixed: bool) -> str:
    interval = "[" + ", ".join(f"{float(b):.3f}" for b in f.get("ab_interval", "").split()) + "]"
    return f"{interval} at {float(f.get('ab_confidence') or EARLIER_AB_CONFIDENCE):.0%}" if mixed else interval


def ab_header(fields: Sequence[dict[str, str]]) -> list[str]:
    """The A/B table's header and rule, before one :func:`ab_row` per (test, scenario)."""
    return [f"| test | scenario | candidate/reference | {interval_heading(fields)} | process pairs | verdict | "
            "reference | code from |", "| --- | --- | ---: | --- | ---: | --- | --- | --- |"]


def ab_rows(tests: Sequence[TestRecord]) -> list[tuple[TestRecord, str, dict[str, str]]]:
    """Every (test, scenario label, A/B fields) of an A/B run's reports."""
    return [(t, label, fields) for t in tests for label, fields in t.ab.items()]


def ab_row(t: TestRecord, label: str, f: dict[str, str], mixed: bool = False) -> str:
    interval = interval_cell(f, mixed)
    ratio = f"{float(f['ab_ratio']):.3f}x" if f.get("ab_ratio") else "-"
    reference = f.get("reference_commit") or f.get("reference_software", "")
    code = "; ".join(f"{side}: {f[f'{side}_code']}" for side in ("candidate", "reference") if f.get(f"{side}_code"))
    return (f"| `{cell(t.test)}` | {cell(label)} | {ratio} | {interval} | {f.get('ab_process_pairs', '-')} | "
            f"{f.get('ab_verdict', '-')} | {cell(reference)} | {cell(code) or '-'} |")


def headline_md(d: digest.Digest) -> str:
    """The first thing the summary says (and the brief, and a pull request's comment): the verdict line."""
    return f"**{cell(d.verdict_line())}**"


def verdict_markdown(tests: Sequence[TestRecord]) -> list[str]:
    """The top of the summary: one verdict line, then correctness failures, distinct regressions,
    and the inconclusive figures."""
    d = digest.digest(tests)
    scales = digest.unit_scales(d.figures)
    lines = [headline_md(d), ""]
    if d.failures["correctness"]:
        lines += ["### Correctness failures", "",
                  "Failed tests whose message is about accuracy, the loss, NaN / non-finite values, weights or "
                  "parameter equivalence:", ""]
        lines += [f"- `{t.test}`" + (f" on `{t.hardware}`" if t.hardware else "")
                  + f": {cell(t.message) or '(no message)'}"
                  for t in d.failures["correctness"]]
        lines.append("")
    regressions = sorted(d.by_verdict("regression"), key=lambda m: digest.better_change(m) or 0)
    if regressions:
        lines += [f"### {count(len(regressions), 'regression')} beyond the figures' noise (each figure once)", ""]
        lines += _figure_rows_md(regressions, d, scales)
    inconclusive = d.by_verdict("inconclusive")
    if inconclusive:
        lines += [f"### {count(len(inconclusive), 'inconclusive figure')}", "",
                  "Within the figure's gate, but the evidence does not bound the change within the tolerance; "
                  "more recorded runs or a quieter machine would decide them. They fail nothing.", ""]
        lines += _figure_rows_md(inconclusive, d, scales)
    lines += ["± is each figure's gate: the change for the worse its verdict catches 19 times in 20 (its tolerance, "
              "widened by its run-to-run noise); *cannot detect*: not even a halving or a doubling is caught 19 "
              "times in 20.",
              ""]
    return lines


def summary_markdown(tests: Sequence[TestRecord]) -> str:
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
    lines += [cell(skipped_note(f"`{source}`", reasons)) + "\n" for source, reasons in all_skipped(tests).items()]
    correctness = {t.test for t in tests if digest.failure_kind(t) == "correctness"}
    failing = [t for t in tests if t.outcome in ("failed", "error") and t.test not in correctness]
    if failing:
        lines += ["### Failures", ""]
        lines += [f"- `{t.test}`: {cell(t.message) or '(no message)'}" for t in failing]
        lines.append("")
    lines += _skipped_lines(tests)
    ab = ab_rows(tests)
    if ab:
        fields = [f for *_, f in ab]
        lines += ["### A/B against the reference environment", "", *ab_header(fields)]
        lines += [ab_row(t, label, f, mixed_confidence(fields)) for t, label, f in ab]
        lines.append("")
    scales = digest.unit_scales(metrics)
    for t in unique_tests(tests):
        if not t.metrics:
            continue
        hw = f" on `{t.hardware}`" if t.hardware else ""
        lines += [f"### {OUTCOME_MARK.get(t.outcome, '')} `{t.test}`{hw}", ""]
        for label in t.labels:
            if label in t.scenarios:
                lines.append(f"- **{cell(label)}**: {cell(t.scenarios[label])}")
        if t.scenarios:
            lines.append("")
        lines += ["| scenario | metric | observed | unit | baseline | delta | verdict | ± gate | hardware |",
                  "| --- | --- | ---: | --- | ---: | ---: | --- | --- | --- |"]
        for m in t.metrics:
            scale, unit = scales.get((m.metric, m.unit), (1.0, m.unit))  # one unit per metric: MiB/GiB
            observed = _num(m.value / scale) + (f" [{m.interval[0]:.3g}, {m.interval[1]:.3g}]" if m.interval
                                                else f" (IQR {m.iqr / scale:.2g})" if m.iqr else "")
            verdict = VERDICT_MARK.get(m.verdict or "", m.verdict or "recorded")
            baseline = _num(m.baseline / scale) if m.baseline is not None else "-"
            lines.append(f"| {cell(m.label)} | {cell(m.metric)} | {observed} | {cell(unit)} | {baseline} "
                         f"| {_pct(m.delta)} | {verdict} | {gate_md(m)} | `{cell(m.hardware or '-')}` |")
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
            + [f"- {count(n, 'test')}: {cell(reason)} (`{source}`)" for (reason, source), n in reasons.most_common()]
            + [""])
