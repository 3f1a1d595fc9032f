"""What one machine's recorded runs say about run-to-run noise: learned from every figure at once.

A baseline file holds, for each figure, the values of the ``--update-baselines`` runs that recorded it.
Two things move a figure from one run to the next (docs/verdicts.md):

- the **run's common shift**: every throughput of one framework in one run moves together (a VM's
  neighbours, its clock, its page cache), by a few percent on a quiet runner and more on a shared VM;
- the figure's **own noise**, what is left after that shift.

For each (framework, kind) of figure the recorded sessions' shifts are the median change of their
figures against each figure's mean: taken out of one figure, the median of the others, so that a figure's
own change never sets the shift it is judged after; figures of one test that repeat each other run for run
count once. On a GPU a figure whose recorded runs say it does not move with its kind's shifts is judged on
its own runs (the figures bound by the device stay put while those bound by the host move with it), a
choice held to :data:`STILL_LEVEL`. Own spreads of one kind are then moderated towards their kind, as
limma's ``squeezeVar`` does (Smyth 2004): a prior variance and its weight ``d0`` are fitted to the spreads
themselves (the most probable pair under limma's F model and a belief about ``d0`` that holds it where a
few dozen figures say little), so a kind whose figures are alike lends each of them many degrees of
freedom, and one whose figures differ lends few. A figure with one run has the prior alone; a kind with
nothing recorded has a stated prior for its device class (:data:`PRIORS`). A kind whose values stray
further than that t has its degrees of freedom held to its tail (:data:`TAIL_DF`: a CPU's peak memory).
docs/verdicts.md tables how the model falls on runs it did not see (``bench/calibration.py``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

#: Figures judged exactly (events) or by their tolerance alone (accuracies that never moved).
EXACT = "exact"
#: The kind of each checked metric: figures of one kind share a noise model. A GPU's allocator repeats
#: its peak to the byte where the host's peak moves by percents, so the two memories are two kinds.
KIND_OF = {"throughput": "throughput", "speedup": "speedup", "scaling_efficiency": "speedup",
           "peak_host_memory": "memory", "peak_device_memory": "device_memory",
           "accuracy_top1": "accuracy", "accuracy_top5": "accuracy",
           "compile_time": "compile_time", "compile_time_total": "compile_time",
           "instructions_per_step": "instructions"}
#: The run-to-run spread (log scale) a kind has before anything of it is recorded, per device class:
#: this project's measurements on the machine types CI runs on (docs/verdicts.md, the noise model).
PRIORS: dict[str, dict[str, float]] = {
    "cpu": {"throughput": 0.10, "speedup": 0.05, "memory": 0.02, "accuracy": 0.02, "compile_time": 0.10,
            "instructions": 0.002},
    "gpu": {"throughput": 0.01, "speedup": 0.01, "memory": 0.005, "device_memory": 0.005, "accuracy": 0.02,
            "compile_time": 0.05, "instructions": 0.002},
}
#: How far a whole run's shift of one kind moves between runs before any is recorded (log scale).
SHIFT_PRIORS: dict[str, dict[str, float]] = {
    "cpu": {"throughput": 0.06, "speedup": 0.03, "memory": 0.01, "accuracy": 0.01, "compile_time": 0.06,
            "instructions": 0.002},
    "gpu": {"throughput": 0.02, "speedup": 0.01, "memory": 0.005, "device_memory": 0.005, "accuracy": 0.01,
            "compile_time": 0.03, "instructions": 0.002},
}
#: What a stated prior weighs, in degrees of freedom.
PRIOR_DF = 4.0
#: A kind's prior weight d0 is believed log-normal about this centre with this spread (log scale) before
#: its figures are seen: a dozen figures of 2 df each cannot tell d0 = 20 from infinity, nor 1 from 3, and
#: limma's moment estimate swings between them. The two numbers are those under which runs the model did
#: not see fall as it says (docs/verdicts.md, calibration).
D0_CENTRE = 3.0
D0_SPREAD = 0.7
#: Per device class, kinds whose values stray further than their moderated t allows, and the most degrees
#: of freedom their t is given: the most under which every CPU type's held-out values fall as the model says
#: (docs/verdicts.md). A host's peak memory now and then lands 5-10% above its runs (an allocator holding
#: more at the peak), out to where the gates decide; no GPU data says so of its figures.
TAIL_DF: dict[str, dict[str, float]] = {"cpu": {"memory": 5.0}, "gpu": {}}
#: Where the fit stops: a weight of e^20 degrees of freedom is the normal's.
LOG_D0_MAX = 20.0
#: A kind needs this many figures of measured noise before its own prior is fitted (else the stated one).
KIND_FIGURES = 3
#: Kinds that do not depend on when they are measured: their recorded runs, whenever taken, hold all
#: they move between runs (instruction counts repeat to a few hundredths of a percent across sessions).
UNTIMED_KINDS = (EXACT, "instructions")
#: On a GPU a figure that follows its kind's shifts may be taken for one that stays put (strict FP32, bound
#: by the device, beside AMP, partly bound by the host) at most this often: such a figure is then judged
#: without the run's shift, and its next run's shift can fail it, so the choice is held to about one
#: figure's share of a run's level. On a CPU every figure runs on the cores the shift slows.
STILL_LEVEL = 1e-4
#: A GPU figure stays put when its recorded runs are this many times likelier without its kind's shifts
#: (Gaussian likelihoods, each model with its own variance). For a figure that follows them, whatever its
#: noise and the shifts, the chance of odds this large is at most about 0.37 / odds (docs/verdicts.md).
FOLLOW_ODDS = 1 / STILL_LEVEL
#: A shift is taken out of a figure only where this many other figures of its kind measured it: their
#: median, so that a figure's own change never sets the shift it is judged after.
SHIFT_FIGURES = 3


def kind_of(metric: str, unit: str = "") -> str:
    return EXACT if unit == "count" else KIND_OF.get(metric, metric)


def device_class(hardware_key: str) -> str:
    return "gpu" if hardware_key.startswith("gpu") else "cpu"


@dataclass(frozen=True)
class Recorded:
    """One figure's recorded runs: log values and the session each came from."""

    key: str
    metric: str
    framework: str
    kind: str
    logs: tuple[float, ...]
    sessions: tuple[str, ...]

    @property
    def twin(self) -> tuple:
        """What a figure shares with its twins: the figures of one test that repeat each other run for
        run (the compile time and the total compile time of a single compilation) are one figure to
        the model, lest they lend each other degrees of freedom or set each other's shift."""
        return self.key, self.kind, self.logs


