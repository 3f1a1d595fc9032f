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

import hashlib
import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Protocol, Sequence

from pytest_dlperf.protocol import ERROR, GO, PACED_FLAG, PROGRESS_PREFIX, RESULT, ROUND_PREFIX, read_result
from pytest_dlperf.result import TrainingResult, metric_from
from pytest_dlperf.processes.groups import kill_groups
from pytest_dlperf.processes.runner import ScenarioFailed, _signal_reason, child_environment, tail
from pytest_dlperf.scenario import Scenario, ScenarioError
from pytest_dlperf.judging.stats import PairedRatio, paired_ratio

DEFAULT_PROCESSES = 2
#: Pairs when the caller gives none: as many as the verdict-power trials used (docs/evidence.md, "Verdict power").
DEFAULT_PAIRS = 20


@dataclass(frozen=True)
class Variant:
    """One side of a comparison: a scenario, and the interpreter that runs it (None: this one)."""

    scenario: Scenario
    python: str | None = None
    #: Distinguishes two variants with the same scenario label (the A/B mode's reference).
    name: str = ""
    #: The child's module; another one must end in ``pytest_dlperf.child.train.main`` (bench/ injects slowdowns so).
    module: str = "pytest_dlperf.child.train"

    @property
    def key(self) -> str:
        return self.name or self.scenario.label


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


def williams_rows(variants: int) -> list[list[int]]:
    """Orders of ``variants`` in which each variant sits in each position equally often and follows
    every other variant equally often (a Williams design, balanced for first-order carry-over): the
    round before can slow or speed the next one (caches, clocks, a runtime's spinning threads), and
    here no variant always follows the same one. ``variants`` rows when even, ``2 x variants`` when odd;
    for two variants, AB then BA."""
    first, low, high = [0], 1, variants - 1
    while len(first) < variants:
        first.append(low)
        low += 1
        if len(first) < variants:
            first.append(high)
            high -= 1
    rows = [[(v + shift) % variants for v in first] for shift in range(variants)]
    if variants % 2:
        rows += [row[::-1] for row in rows]
    return rows


