"""What one machine's recorded runs say about run-to-run noise: learned from every figure at once.

A baseline file holds, for each figure, the values of the ``--update-baselines`` runs that recorded it.
Two things move a figure from one run to the next (docs/verdicts.md):

- the **run's common shift**: every throughput of one framework in one run moves together (a VM's
  neighbours, its clock, its page cache), by a few percent on a quiet runner and more on a shared VM;
- the figure's **own noise**, what is left after that shift.

For each (framework, kind) of figure the recorded sessions' shifts are the median change of their
figures against each figure's mean; the figure's own spread is measured after removing them, unless
on a GPU its recorded runs say it does not move with them (:data:`FOLLOW_ODDS`: the figures bound by
the device stay put while those bound by the host move with it). Own spreads of one kind are then
moderated towards their kind, as limma's ``squeezeVar`` does (Smyth 2004): a prior variance and its
weight ``d0`` are estimated from the spreads themselves, so a kind whose figures are alike lends each
of them many degrees of freedom, and one whose figures differ lends few. A figure with one run has the
prior alone; a kind with nothing recorded has a stated prior for its device class (:data:`PRIORS`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from scipy import optimize, special

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
#: Kinds that do not depend on when they are measured: their recorded runs, whenever taken, hold all
#: they move between runs (instruction counts repeat to a few hundredths of a percent across sessions).
UNTIMED_KINDS = (EXACT, "instructions")
#: On a GPU a figure follows its kind's session shifts unless its recorded runs are this many times
#: likelier without them (Gaussian likelihoods, each model with its own variance): strict FP32, bound by
#: the device, stays put while AMP, partly bound by the host, moves with it. On a CPU every figure runs
#: on the cores the shift slows, and the same test let chance agreements out (docs/verdicts.md).
FOLLOW_ODDS = 20.0
#: A kind needs this many figures in a session before its median is a shift and not one figure's change.
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
    """(prior variance s0^2, prior df d0) from sample variances, limma's ``fitFDist`` by moments on
    the log scale; ``d0`` is infinite when the variances spread no more than sampling alone explains.
    None with fewer than three positive variances."""
    pairs = [(v, d) for v, d in zip(variances, dfs) if v > 0 and d > 0]
    if len(pairs) < 3:
        return None
    e = [math.log(v) - special.digamma(d / 2) + math.log(d / 2) for v, d in pairs]
    mean = statistics.fmean(e)
    excess = statistics.variance(e) - statistics.fmean(special.polygamma(1, d / 2) for _, d in pairs)
    if excess <= 0:
        return math.exp(mean), math.inf
    d0 = 2 * _trigamma_inverse(excess)
    return math.exp(mean + special.digamma(d0 / 2) - math.log(d0 / 2)), d0


def _trigamma_inverse(y: float) -> float:
    return float(optimize.brentq(lambda x: float(special.polygamma(1, x)) - y, 1e-8, 1e8))


@dataclass
class MachineNoise:
    """The noise model of one baseline file (one hardware key), built once from its recorded runs."""

    device: str
    figures: dict[tuple[str, str], Recorded]
    #: Per (framework, kind): each recorded session's shift.
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
        shifts = _session_shifts(figures.values())
        own, still = {}, set()
        for ident, fig in figures.items():
            shifted = _own_spread(fig, shifts.get((fig.framework, fig.kind), {}))
            unshifted = _own_spread(fig, {})
            if device == "gpu" and _stays_put(shifted, unshifted):
                still.add(ident)
            own[ident] = unshifted if ident in still else shifted
        kinds: dict[tuple[str, str, bool], Spread] = {}
        for group in {(f.framework, f.kind, i not in still) for i, f in figures.items() if f.kind != EXACT}:
            members = [own[i] for i, f in figures.items()
                       if (f.framework, f.kind, i not in still) == group and own[i].df > 0]
            kinds[group] = _kind_prior(device, group[1], members)
        return cls(device, figures, shifts, own, kinds, _shift_spreads(device, shifts), frozenset(still))

    def follows(self, key: str, metric: str) -> bool:
        """Whether the figure moves with its kind's shift (else it is judged on its own runs' spread)."""
        return (key, metric) not in self.still

    def unknown_shift(self, framework: str, kind: str, key: str = "", metric: str = "") -> float:
        """The variance a run's unknown shift adds to a figure's change: the shift's spread where the
        figure's own spread was measured net of the sessions' shifts, else none (its runs hold the drift
        when recorded at different times, or it stays put: :meth:`follows`). Counts have no such drift
        (:data:`UNTIMED_KINDS`)."""
        if (kind in UNTIMED_KINDS or not self.follows(key, metric)
                or not any(self.shifts.get((framework, kind), {}).values())):
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
            return Spread(prior.sd, prior.df, prior.source)
        if math.isinf(prior.df):
            pooled = self._pooled_df(framework, kind, follows)
            return Spread(prior.sd, own.df + pooled, prior.source + " (figures alike)")
        df = prior.df + own.df
        return Spread(math.sqrt((prior.df * prior.sd ** 2 + own.df * own.sd ** 2) / df), df,
                      f"{own.df:g} df own + {prior.df:.3g} df of its kind")

    def _pooled_df(self, framework: str, kind: str, follows: bool) -> float:
        return sum(s.df for i, s in self.own.items()
                   if (self.figures[i].framework, self.figures[i].kind, i not in self.still)
                   == (framework, kind, follows))


def _session_shifts(figures: Iterable[Recorded]) -> dict[tuple[str, str], dict[str, float]]:
    """Per (framework, kind): each session's median change of the figures it recorded, against each
    figure's mean over its runs (zero where fewer than :data:`SHIFT_FIGURES` figures say)."""
    changes: dict[tuple[str, str], dict[str, list[float]]] = {}
    for fig in figures:
        if fig.kind == EXACT or len(fig.logs) < 2:
            continue
        centre = statistics.fmean(fig.logs)
        for value, session in zip(fig.logs, fig.sessions):
            changes.setdefault((fig.framework, fig.kind), {}).setdefault(session, []).append(value - centre)
    return {group: {s: statistics.median(c) if len(c) >= SHIFT_FIGURES else 0.0 for s, c in by_session.items()}
            for group, by_session in changes.items()}


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