@dataclass(frozen=True)
class Spread:
    """A run-to-run spread on the log scale and the degrees of freedom behind it."""

    sd: float
    df: float
    #: Where it comes from, for the report.
    source: str = ""


def sessions_of(runs: Sequence[Mapping]) -> list[str]:
    """The session of each of a figure's runs: its recorded id; a run recorded before ids were written
    is placed by its position from the latest run (figures recorded together share their sessions)."""
    return [str(r["session"]) if r.get("session") else f"#{len(runs) - i}" for i, r in enumerate(runs)]


def own_spread(values: Sequence[float]) -> Spread:
    """The run-to-run spread (log scale) of one figure's recorded values alone."""
    logs = [math.log(v) for v in values if v > 0]
    if len(logs) < 2:
        return Spread(0.0, 0.0)
    return Spread(statistics.stdev(logs), len(logs) - 1.0, "own runs")


def squeeze(variances: Sequence[float], dfs: Sequence[float]) -> tuple[float, float] | None:
    """(prior variance s0^2, prior df d0) from sample variances: the most probable pair given that each
    variance is ``s0^2`` times an F(d, d0) draw (limma's model) and the belief about ``d0``
    (:data:`D0_CENTRE`, :data:`D0_SPREAD`). None with fewer than :data:`KIND_FIGURES` positive variances."""
    pairs = [(v, d) for v, d in zip(variances, dfs) if v > 0 and d > 0]
    if len(pairs) < KIND_FIGURES:
        return None
    logs = [(math.log(v), d) for v, d in pairs]

    def cost(x: Sequence[float]) -> float:
        log_s0, log_d0 = float(x[0]), min(float(x[1]), LOG_D0_MAX)
        d0 = math.exp(log_d0)
        total = (log_d0 - math.log(D0_CENTRE)) ** 2 / (2 * D0_SPREAD ** 2)
        for log_v, d in logs:
            ratio = d * math.exp(log_v - log_s0) / d0
            total -= (math.lgamma((d + d0) / 2) - math.lgamma(d0 / 2) + d / 2 * math.log(d / d0)
                      + (d / 2 - 1) * (log_v - log_s0) - (d + d0) / 2 * math.log1p(ratio) - log_s0)
        return total

    from scipy import optimize  # here, not at the top: a pytest run whose tests never judge must not pay for it

    fitted = optimize.minimize(cost, [statistics.fmean(v for v, _ in logs), math.log(D0_CENTRE)], method="Nelder-Mead",
                               options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 2000})
    return math.exp(float(fitted.x[0])), math.exp(min(float(fitted.x[1]), LOG_D0_MAX))