def schedule(variants: int, processes: int, pairs: int, first_pair: int = 0) -> list[list[tuple[int, int]]]:
    """Per pair, the (variant, process) rounds in the order they are taken.

    Pair ``i`` is taken by process ``i % processes`` of every variant, in the order of Williams row
    ``(i // processes) % rows`` (:func:`williams_rows`): every process meets every row, and over
    whole cycles each variant and each process sits first and last equally often. ``first_pair``
    continues the cycle from an earlier generation of processes.
    """
    rows = williams_rows(variants)
    plan = []
    for i in range(first_pair, first_pair + pairs):
        row = rows[(i // processes) % len(rows)]
        plan.append([(v, i % processes) for v in row])
    return plan


def build_order(variants: int, processes: int, generation: int = 0) -> list[tuple[int, int]]:
    """The (variant, process) order a group's children are started in: process by process, the
    variants of each in a Williams row (:func:`williams_rows`) that moves on with every process and
    every generation. Built one at a time, the child started first idles longest before its first
    round (its early rounds can come out slow even after the re-warm); in this order no variant's
    children are always the first or the last built: over every ``len(williams_rows(variants))``
    processes, counted across generations, each variant's build
    positions sum to the same (2 variants, 2 processes: A0 B0 B1 A1 in every generation)."""
    rows = williams_rows(variants)
    return [(v, p) for p in range(processes) for v in rows[(p + generation * processes) % len(rows)]]


#: How many children of a CPU group may build and warm up at once, by framework (others: 1).
#: TensorFlow's build is one busy Python thread, so two share the cores well; torch's and MXNet's
#: warm-up steps run OpenMP threads that spin and starve each other (docs/method.md has the timings).
CPU_BUILD_WIDTH = {"tensorflow": 2}


def build_width(scenarios: Sequence[Scenario]) -> int | None:
    """How many of a group's children build at once by default: all (None) when a variant runs on a
    GPU; one when any is compiled (its warm-up is its measured compile time, which must not share the
    CPU with another child's); else the smallest :data:`CPU_BUILD_WIDTH` of the group's frameworks."""
    if any(s.device != "cpu" for s in scenarios):
        return None
    if any(s.compiled for s in scenarios):
        return 1
    return min(CPU_BUILD_WIDTH.get(s.framework, 1) for s in scenarios)


def pair_units(pairs: int, processes: int, per_generation: int) -> list[int]:
    """The process pair that took each pair: pair ``i`` of generation ``i // per_generation`` is taken
    by process ``i % processes`` of every variant (:func:`schedule`)."""
    return [(i // per_generation) * processes + i % processes for i in range(pairs)]


def pairs_for(requested: int, processes: int, generations: int = 1) -> int:
    """``requested`` rounded up to whole blocks (2 x processes) per generation, so every process
    leads and trails equally often."""
    block = 2 * processes * generations
    return max(block, -(-requested // block) * block)


class PacedParty(Protocol):
    """One party of a paired group, as :func:`drive` paces it: a training child (:class:`_PacedChild`) or
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
                    _send(party.control, GO)
                    rounds[v][i] = float(party.read_round(party.timeout)["samples_per_second"])
                    order.append((keys[v], g * processes + p))
                    if settle_seconds:
                        time.sleep(settle_seconds)
            for v, group in enumerate(parties):
                for party in group:
                    _send(party.control, None)  # no more rounds: the process finishes and exits
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


def _send(control: IO[bytes], line: str | None) -> None:
    """Write ``line`` to a paced process's stdin, or close it (None). A process that died meanwhile
    is not this write's to report: the wait that follows names it, with its output."""
    try:
        if line is None:
            control.close()
        else:
            control.write(line.encode())
            control.flush()
    except OSError:
        pass


def relay_rounds(stream: IO[bytes], replies: "queue.Queue[dict | None]", log: IO[bytes], name: str,
                 progress_prefix: str, on_progress: Callable[[str], None] | None) -> None:
    """Read a paced process's output to its end: each round report (``ROUND_PREFIX``) goes to
    ``replies``, every other line to ``log``, progress lines (``progress_prefix``) to ``on_progress``;
    ``None`` on ``replies`` at the end says the process exited."""
    for raw in stream:
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if line.startswith(ROUND_PREFIX):
            try:
                replies.put(json.loads(line[len(ROUND_PREFIX):]))
            except ValueError:
                pass
            continue
        log.write(raw)
        log.flush()
        if on_progress is not None and line.startswith(progress_prefix):
            on_progress(f"{name}: {line[len(progress_prefix):]}")
    replies.put(None)


def child_file_stem(key: str, index: int) -> str:
    """The name of a child's scenario, result and log files: the same length for every variant.

    The paths are the child's argv, and the length of a process's argv and environment moves
    where its stack starts, which alone can shift a CPU figure by a few percent (Mytkowicz et al.,
    "Producing wrong data without doing anything obviously wrong!", ASPLOS 2009): named after the
    label, an unchanged copy read faster than its reference (docs/evidence.md, "Verdict power").
    A digest of the label keeps every variant's argv alike."""
    return f"{hashlib.sha1(key.encode()).hexdigest()[:12]}.p{index:03d}"


class _PacedChild:
    """One persistent training child: started, then driven one round at a time."""

    def __init__(self, variant: Variant, index: int, rounds: int, workdir: Path,
                 on_progress: Callable[[str], None] | None):
        self.variant = variant
        self.index = index
        self.name = f"{variant.key}#{index}"
        scenario = variant.scenario.replace(rounds=rounds)
        stem = child_file_stem(variant.key, index)
        self.scenario_path = workdir / f"{stem}.scenario.json"
        self.result_path = workdir / f"{stem}.result.json"
        self.log_path = workdir / f"{stem}.log"
        self.scenario_path.write_text(scenario.to_json(), encoding="utf-8")
        self.result_path.unlink(missing_ok=True)
        self.scenario = scenario
        self.timeout = scenario.timeout
        command = [*scenario.launch_prefix, variant.python or sys.executable, "-m", variant.module,
                   str(self.scenario_path), str(self.result_path), PACED_FLAG]
        self._log = open(self.log_path, "wb")
        self._log.write(f"# {self.name}: {' '.join(command)}\n".encode())  # which variant this file is
        self._log.flush()
        try:
            self.proc = subprocess.Popen(
                command, env=child_environment(scenario), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._log, start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            raise ScenarioFailed(self.name, "could not start", f"{command[0]}: {exc}", "(no output)") from None
        self.replies: queue.Queue[dict | None] = queue.Queue()
        self._progress_prefix = PROGRESS_PREFIX
        self._on_progress = on_progress
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        relay_rounds(self.proc.stdout, self.replies, self._log, self.name, self._progress_prefix, self._on_progress)

    @property
    def control(self) -> IO[bytes]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    def wait_ready(self, timeout: float) -> None:
        """Wait until the child has built its model and warmed up."""
        self._reply(timeout, f"not built and warmed up within {timeout:g} s")

    def read_round(self, timeout: float) -> dict:
        return self._reply(timeout, f"no round reported within {timeout:g} s; every child was killed")

    def _reply(self, timeout: float, timed_out: str) -> dict:
        """The child's next report; a timeout or its exit becomes a ScenarioFailed with its output."""
        try:
            reply = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise self.failure("timed out", timed_out) from None
        if reply is None:
            raise self.failure(*self._exit_reason())
        return reply

    def _exit_reason(self) -> tuple[str, str]:
        code = self.proc.wait()
        error = self._error()
        if error:
            return error["reason"], f"{error['type']}: {error['message']}"
        return "crashed", _signal_reason(code) if code < 0 else f"exited with status {code} before its round"

    def _error(self) -> dict | None:
        return read_result(self.result_path).get(ERROR)

    def finish(self, timeout: float) -> TrainingResult:
        """Wait for the child (its stdin closed) to write its result and exit."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise self.failure("timed out", f"no result {timeout:g} s after its last round") from None
        self._reader.join(timeout=5)
        payload = read_result(self.result_path)
        if code == 0 and RESULT in payload:
            return TrainingResult.from_dict(payload[RESULT])
        raise self.failure(*self._exit_reason())

    def failure(self, reason: str, detail: str) -> ScenarioFailed:
        self._log.flush()
        traceback = (self._error() or {}).get("traceback", "")  # your step's own traceback, when it raised
        return ScenarioFailed(f"{self.name} ({self.scenario.label})", reason, detail, tail(self.log_path), traceback)

    def kill(self) -> None:
        kill_groups([self.proc], grace=1.0)
        self._reader.join(timeout=2)
        self._log.close()


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
    False starts them all at once. None (the default): :func:`build_width`: on the CPU, where children
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

    def start(v: int, index: int, rounds: int) -> _PacedChild:
        return _PacedChild(group[v], index, rounds, workdir, on_progress)

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
