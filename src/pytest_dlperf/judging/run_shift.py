"""The run as a whole: each kind's common shift, judged, and every figure judged again after it.

A test's own check cannot know how the whole run moved, so its gate counts the shift's spread too
(:func:`pytest_dlperf.judging.judge.judge`). Once every test has run, the shift of each (machine,
framework, kind) with more than :data:`SHIFT_FIGURES` figures is the median change of its figures. It is
a judged figure of its own, gated by how far shifts moved between recorded runs
(:meth:`MachineNoise.shift_spread`), and each figure is judged again on what is left after the shift of
the others (their median: a figure's own change never sets the shift it is judged after, so a shift
cannot erase it), with that shift's estimation error as its shared variance.

"No change" after the shift needs the same evidence as at a test's check: the figure's interval within
its tolerance. A figure judged after a shift that is not itself bounded within its tolerance (an
inconclusive shift, or one beyond its gate) is not "no change": the shift it was judged after may be a
real change of every figure, so its interval is the residual's widened by the shift's.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from typing import Callable, Sequence

from pytest_dlperf.judging.gates import FAMILY_ALPHA, Gate, family_alpha, shift_tolerance
from pytest_dlperf.judging.noise import EXACT, SHIFT_FIGURES, MachineNoise, device_class
from pytest_dlperf.judging.outcomes import INCONCLUSIVE, MISSING, OK, REGRESSION, UPDATED
from pytest_dlperf.judging.verdict import COUNT, Verdict, catch_text, gate_fields, log_change, outcome

#: The metric name of a kind's shift verdict: ``<kind> shift``.
SHIFT = "shift"


def judgeable(v: Verdict) -> bool:
    return (v.status not in (MISSING, UPDATED) and v.unit != COUNT and v.kind != EXACT
            and v.baseline not in (None, 0) and v.observed > 0 and v.noise is not None)


def judge_run(verdicts: Sequence[Verdict], noise: Callable[[str], MachineNoise], test: str,
              family: float = FAMILY_ALPHA) -> tuple[list[Verdict], list[Verdict]]:
    """(each group's shift verdict, every verdict judged again after the shift of the others in its group)."""
    groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, v in enumerate(verdicts):
        if judgeable(v):
            groups[(v.hardware, v.framework, v.kind)].append(i)
    twins = {g: {_twin(verdicts[i]): verdicts[i] for i in members} for g, members in groups.items()}
    shifted = [g for g in groups if len(twins[g]) > SHIFT_FIGURES]
    figures = sum(len(groups[g]) for g in groups)
    residual_alpha = family_alpha(figures, "residual", family)
    shift_alpha = family_alpha(len(shifted), "shift", family)
    out = list(verdicts)
    shifts = []
    for group in sorted(groups):
        judged_shift = None
        if group in shifted:
            members = list(twins[group].values())
            centre, error = _median_shift(members)
            judged_shift = _shift_verdict(test, group, members, centre, error, noise(group[0]), shift_alpha)
            shifts.append(judged_shift)
        for i in groups[group]:
            v = verdicts[i]
            if not v.follows_shift:  # its recorded runs do not move with the kind's shifts: judged on them alone
                out[i] = _again(v, None, 0.0, residual_alpha)
            elif group in shifted:  # after the shift of the others: its own change never sets it
                others = [w for twin, w in twins[group].items() if twin != _twin(v)]
                centre, error = _median_shift(others)
                out[i] = _again(v, centre, error, residual_alpha, judged_shift)
            else:  # too few figures to tell a shift from their own changes: judged as at their checks
                out[i] = _again(v, None, noise(group[0]).unknown_shift(group[1], group[2]), residual_alpha)
    return shifts, out


def _twin(v: Verdict) -> tuple:
    """Figures of one test that read alike, run and baseline (the compile time and the total compile
    time of a single compilation), are one figure to the shift."""
    return v.test, v.label, v.observed, v.baseline


def _median_shift(members: Sequence[Verdict]) -> tuple[float, float]:
    """(the median change of ``members``, its estimation error as a variance: the median's
    ``pi/2 * mean(s^2 (1 + 1/k)) / n``)."""
    centre = statistics.median(log_change(v.observed, v.baseline or 1.0) for v in members)
    error = math.pi / 2 * statistics.fmean((v.noise or 0.0) ** 2 * (1 + 1 / max(v.runs, 1))
                                           for v in members) / len(members)
    return centre, error


def _shift_verdict(test: str, group: tuple[str, str, str], members: Sequence[Verdict], centre: float,
                   error: float, noise: MachineNoise, alpha: float) -> Verdict:
    hardware, framework, kind = group
    direction = statistics.mode(v.direction for v in members)
    spread = noise.shift_spread(kind)
    tolerance = shift_tolerance(kind, device_class(hardware), min(v.tolerance for v in members))
    gate = Gate(tolerance, 0.0, spread.df, 1, alpha, spread.sd ** 2 + error)
    worse = -centre if direction == "higher" else centre
    return Verdict(test=test, label=framework or "unknown", metric=f"{kind} {SHIFT}", unit="ratio",
                   direction=direction, observed=math.exp(centre), baseline=1.0, tolerance=gate.tolerance,
                   status=outcome(worse, gate), p_value=gate.p_value(worse), hardware=hardware,
                   **gate_fields(gate, centre, direction), noise=spread.sd, runs=len(members), alpha=alpha,
                   kind=kind, framework=framework, df=spread.df,
                   detail=f"the median of {len(members)} {kind} figures")


def _again(v: Verdict, shift: float | None, shared: float, alpha: float,
           judged_shift: Verdict | None = None) -> Verdict:
    """``v`` judged again after ``shift`` (log scale; None: none taken out), its gate's shared variance
    ``shared``; ``judged_shift``: the verdict on that shift."""
    gate = Gate(v.tolerance, v.noise or 0.0, v.df, v.runs, alpha, shared)
    change = log_change(v.observed, v.baseline or 1.0) - (shift or 0.0)
    worse = -change if v.direction == "higher" else change
    status = outcome(worse, gate)
    fields = gate_fields(gate, change, v.direction)
    if v.status == REGRESSION:  # the test already failed on it
        status = REGRESSION
    elif status == INCONCLUSIVE and v.status == OK:  # bounded at its check, the shift's spread counted there
        status = OK
    elif status == OK and judged_shift is not None and judged_shift.status != OK:
        # no change after a shift that may itself be a change: the change it could hide is both together
        status = INCONCLUSIVE
        if fields["interval"] is not None and judged_shift.interval is not None:
            fields["interval"] = tuple(math.expm1(math.log1p(a) + math.log1p(b))
                                       for a, b in zip(fields["interval"], judged_shift.interval))
    return dataclasses.replace(v, status=status, p_value=gate.p_value(worse), alpha=alpha, shift=shift, **fields)


def failure_message(shifts: Sequence[Verdict], before: Sequence[Verdict], after: Sequence[Verdict]) -> str:
    """What the run as a whole shows: shifts beyond their gates, then figures that regressed after them.
    With several findings the first line names them all, since reports and the brief keep only that line."""
    moved = [s for s in shifts if s.status == REGRESSION]
    regressed = [new for old, new in zip(before, after) if new.status == REGRESSION and old.status != REGRESSION]
    lines = [f"every {s.framework or 'unknown'} {s.kind} figure moved {s.observed - 1:+.1%} together on "
             f"{s.hardware} ({s.detail}; the run's shift {catch_text(s.gate, s.gate_half)}): this machine or "
             "this framework changed" for s in moved]
    lines += [f"after the run's shift: {v.test}: {v.line()}" for v in regressed]
    if len(lines) < 2:
        return "".join(lines)
    named = ([f"every {s.framework or 'unknown'} {s.kind} figure {s.observed - 1:+.1%}" for s in moved]
             + [f"{v.test} {v.label} {v.metric} {v.delta:+.1%}" for v in regressed])
    return "\n".join([f"the run failed on {len(lines)} findings: " + "; ".join(named), *lines])