@dataclass
class MachineNoise:
    """The noise model of one baseline file (one hardware key), built once from its recorded runs."""

    device: str
    figures: dict[tuple[str, str], Recorded]
    #: Per (framework, kind): each recorded session's shift, the median of all its figures.
    shifts: dict[tuple[str, str], dict[str, float]]
    #: Per figure: its own spread after the sessions' shifts (before them, for a figure in ``still``).
    own: dict[tuple[str, str], Spread]
    #: Per (framework, kind, follows its shifts): the prior (s0, d0) for its figures. Figures that stay put
    #: while their kind moves are a population of their own (a GPU's device-bound figures repeat to 0.1%).
    kinds: dict[tuple[str, str, bool], Spread]
    #: Per kind: how far a whole run's shift moves between runs on this machine.
    shift_spreads: dict[str, Spread]
    #: The figures whose recorded runs do not move with their kind's shifts (:data:`FOLLOW_ODDS`).
    still: frozenset[tuple[str, str]] = frozenset()
    #: Per figure: the sessions' shifts taken out of its runs, each the median of the other figures.
    taken: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)

    @classmethod
    def build(cls, hardware_key: str, entries: Mapping[str, Mapping[str, Mapping]]) -> "MachineNoise":
        device = device_class(hardware_key)
        figures: dict[tuple[str, str], Recorded] = {}
        for key, metrics in entries.items():
            for name, rec in metrics.items():
                runs = rec.get("runs") or [{"value": rec["value"], "recorded": rec.get("recorded", "")}]
                if any(float(r["value"]) <= 0 for r in runs):
                    continue
                kind = kind_of(name, rec.get("unit", ""))
                logs = tuple(math.log(float(r["value"])) for r in runs)
                if kind == "accuracy" and len(logs) > 1 and max(logs) == min(logs):
                    kind = EXACT
                figures[(key, name)] = Recorded(key, name, str(rec.get("software", {}).get("framework", "")), kind,
                                                logs, tuple(sessions_of(runs)))
        changes = _session_changes(figures.values())
        shifts = {group: {s: _median_of(c, ()) for s, c in by_session.items()} for group, by_session in changes.items()}
        own, still, taken = {}, set(), {}
        for ident, fig in figures.items():
            by_session = changes.get((fig.framework, fig.kind), {})
            taken[ident] = {s: _median_of(c, (fig.twin,)) for s, c in by_session.items()}
            shifted = _own_spread(fig, taken[ident])
            unshifted = _own_spread(fig, {})
            if device == "gpu" and _stays_put(shifted, unshifted):
                still.add(ident)
            own[ident] = unshifted if ident in still else shifted
        kinds: dict[tuple[str, str, bool], Spread] = {}
        distinct = {f.twin: i for i, f in reversed(list(figures.items()))}
        for group in {(f.framework, f.kind, i not in still) for i, f in figures.items() if f.kind != EXACT}:
            members = [own[i] for i in distinct.values() if own[i].df > 0
                       and (figures[i].framework, figures[i].kind, i not in still) == group]
            kinds[group] = _kind_prior(device, group[1], members)
        return cls(device, figures, shifts, own, kinds, _shift_spreads(device, shifts), frozenset(still), taken)

    def follows(self, key: str, metric: str) -> bool:
        """Whether the figure moves with its kind's shift (else it is judged on its own runs' spread)."""
        return (key, metric) not in self.still

    def unknown_shift(self, framework: str, kind: str, key: str = "", metric: str = "") -> float:
        """The variance a run's unknown shift adds to a figure's change: the shift's spread where the
        figure's own spread was measured net of the sessions' shifts, else none (its runs hold the drift
        when recorded at different times, or it stays put: :meth:`follows`). Counts have no such drift
        (:data:`UNTIMED_KINDS`)."""
        taken = self.taken.get((key, metric), self.shifts.get((framework, kind), {}))
        if kind in UNTIMED_KINDS or not self.follows(key, metric) or not any(taken.values()):
            return 0.0
        return self.shift_spread(kind).sd ** 2

    def shift_spread(self, kind: str) -> Spread:
        """How far a run's shift of this kind moves between runs: recorded here, else the stated prior."""
        if kind == EXACT:
            return Spread(0.0, math.inf, "exact")
        found = self.shift_spreads.get(kind)
        if found is not None:
            return found
        stated = SHIFT_PRIORS[self.device].get(kind, SHIFT_PRIORS[self.device]["throughput"])
        return Spread(stated, PRIOR_DF, f"stated {self.device} prior")

    def kind(self, framework: str, kind: str, follows: bool = True) -> Spread:
        """The prior a figure of this kind starts from: learned from its kind here, else stated."""
        found = self.kinds.get((framework, kind, follows))
        if found is not None:
            return found
        stated = PRIORS[self.device].get(kind, PRIORS[self.device]["throughput"])
        return Spread(stated, PRIOR_DF, f"stated {self.device} prior")

    def spread(self, key: str, metric: str, framework: str, kind: str) -> Spread:
        """A figure's moderated spread: its own runs (after the sessions' shifts) weighed with its kind."""
        if kind == EXACT:
            return Spread(0.0, math.inf, "exact: its recorded runs agree")
        follows = self.follows(key, metric)
        prior = self.kind(framework, kind, follows)
        own = self.own.get((key, metric), Spread(0.0, 0.0))
        if own.df == 0:
            return _tail(self.device, kind, Spread(prior.sd, prior.df, prior.source))
        df = prior.df + own.df
        return _tail(self.device, kind, Spread(math.sqrt((prior.df * prior.sd ** 2 + own.df * own.sd ** 2) / df),
                                               df, f"{own.df:g} df own + {prior.df:.3g} df of its kind"))


