"""Paired, interleaved measurement: variants of a scenario take timed rounds in turn.

A figure compared with a stored baseline carries the machine's drift between the two
runs (docs/method.md); two variants measured back to back, round after round, share it.
Each variant runs in ``processes`` persistent children (so one process's memory-layout
luck cannot decide) that build and warm up once, then wait.
The parent asks one child at a time for one timed round, in a balanced order: pair
``i`` uses process ``i % processes`` of every variant, the variants in the order of a
Williams design's rows (two variants: A0 B0 A1 B1 | B0 A0 B1 A1 | ...), so each variant
and each process sits first and last equally often and no variant always follows the
same one. With ``generations`` the pairs are split between successive sets of fresh
processes, for more processes' luck than fit in memory at once. Pair ``i``'s ratio is a
variant's round throughput over the reference variant's (the first) in that same pair;
the ratios go to :func:`pytest_dlperf.judging.stats.paired_ratio`.

The child is the ordinary training child (``pytest_dlperf.child.train``) started with
``--paced``: :func:`pytest_dlperf.child.measure.measure` then waits for a ``go`` line on stdin
before each timed round and reports the round on stdout behind ``ROUND_PREFIX``, and the
child finishes (evaluation, result file) as it would alone. A variant may name another
interpreter (``python``): the A/B mode runs the same scenario under a reference
environment that needs only the framework (``PYTHONPATH`` makes this package importable).

Every child of the group is resident at once: on a GPU their memory must fit together.
A crash, hang or NaN in any child fails the group with that child's output, and every
child's process group is killed whatever happens.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Protocol, Sequence

from pytest_dlperf.protocol import GO
from pytest_dlperf.result import TrainingResult, metric_from
from pytest_dlperf.processes.paced_child import PacedChild, Variant, send_line
from pytest_dlperf.processes.schedule import build_order, build_width, pair_units, pairs_for, schedule
from pytest_dlperf.scenario import Scenario, ScenarioError
from pytest_dlperf.judging.stats import PairedRatio, paired_ratio

DEFAULT_PROCESSES = 2
#: Pairs when the caller gives none: as many as the verdict-power trials used (docs/evidence.md, "Verdict power").
DEFAULT_PAIRS = 20


@dataclass
class PairedResult:
    """Each variant's merged result, and every other variant's paired ratio over the first."""

    reference: str
    results: dict[str, TrainingResult]
    ratios: dict[str, PairedRatio]
    #: The order the rounds were taken in: (variant key, process index) per round.
    schedule: list[tuple[str, int]] = field(default_factory=list)

    def ratio(self, key: str) -> PairedRatio:
        try:
            return self.ratios[key]
        except KeyError:
            raise KeyError(f"no paired ratio for {key!r}; variants: {sorted(self.ratios)}") from None


class PacedParty(Protocol):
    """One party of a paired group, as :func:`drive` paces it: a training child (:class:`PacedChild`) or
    a whole distributed job (:class:`pytest_dlperf.processes.distributed.paced_job.PacedJob`). The driver
    writes ``go`` on ``control`` for each round and closes it after the last round; each wait raises the
    party's own failure, naming what failed, with its output; ``kill`` must be safe at any time, more
    than once."""

    #: Seconds allowed for the warm-up, each round, and the finish.
    timeout: float

    @property
    def control(self) -> IO[bytes]:
        """The paced process's stdin."""
        ...

    def wait_ready(self, timeout: float) -> None: ...

    def read_round(self, timeout: float) -> dict: ...

    def finish(self, timeout: float) -> Any: ...

    def kill(self) -> None: ...


@dataclass
class Rounds:
    """What :func:`drive` measured, by variant key: each pair's round throughput (pair order, every
    generation), each process's ``finish`` (process order), and every other variant's paired ratio over
    the first; the rounds' order as (key, process index counted across generations); how many
    generations of processes took them."""

    reference: str
    ratios: dict[str, PairedRatio]
    schedule: list[tuple[str, int]]
    throughput: dict[str, list[float]]
    results: dict[str, list[Any]]
    generations: int

    def ratio(self, key: str) -> PairedRatio:
        try:
            return self.ratios[key]
        except KeyError:
            raise KeyError(f"no paired ratio for {key!r}; variants: {sorted(self.ratios)}") from None


