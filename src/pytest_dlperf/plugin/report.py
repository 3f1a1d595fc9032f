"""The end-of-run summary: one row per checked metric, then the counts.

It brings the judging model (scipy) with it, so the hooks import it only for a run that has something
to sum up; the header's lines are :meth:`pytest_dlperf.plugin.session.DlperfSession.header_lines`."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from pytest_dlperf.judging.baselines import BaselineStore, split_entry_key
from pytest_dlperf import text
from pytest_dlperf.text import short_test
from pytest_dlperf.units import count, readable
from pytest_dlperf.judging.stats import PairedRatio
from pytest_dlperf.judging.verdict import (IMPROVEMENT, INCONCLUSIVE, MISSING, OK, REGRESSION, UPDATED, Verdict,
                                           catch_text)

#: "catches": the change for the worse its gate catches 19 times in 20 in one new run.
HEADER = ("scenario", "metric", "observed", "baseline", "delta", "catches", "verdict")


def _short(nodeid: str, label: str) -> str:
    return f"{short_test(nodeid)}::{label}"


def rows(verdicts: Iterable[Verdict]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for v in verdicts:
        shown, unit = readable(v.observed, v.unit)
        scale = v.observed / shown if shown else 1.0
        observed = f"{shown:.4g} {unit}"
        baseline = f"{v.baseline / scale:.4g} {unit}" if v.baseline is not None else "-"
        delta = f"{v.delta:+.1%}" if v.delta is not None else "-"
        gate = "-" if v.baseline is None else "cannot" if v.gate is None else f"{v.gate:.1%}"
        out.append((_short(v.test, v.label), v.metric, observed, baseline, delta, gate,
                    "no change" if v.status == OK else v.status))
    return out


def table(verdicts: Iterable[Verdict]) -> list[str]:
    return text.table(HEADER, rows(verdicts))


def needing_a_reader(verdicts: Iterable[Verdict]) -> list[Verdict]:
    """The verdicts a quiet run (``-q``) still lists row by row: regressions and improvements (the
    inconclusive ones have their line, :func:`inconclusive_lines`)."""
    return [v for v in verdicts if v.status in (REGRESSION, IMPROVEMENT)]


def counts_line(verdicts: list[Verdict], written: list[Path], unused: Sequence[str] = ()) -> str:
    c = Counter(v.status for v in verdicts)
    compared = len(verdicts) - c[MISSING] - c[UPDATED]
    parts = [f"{count(compared, 'metric')} compared with baselines", count(c[REGRESSION], "regression"),
             count(c[IMPROVEMENT], "improvement"), f"{c[INCONCLUSIVE]} inconclusive",
             count(c[MISSING], "missing baseline")]
    if unused:
        parts.append(count(len(unused), "unused baseline"))
    if c[UPDATED]:
        parts.append(f"{count(c[UPDATED], 'baseline')} written to {', '.join(str(p) for p in written) or '(nothing)'}")
    return ". ".join(parts) + "."


def judged_count(verdicts: Sequence[Verdict]) -> int:
    return sum(1 for v in verdicts if v.status in (REGRESSION, IMPROVEMENT, OK, INCONCLUSIVE))


def unjudged_line(verdicts: Sequence[Verdict], require: bool) -> str:
    """What a run that compared no figure with a baseline says first: it passed nothing a gate could fail."""
    missing = sum(1 for v in verdicts if v.status == MISSING)
    what = (f"{count(missing, 'figure')} without a baseline on this machine" if missing
            else "no test measured a figure (skipped, deselected, or without dlperf.check)")
    outcome = ("--dlperf-require-baselines makes this run fail" if require else
               "record baselines with --update-baselines, or add --dlperf-require-baselines to fail such a run")
    return f"dlperf: NOT JUDGED: no figure compared with a baseline, {what}; {outcome}."


def verdict_line(verdicts: list[Verdict], alpha: float) -> str:
    """The run in one line: what changed beyond its gate, how many figures catch what, at what level."""
    c = Counter(v.status for v in verdicts)
    judged = [v for v in verdicts if v.status in (REGRESSION, IMPROVEMENT, OK, INCONCLUSIVE)]
    if not judged:
        if c[UPDATED]:  # a recording run: nothing was meant to be compared
            return f"dlperf: {count(c[UPDATED], 'figure')} recorded with --update-baselines, none compared."
        return unjudged_line(verdicts, require=False)
    return (f"dlperf: {count(c[REGRESSION], 'regression')}, {count(c[IMPROVEMENT], 'improvement')}, "
            f"{c[INCONCLUSIVE]} inconclusive, {c[OK]} no change, of {count(len(judged), 'figure')} judged; "
            f"{detection_text(judged)} (one-sided, a {alpha:.1%} chance of any false alarm in this run, Bonferroni).")


def detection_text(judged: Sequence[Verdict]) -> str:
    """How many of the judged figures catch a change of what size (for the worse) 19 times in 20."""
    sizes = [v.gate for v in judged if v.unit != "count"]
    exact = sum(1 for v in judged if v.unit == "count")
    cannot = sum(1 for g in sizes if g is None)
    bands = [(0.05, "5%"), (0.10, "10%"), (0.20, "20%"), (0.50, "50%")]
    parts, seen = [], 0
    for limit, name in bands:
        n = sum(1 for g in sizes if g is not None and g <= limit + 1e-12) - seen
        if n:
            parts.append(f"{n} catch {name} or less 19 times in 20" if not seen else f"{n} up to {name}")
        seen += n
    if len(sizes) - cannot - seen:
        parts.append(f"{len(sizes) - cannot - seen} only changes above 50%")
    if cannot:
        parts.append(f"{cannot} cannot detect a halving")
    if exact:
        parts.append(f"{exact} exact counts")
    return ", ".join(parts)


def precision_lines(verdicts: list[Verdict], limit: int = 5) -> list[str]:
    """The figures whose noise widens their gate past the change their tolerance asks for (their bound,
    caught half the time, is past it), and what would tighten them."""
    wide = sorted((v for v in verdicts if v.baseline is not None and v.status != UPDATED and v.unit != "count"
                   and (v.gate_half is None or v.gate_half > v.tolerance + 0.005)),
                  key=lambda v: -(v.gate if v.gate is not None else 10.0))
    if not wide:
        return []
    shown = ", ".join(f"{_short(v.test, v.label)} {v.metric} {catch_text(v.gate, v.gate_half)} "
                      f"(asked {v.tolerance * 100:.2g}%)" for v in wide[:limit])
    more = f" and {len(wide) - limit} more" if len(wide) > limit else ""
    return [f"{count(len(wide), 'figure')} can only detect a change larger than asked, by this machine's "
            f"run-to-run noise: {shown}{more}. More recorded runs (--update-baselines on quiet runs) narrow a "
            "gate; paired runs or A/B mode (--dlperf-reference) decide small changes."]


def inconclusive_lines(verdicts: list[Verdict], limit: int = 5) -> list[str]:
    """The inconclusive figures: the change each could hide (the far end of its interval), widest first."""
    undecided = [v for v in verdicts if v.status == INCONCLUSIVE]
    if not undecided:
        return []

    def reach(v: Verdict) -> float:
        return max((abs(math.log1p(x)) for x in v.interval), default=math.inf) if v.interval else math.inf

    undecided.sort(key=lambda v: -reach(v))
    shown = ", ".join(f"{_short(v.test, v.label)} {v.metric} {_hidden(v)}" for v in undecided[:limit])
    more = f" and {len(undecided) - limit} more" if len(undecided) > limit else ""
    return [f"{count(len(undecided), 'figure')} inconclusive (within the gate, but the evidence does not bound the "
            f"change within the tolerance; they fail nothing): {shown}{more}. More recorded runs or a quieter "
            "machine would decide them."]


def _hidden(v: Verdict) -> str:
    if v.interval is None:
        return "(noise unknown)"
    low, high = v.interval
    return f"could hide {low if abs(math.log1p(low)) > abs(math.log1p(high)) else high:+.1%}"


def missing_lines(verdicts: list[Verdict], store: BaselineStore, profile: str, limit: int = 8) -> list[str]:
    """What has no baseline: one line per machine with none at all, else the scenarios (the first ``limit``)."""
    by_hardware: dict[str, list[str]] = {}
    for v in verdicts:
        if v.status == MISSING:
            names = by_hardware.setdefault(v.hardware or "unknown", [])
            if _short(v.test, v.label) not in names:
                names.append(_short(v.test, v.label))
    lines = []
    for hw, names in sorted(by_hardware.items()):
        if not store.keys(hw, profile):
            lines.append(f"No {profile} baselines for this machine: hardware key {hw}, file {store.path(hw)}.")
            lines += [f"  {key} is other hardware ({_described(facts)}): not compared."
                      for key, facts in store.other_hardware(hw).items() if key.split("-")[0] == hw.split("-")[0]]
            continue
        shown = ", ".join(sorted(names)[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
        lines.append(f"No baseline on {hw} for: {shown}")
    if lines:
        lines.append("Record them with: pytest --update-baselines (then commit baselines/)")
    return lines


def _described(facts: dict) -> str:
    parts = [str(facts[k]) for k in ("cpu_model", "isa_level") if facts.get(k)]
    if facts.get("cpu_family"):
        parts.append(f"family {facts['cpu_family']} model {facts.get('cpu_model_number', '?')}")
    parts += [", ".join(facts["gpus"])] if facts.get("gpus") else []
    return ", ".join(parts) or "no hardware recorded"


def unused_lines(unused: list[str]) -> list[str]:
    if not unused:
        return []
    return ["Baselines of tests that no longer exist (remove them from baselines/): " + ", ".join(unused)]


def pruned_lines(pruned: Sequence[tuple[str, str, str]], limit: int = 5) -> list[str]:
    """Metrics dropped from the entries of tests that were recorded but no longer write them."""
    if not pruned:
        return []
    shown = ", ".join(f"{_short(*split_entry_key(key)[:2])} {metric}" for _, key, metric in pruned[:limit])
    more = f" and {len(pruned) - limit} more" if len(pruned) > limit else ""
    return [f"Dropped from the baselines, as their tests no longer write them: {shown}{more}."]


def ab_lines(outcomes: Sequence[tuple[str, str, PairedRatio, str, dict[str, str]]], reference: str,
             threshold: float, not_compared: Sequence[tuple[str, str, str]] = ()) -> list[str]:
    """A/B mode: the counts first, what the reference is, then one row per scenario: candidate/reference
    throughput with its interval and the process pairs it rests on; then where each side's code came from;
    then the scenarios the reference could not run (``not_compared``: test, label, why)."""
    absent = [f"{_short(test, label)}: not compared: {why}" for test, label, why in not_compared]
    if not outcomes:
        return ([f"No scenario compared with the reference; {count(len(not_compared), 'scenario')} new in the "
                 "candidate, judged against stored baselines only.", reference, "", *absent] if absent else [])
    also = f" {count(len(absent), 'scenario')} new in the candidate, not compared." if absent else ""
    body = [(_short(test, label), f"{r.estimate:.3f}x", f"[{r.low:.3f}, {r.high:.3f}]", str(r.n), decision)
            for test, label, r, decision, _ in outcomes]
    header = ("scenario", "candidate/reference", f"{outcomes[0][2].confidence:.0%} interval", "pairs", "verdict")
    c = Counter(outcome[3] for outcome in outcomes)
    code = [f"{_short(test, label)}: {side}'s code: {where}" for test, label, _, _, sides in outcomes
            for side, where in sides.items()]
    return [f"{count(len(outcomes), 'scenario')} compared with the reference (threshold {threshold:.0%}): "
            f"{c[REGRESSION]} slower (regression). {c[IMPROVEMENT]} faster (improvement). "
            f"{c[OK]} no change. {c[INCONCLUSIVE]} inconclusive.{also}",
            reference, "", *text.table(header, body), *([""] + code if code else []),
            *([""] + absent if absent else [])]