def _tail(device: str, kind: str, spread: Spread) -> Spread:
    """The spread with its degrees of freedom held to its kind's tail on this device class (:data:`TAIL_DF`)."""
    cap = TAIL_DF.get(device, {}).get(kind)
    if cap is None or spread.df <= cap:
        return spread
    return Spread(spread.sd, cap, f"{spread.source}; judged on {cap:g} df, its kind's tail")


def _session_changes(figures: Iterable[Recorded]) -> dict[tuple[str, str], dict[str, dict[tuple, float]]]:
    """Per (framework, kind) and session: each figure's change against its mean over its runs, one per twin."""
    changes: dict[tuple[str, str], dict[str, dict[tuple, float]]] = {}
    for fig in figures:
        if fig.kind == EXACT or len(fig.logs) < 2:
            continue
        centre = statistics.fmean(fig.logs)
        for value, session in zip(fig.logs, fig.sessions):
            changes.setdefault((fig.framework, fig.kind), {}).setdefault(session, {})[fig.twin] = value - centre
    return changes


def _median_of(changes: Mapping[tuple, float], leaving: Sequence[tuple]) -> float:
    """The session's shift without the figures ``leaving``: the median of the other figures' changes, zero
    where fewer than :data:`SHIFT_FIGURES` say (the whole session's shift: more than that many)."""
    left = [c for twin, c in changes.items() if twin not in leaving]
    enough = len(left) >= SHIFT_FIGURES + (not leaving)
    return statistics.median(left) if enough else 0.0


def _own_spread(fig: Recorded, shifts: Mapping[str, float]) -> Spread:
    if fig.kind == EXACT or len(fig.logs) < 2:
        return Spread(0.0, 0.0)
    left = [v - shifts.get(s, 0.0) for v, s in zip(fig.logs, fig.sessions)]
    return Spread(statistics.stdev(left), len(left) - 1.0, "own runs")


def _stays_put(shifted: Spread, unshifted: Spread) -> bool:
    """Whether a figure's runs are :data:`FOLLOW_ODDS` times likelier without its sessions' shifts:
    the ratio of the two models' profile likelihoods is (SS with / SS without) ** (df / 2)."""
    if shifted.df == 0 or shifted.sd <= unshifted.sd:
        return False
    if unshifted.sd == 0:
        return True
    return shifted.df * math.log(shifted.sd / unshifted.sd) > math.log(FOLLOW_ODDS)


def _kind_prior(device: str, kind: str, members: Sequence[Spread]) -> Spread:
    fitted = squeeze([m.sd ** 2 for m in members], [m.df for m in members])
    if fitted is not None:
        s0, d0 = fitted
        return Spread(math.sqrt(s0), d0, f"its kind ({len(members)} figures)")
    stated = PRIORS[device].get(kind, PRIORS[device]["throughput"])
    ss = sum(m.df * m.sd ** 2 for m in members) + PRIOR_DF * stated ** 2
    df = sum(m.df for m in members) + PRIOR_DF
    return Spread(math.sqrt(ss / df), df, f"stated {device} prior and {len(members)} figures of its kind")


def _shift_spreads(device: str, shifts: Mapping[tuple[str, str], Mapping[str, float]]) -> dict[str, Spread]:
    """Per kind: how far a run's shift moves, pooled over the machine's frameworks, weighed with the stated prior."""
    sums: dict[str, tuple[float, float]] = {}
    for (_, kind), by_session in shifts.items():
        values = list(by_session.values())
        if len(values) >= 2 and any(values):
            ss, df = sums.get(kind, (0.0, 0.0))
            sums[kind] = (ss + statistics.variance(values) * (len(values) - 1), df + len(values) - 1)
    out = {}
    for kind, (ss, df) in sums.items():
        stated = SHIFT_PRIORS[device].get(kind, SHIFT_PRIORS[device]["throughput"])
        out[kind] = Spread(math.sqrt((ss + PRIOR_DF * stated ** 2) / (df + PRIOR_DF)), df + PRIOR_DF,
                           "recorded sessions' shifts and the stated prior")
    return out
