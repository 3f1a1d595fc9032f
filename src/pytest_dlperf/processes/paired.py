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

The child is the ordinary training worker (``pytest_dlperf.child.worker``) started with
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
#: Pairs when the caller gives none: the measurement behind this design used 20 (ratio 0.99-1.04 A/A).
DEFAULT_PAIRS = 20


@dataclass(frozen=True)
class Variant:
    """One side of a comparison: a scenario, and the interpreter that runs it (None: this one)."""

    scenario: Scenario
    python: str | None = None
    #: Distinguishes two variants with the same scenario label (the A/B mode's reference).
    name: str = ""
    #: The child's module; another one must end in ``pytest_dlperf.child.worker.main`` (bench/ injects slowdowns so).
    module: str = "pytest_dlperf.child.worker"

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


class Paced(Protocol):
    """What the schedule drives: a training child (:class:`_PacedChild`), or a whole distributed
    job (:class:`pytest_dlperf.processes.distributed.paced_job.PacedJob`). Each call raises its own failure, naming
    what failed, with its output; ``kill`` must be safe to call at any time, more than once."""

    #: Seconds allowed for the warm-up, each round, and the finish.
    timeout: float

    def ready(self, timeout: float) -> None: ...

    def round(self, timeout: float) -> dict: ...

    def finish(self, timeout: float) -> Any: ...

    def kill(self) -> None: ...


@dataclass
class Interleaved:
    """What :func:`interleave` measured: per variant, each pair's round throughput; the order the
    rounds were taken in, as (variant, process); and what each process's ``finish`` returned."""

    throughput: list[list[float]]
    order: list[tuple[int, int]]
    finished: list[list[Any]]


def interleave(starters: Sequence[Sequence[Callable[[], Paced]]], pairs: int, settle_seconds: float = 0.0,
               build_width: int | None = None, first_pair: int = 0) -> Interleaved:
    """Start ``starters[variant][process]`` in :func:`build_order`, at most ``build_width`` of them
    building and warming up at once (None: all at once), wait until all are warm, take ``pairs`` pairs
    of rounds in :func:`schedule`'s order, finish every process; every started process is killed
    whatever happens.

    ``pairs`` should be whole blocks (:func:`pairs_for`); each process takes ``pairs / processes`` rounds.
    ``first_pair`` continues :func:`schedule`'s cycle (and the build order's) where an earlier
    generation left it.
    """
    processes = len(starters[0])
    started: list[list[Paced | None]] = [[None] * processes for _ in starters]
    generation = first_pair // pairs if pairs else 0
    try:
        warming: list[Paced] = []
        for v, p in build_order(len(starters), processes, generation):
            paced = started[v][p] = starters[v][p]()  # listed at once, so a failed start kills the others
            warming.append(paced)
            if build_width is not None and len(warming) >= build_width:
                oldest = warming.pop(0)
                oldest.ready(oldest.timeout)
        for paced in warming:  # no round while any process still warms up
            paced.ready(paced.timeout)
        groups: list[list[Paced]] = [[paced for paced in group if paced is not None] for group in started]
        throughput: list[list[float]] = [[0.0] * pairs for _ in groups]
        order: list[tuple[int, int]] = []
        for i, pair in enumerate(schedule(len(groups), processes, pairs, first_pair)):
            for v, p in pair:
                paced = groups[v][p]
                throughput[v][i] = float(paced.round(paced.timeout)["samples_per_second"])
                order.append((v, p))
                if settle_seconds:
                    time.sleep(settle_seconds)
        finished = [[paced.finish(paced.timeout) for paced in group] for group in groups]
    finally:
        for group in started:
            for started_child in group:
                if started_child is not None:
                    started_child.kill()
    return Interleaved(throughput, order, finished)


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

    def ready(self, timeout: float) -> None:
        """Wait until the child has built its model and warmed up."""
        self._reply(timeout, f"not built and warmed up within {timeout:g} s")

    def round(self, timeout: float) -> dict:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(GO.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died; the reply queue says so
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
        """Close stdin, wait for the child to write its result and exit."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except OSError:
            pass
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
    warming up at once oversubscribe the cores (each runs its own OpenMP pool; 8 ResNet-18 children on
    2 cores took 82 s built at once, 38 s one at a time), one at a time, or two for TensorFlow,
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
    if len(group) < 2:
        raise ScenarioError(f"a paired run needs at least 2 variants, got {len(group)}")
    keys = [v.key for v in group]
    if len(set(keys)) != len(keys):
        raise ScenarioError(f"paired variants need distinct labels (or names), got {keys}")
    if processes < 1:
        raise ScenarioError(f"processes={processes!r} must be >= 1 per variant")
    if generations < 1:
        raise ScenarioError(f"generations={generations!r} must be >= 1")
    pairs = pairs_for(pairs, processes, generations)
    width = build_width([v.scenario for v in group]) if build_one_at_a_time is None else (
        1 if build_one_at_a_time else None)
    workdir = Path(tempfile.mkdtemp(prefix="paired-", dir=workdir))
    per_generation = pairs // generations
    rounds_each = per_generation // processes

    def starter(variant: Variant, index: int) -> Callable[[], _PacedChild]:
        return lambda: _PacedChild(variant, index, rounds_each, workdir, on_progress)

    throughput: list[list[float]] = [[] for _ in group]
    per_variant: list[list[TrainingResult]] = [[] for _ in group]
    order: list[tuple[str, int]] = []
    def ratios_now() -> dict[str, PairedRatio]:
        units = pair_units(len(throughput[0]), processes, per_generation)
        return {keys[v]: paired_ratio(throughput[v], throughput[0], confidence, units)
                for v in range(1, len(group))}

    g = 0
    while g < generations or (decided is not None and g < (max_generations or generations)
                              and not decided(ratios_now())):
        first = g * processes
        run = interleave([[starter(v, first + p) for p in range(processes)] for v in group], per_generation,
                         settle_seconds, width, first_pair=g * per_generation)
        for v in range(len(group)):
            throughput[v] += run.throughput[v]
            per_variant[v] += run.finished[v]
        order += [(keys[v], first + p) for v, p in run.order]
        g += 1
    results = {keys[v]: merge(per_variant[v], throughput[v], processes * g)
               for v in range(len(group))}
    return PairedResult(keys[0], results, ratios_now(), order)


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