def check_group(keys: Sequence[str], processes: int, generations: int = 1) -> None:
    """Raise ScenarioError (a ValueError) for a group :func:`drive` cannot pace."""
    if len(keys) < 2:
        raise ScenarioError(f"a paired run needs at least 2 variants, got {len(keys)}")
    if len(set(keys)) != len(keys):
        raise ScenarioError(f"paired variants need distinct labels (or names), got {list(keys)}")
    if processes < 1:
        raise ScenarioError(f"processes={processes!r} must be >= 1 per variant")
    if generations < 1:
        raise ScenarioError(f"generations={generations!r} must be >= 1")


def drive(keys: Sequence[str], start: Callable[[int, int, int], PacedParty], pairs: int, processes: int,
          generations: int = 1, settle_seconds: float = 0.0, build_width: int | None = None,
          confidence: float = 0.95, decided: Callable[[dict[str, PairedRatio]], bool] | None = None,
          max_generations: int | None = None) -> Rounds:
    """Pace the variants ``keys`` (the first is the reference) over generations of fresh processes.

    ``start(variant, index, rounds)`` starts process ``index`` (counted across generations) of a variant,
    to take ``rounds`` timed rounds. ``pairs`` is rounded up to whole blocks (:func:`pairs_for`) and split
    between ``generations``; while ``decided(ratios)`` is false after them, one more generation runs, up
    to ``max_generations`` in all. Each generation: start its processes in :func:`build_order`, at most
    ``build_width`` building and warming up at once (None: all), wait until all are warm, take its pairs
    of rounds in :func:`schedule`'s order (``settle_seconds`` after each round), finish every process;
    every started process is killed whatever happens. Pair ``i``'s ratio is a variant's round throughput
    over the reference's in that pair (:func:`pytest_dlperf.judging.stats.paired_ratio`).
    """
    check_group(keys, processes, generations)
    pairs = pairs_for(pairs, processes, generations)
    per_generation = pairs // generations
    throughput: dict[str, list[float]] = {key: [] for key in keys}
    results: dict[str, list[Any]] = {key: [] for key in keys}
    order: list[tuple[str, int]] = []

    def ratios_now() -> dict[str, PairedRatio]:
        units = pair_units(len(throughput[keys[0]]), processes, per_generation)
        return {key: paired_ratio(throughput[key], throughput[keys[0]], confidence, units) for key in keys[1:]}

    g = 0
    while g < generations or (decided is not None and g < (max_generations or generations)
                              and not decided(ratios_now())):
        started: list[list[PacedParty | None]] = [[None] * processes for _ in keys]
        try:
            warming: list[PacedParty] = []
            for v, p in build_order(len(keys), processes, g):
                # listed at once, so a failed start kills the others
                party = started[v][p] = start(v, g * processes + p, per_generation // processes)
                warming.append(party)
                if build_width is not None and len(warming) >= build_width:
                    oldest = warming.pop(0)
                    oldest.wait_ready(oldest.timeout)
            for party in warming:  # no round while any process still warms up
                party.wait_ready(party.timeout)
            parties = [[party for party in group if party is not None] for group in started]
            rounds: list[list[float]] = [[0.0] * per_generation for _ in keys]
            for i, pair in enumerate(schedule(len(keys), processes, per_generation, g * per_generation)):
                for v, p in pair:
                    party = parties[v][p]
                    send_line(party.control, GO)
                    rounds[v][i] = float(party.read_round(party.timeout)["samples_per_second"])
                    order.append((keys[v], g * processes + p))
                    if settle_seconds:
                        time.sleep(settle_seconds)
            for v, group in enumerate(parties):
                for party in group:
                    send_line(party.control, None)  # no more rounds: the process finishes and exits
                    results[keys[v]].append(party.finish(party.timeout))
        finally:
            for maybe_started in started:
                for started_party in maybe_started:
                    if started_party is not None:
                        started_party.kill()
        for v, key in enumerate(keys):
            throughput[key] += rounds[v]
        g += 1
    return Rounds(keys[0], ratios_now(), order, throughput, results, g)


def run_paired(
    variants: Sequence[Variant | Scenario],
    pairs: int = DEFAULT_PAIRS,
    processes: int = DEFAULT_PROCESSES,
    workdir: Path | None = None,
    on_progress: Callable[[str], None] | None = None,
    settle_seconds: float = 0.0,
    confidence: float = 0.95,
    build_one_at_a_time: bool | None = None,
    generations: int = 1,
    decided: Callable[[dict[str, PairedRatio]], bool] | None = None,
    max_generations: int | None = None,
) -> PairedResult:
    """Measure ``variants`` interleaved; the first is the reference every ratio divides by.

    ``pairs`` is rounded up to whole blocks of ``2 * processes`` per generation. ``settle_seconds``
    pauses between rounds, for runtimes whose idle threads keep spinning after a round (Intel
    OpenMP's 200 ms KMP_BLOCKTIME) and would otherwise slow the next child.
    ``build_one_at_a_time`` starts each child only when the previous one is built and warmed
    up, so what a child measures while warming up (a compile time) is not shared with the others;
    False starts them all at once. None (the default): :func:`.schedule.build_width`: on the CPU, where children
    warming up at once oversubscribe the cores (each runs its own OpenMP pool; docs/evidence.md has the
    timings), one at a time, or two for TensorFlow,
    whose build is single-threaded; at once on GPUs.
    ``generations``: the pairs are split into this many consecutive parts, each taken by fresh
    processes (the previous ones finished first), so ``processes x generations`` processes per
    variant contribute their own luck (memory layout, thread placement: a few percent for a
    process's whole life) while only ``processes`` per variant are resident at once.
    ``decided``/``max_generations``: while ``decided(ratios)`` is false after the planned generations,
    one more generation runs, up to ``max_generations`` in all: an inconclusive comparison takes more
    process pairs (the interval's unit), a clear one stops at its plan.
    """
    group = [v if isinstance(v, Variant) else Variant(v) for v in variants]
    keys = [v.key for v in group]
    check_group(keys, processes, generations)  # before a folder is made for a group that cannot run
    width = build_width([v.scenario for v in group]) if build_one_at_a_time is None else (
        1 if build_one_at_a_time else None)
    workdir = Path(tempfile.mkdtemp(prefix="paired-", dir=workdir))

    def start(v: int, index: int, rounds: int) -> PacedChild:
        return PacedChild(group[v], index, rounds, workdir, on_progress)

    run = drive(keys, start, pairs, processes, generations, settle_seconds, width, confidence, decided,
                max_generations)
    results = {key: merge(run.results[key], run.throughput[key], processes * run.generations) for key in keys}
    return PairedResult(run.reference, results, run.ratios, run.schedule)


def merge(results: Sequence[TrainingResult], pair_throughput: Sequence[float | None], processes: int) -> TrainingResult:
    """One variant's processes as one result: throughput per round in pair order, the first process's
    loss curve and environment, the largest memory peaks, every step time."""
    first = results[0]
    metrics = dict(first.metrics)
    metrics["throughput"] = metric_from("throughput", [t for t in pair_throughput if t is not None],
                                        first.throughput.unit, first.throughput.direction)
    for name, metric in first.metrics.items():
        if name == "throughput":
            continue
        samples = [s for r in results if name in r.metrics for s in r.metrics[name].samples]
        if "memory" in name:
            samples = [max(samples)]
        metrics[name] = metric_from(name, samples, metric.unit, metric.direction)
    details = dict(first.details)
    details["paired"] = {"processes": processes, "rounds": len(metrics["throughput"].samples),
                         "process_losses": [r.losses for r in results]}
    scenario = first.scenario.replace(rounds=len(metrics["throughput"].samples))
    return TrainingResult(scenario, metrics, list(first.losses), dict(first.environment), details)
