"""The timing harness every training core shares.

A core builds a :class:`TrainingLoop` (model, optimizer, data, one ``step()``), this
module times it the way a benchmark engineer would: warm-up excluded, the device
synchronised at every timing boundary, several rounds, per-step times, the loss of
every step checked for NaN/inf once per round (not per step, which would stall an
asynchronous device).

A loop that compiles (``compiles = True``: torch.compile, XLA, a hybridized MXNet block)
gets its warm-up timed too: ``compile_time`` is the first step, synchronised (tracing,
compiling and running it once), plus any tracing the core did before it
(``compile_setup_seconds``); ``compile_time_total`` is the whole warm-up's excess over
the same number of steady-state steps (median timed step), so recompilations, autotuning
and CUDA-graph recording in later warm-up steps count too. Both are lower-is-better and
assume the warm-up reaches steady state. The loop's ``compile_events()`` (graph breaks,
recompilations: reasons, one per event) become ``count`` metrics, the reasons go to the details.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from typing import Any, Callable, Protocol, Sequence

from pytest_dlperf import instructions
from pytest_dlperf.child import phases
from pytest_dlperf.protocol import ROUND_PREFIX
from pytest_dlperf.result import HIGHER, LOWER, Metric, metric_from
from pytest_dlperf.scenario import Scenario
from pytest_dlperf.sample_stats import median


#: What a paced child prints, as one line, after each timed round: the JSON of the round.


class Pacer(Protocol):
    """Decides when each timed round starts, and hears how it went (the paired runner's child).

    ``rewarms``: the first round's turn begins with untimed steps, so a child that idled long
    before its first turn (built first while the group's others were built one at a time)
    does not time that round cold.
    """

    rewarms: bool

    def wait(self) -> None: ...

    def report(self, seconds: float, samples_per_second: float) -> None: ...

    def done(self) -> None: ...


class StdinPacer:
    """A round starts when the parent writes a line to stdin; each round is reported on stdout.

    Between rounds the process waits in ``readline``: its threads idle while another
    child takes its round (see :mod:`pytest_dlperf.processes.paired`).
    """

    #: Measured (VP trials, quiet 2-core VM, children built one at a time): the first pair of each
    #: set of children deviated 2.3x as much as the others (mean |log ratio - median| 0.219 vs 0.096).
    rewarms = True

    def __init__(self) -> None:
        self._ready_sent = False

    def wait(self) -> None:
        if not self._ready_sent:  # built and warmed up: the runner starts no round until every child is
            print(ROUND_PREFIX + json.dumps({"ready": True}), flush=True)
            self._ready_sent = True
        if not sys.stdin.readline():
            raise RuntimeError("the paired runner closed this child's input before its last round")

    def done(self) -> None:
        """After the last round, stay idle until the runner has every child's rounds (it closes stdin)."""
        sys.stdin.read()

    def report(self, seconds: float, samples_per_second: float) -> None:
        print(ROUND_PREFIX + json.dumps({"seconds": seconds, "samples_per_second": samples_per_second}), flush=True)


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or infinite; names the step and the loss scale."""


class TrainingLoop(Protocol):
    """What a framework core provides to be measured."""

    #: Samples consumed by one ``step()`` (the global batch of this process).
    samples_per_step: int

    def step(self) -> Any:
        """One optimizer step; returns the loss as a framework value, without syncing."""

    def sync(self) -> None:
        """Block until all queued device work is done."""

    def losses_to_floats(self, handles: Sequence[Any]) -> list[float]:
        """Turn the values ``step()`` returned into Python floats (after ``sync``)."""


_installed_pacer: Pacer | None = None


def pace_rounds(pacer: Pacer | None) -> None:
    """Make every :func:`measure` in this process wait for ``pacer`` before each timed round.

    The training child installs it (``--paced``), so the framework cores need no change to be paired.
    """
    global _installed_pacer
    _installed_pacer = pacer


def paced() -> bool:
    """Whether this process's timed rounds wait for a pacer (one side of a paired run)."""
    return _installed_pacer is not None


def _optional(loop: Any, name: str, default: Any = None) -> Any:
    attr = getattr(loop, name, None)
    return attr() if callable(attr) else default


def peak_host_memory_bytes(status: str | None = None) -> int:
    """Peak resident memory this process allocated: its peak resident set less the file-backed pages
    (mapped libraries) resident at the end.

    How many pages of a mapped library count as resident depends on how the page cache holds the
    file (large folios right after ``pip install`` wrote it, small pages once re-read), not on the
    training, so they are left out. Linux reads ``/proc/self/status`` (``status``: its text, for
    tests); elsewhere the peak resident set size (macOS reports bytes).
    """
    if status is None:
        try:
            with open("/proc/self/status", encoding="ascii") as fh:
                status = fh.read()
        except OSError:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return int(peak if sys.platform == "darwin" else peak * 1024)
    kib = {}
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "RssFile"):
            kib[name] = int(value.split()[0])
    return max(kib["VmHWM"] - kib.get("RssFile", 0), 0) * 1024


def check_finite(losses: Sequence[float], first_step: int, loop: Any) -> None:
    for offset, value in enumerate(losses):
        if not math.isfinite(value):
            scale = _optional(loop, "loss_scale")
            scale_text = f", loss scale {scale:g}" if scale is not None else ", no loss scaling"
            raise NonFiniteLoss(
                f"loss became {value} at step {first_step + offset}{scale_text}; "
                "lower the learning rate, or use dynamic loss scaling for fp16"
            )


def measure(
    loop: TrainingLoop,
    scenario: Scenario,
    progress: Callable[[str], None] | None = None,
    pacer: Pacer | None = None,
) -> tuple[dict[str, Metric], list[float], dict[str, Any]]:
    """Time ``loop`` as ``scenario`` asks; return (metrics, loss curve, details).

    With a ``pacer`` (or one installed by :func:`pace_rounds`), each timed round waits for it.
    """
    pacer = pacer or _installed_pacer
    losses: list[float] = []
    compiles = bool(getattr(loop, "compiles", False))
    loop.sync()
    phases.enter(phases.WARMUP)
    warm_start = time.perf_counter()
    handles = []
    first_step = None
    for i in range(scenario.warmup_steps):
        handles.append(loop.step())
        if compiles and i == 0:
            loop.sync()
            first_step = time.perf_counter() - warm_start
    loop.sync()
    warmup_seconds = time.perf_counter() - warm_start
    if handles:
        warm = loop.losses_to_floats(handles)
        check_finite(warm, 0, loop)
        losses += warm
    if scenario.measure == "instructions":
        counted = count_instructions(loop, scenario, losses, progress)
        phases.enter(phases.FINISH)
        return counted

    round_throughput: list[float] = []
    round_seconds: list[float] = []
    step_seconds: list[float] = []
    event_timer = getattr(loop, "step_timer", None)
    synchronous = bool(getattr(loop, "synchronous", False))
    # a loop that measures more per round (a marked loop's data wait): begin_round(), then round_figures()
    begin_round = getattr(loop, "begin_round", None)
    round_figures = getattr(loop, "round_figures", None)
    extra: dict[str, tuple[list[float], str, str]] = {}
    phases.enter(phases.WAIT if pacer is not None else phases.MEASURE)
    for r in range(scenario.rounds):
        handles = []
        marks = []
        if event_timer is not None:
            event_timer.start_round()
        loop.sync()
        if pacer is not None:
            pacer.wait()
            if r == 0 and pacer.rewarms and rewarm_steps(scenario):
                phases.enter(phases.WARMUP)
                rewarm(loop, scenario)
            if r == 0:
                phases.enter(phases.MEASURE)
            drain = getattr(loop, "drain_prefetched", None)
            if drain is not None:  # what a loader made while this child idled is not this round's work
                drain()
        if begin_round is not None:
            begin_round()
        start = time.perf_counter()
        for _ in range(scenario.steps_per_round):
            handles.append(loop.step())
            if event_timer is not None:
                event_timer.mark()
            else:
                marks.append(time.perf_counter())
        loop.sync()
        elapsed = time.perf_counter() - start
        round_seconds.append(elapsed)
        round_throughput.append(loop.samples_per_step * scenario.steps_per_round / elapsed)
        if round_figures is not None:
            for name, (value, unit, direction) in round_figures().items():
                extra.setdefault(name, ([], unit, direction))[0].append(value)
        if pacer is not None:
            pacer.report(elapsed, round_throughput[-1])
        if event_timer is not None:
            step_seconds += event_timer.step_seconds()
        elif synchronous:
            step_seconds += [b - a for a, b in zip([start] + marks[:-1], marks)]
        values = loop.losses_to_floats(handles)
        check_finite(values, len(losses), loop)
        losses += values
        if progress is not None:
            progress(
                f"round {r + 1}/{scenario.rounds}: {round_throughput[-1]:.1f} samples/s, "
                f"loss {values[-1]:.4f}, step {len(losses)}/{scenario.total_steps}"
            )

    if pacer is not None:
        phases.enter(phases.WAIT)
        pacer.done()
    phases.enter(phases.FINISH)
    metrics = {
        "throughput": metric_from("throughput", round_throughput, "samples/s", HIGHER),
        "step_time": metric_from(
            "step_time",
            step_seconds or [t / scenario.steps_per_round for t in round_seconds],
            "s",
            LOWER,
        ),
        "peak_host_memory": metric_from("peak_host_memory", [peak_host_memory_bytes()], "bytes", LOWER),
    }
    for name, (values, unit, direction) in extra.items():
        metrics[name] = metric_from(name, values, unit, direction)
    device_peak = _optional(loop, "peak_device_memory")
    if device_peak:
        metrics["peak_device_memory"] = metric_from("peak_device_memory", [device_peak], "bytes", LOWER)
    flops = getattr(loop, "flops_per_step", None)
    if flops:
        tflops = [flops * scenario.steps_per_round / t / 1e12 for t in round_seconds]
        metrics["achieved_tflops"] = metric_from("achieved_tflops", tflops, "TFLOP/s", HIGHER)
    details: dict[str, Any] = {}
    if compiles:
        compile_metrics(loop, metrics, details, first_step, warmup_seconds, scenario.warmup_steps,
                        median(round_seconds) / scenario.steps_per_round)
    details.update({
        "round_seconds": round_seconds,
        "step_time_source": (
            "device events" if event_timer is not None else "host clock" if synchronous else "round mean"
        ),
        "skipped_steps": _optional(loop, "skipped_steps", 0),
        "final_loss_scale": _optional(loop, "loss_scale"),
        "flops_per_step": flops,
    })
    return metrics, losses, details


def count_instructions(loop: TrainingLoop, scenario: Scenario, losses: list[float],
                       progress: Callable[[str], None] | None = None,
                       ) -> tuple[dict[str, Metric], list[float], dict[str, Any]]:
    """The timed rounds counted instead of timed (:mod:`pytest_dlperf.instructions`): each round's
    instructions over its steps, synchronisation included, the loss conversion and checks outside."""
    phases.enter(phases.COUNT)
    counter = instructions.Counter.from_environment()
    per_step: list[float] = []
    for r in range(scenario.rounds):
        loop.sync()
        counter.start()
        handles = [loop.step() for _ in range(scenario.steps_per_round)]
        loop.sync()
        per_step.append(counter.stop() / scenario.steps_per_round)
        values = loop.losses_to_floats(handles)
        check_finite(values, len(losses), loop)
        losses += values
        if progress is not None:
            progress(f"round {r + 1}/{scenario.rounds}: {per_step[-1]:,.0f} instructions per step, "
                     f"loss {values[-1]:.4f}, step {len(losses)}/{scenario.total_steps}")
    metrics = {instructions.METRIC: metric_from(instructions.METRIC, per_step, instructions.UNIT, LOWER)}
    return metrics, losses, {"counted_by": "callgrind (Valgrind), one compute thread, PYTHONHASHSEED=0",
                             "skipped_steps": _optional(loop, "skipped_steps", 0)}


#: The count metrics a compiling loop's ``compile_events()`` may report.
COMPILE_EVENTS = ("graph_breaks", "recompilations")


def steps_needed(scenario: Scenario) -> int:
    """How many steps :func:`measure` takes in this process: warm-up, timed rounds, and a paced child's rewarm."""
    pacer = _installed_pacer
    rewarm = rewarm_steps(scenario) if pacer is not None and pacer.rewarms and scenario.measure == "time" else 0
    return scenario.total_steps + rewarm


def rewarm_steps(scenario: Scenario) -> int:
    """Untimed steps before a paced child's first timed round: its warm-up again, at most a round's worth."""
    return min(scenario.warmup_steps, scenario.steps_per_round)


def rewarm(loop: TrainingLoop, scenario: Scenario) -> None:
    """Untimed steps, after the group's build and before this child's first timed round (their
    losses are checked, not kept: the loss curve stays warm-up plus timed rounds)."""
    handles = [loop.step() for _ in range(rewarm_steps(scenario))]
    loop.sync()
    check_finite(loop.losses_to_floats(handles), 0, loop)


def compile_metrics(loop: Any, metrics: dict[str, Metric], details: dict[str, Any], first_step: float | None,
                    warmup_seconds: float, warmup_steps: int, steady_step: float) -> None:
    """Add the compile figures of a compiling loop (see the module's docstring) to ``metrics``/``details``.

    With a warm compile cache (inductor's, reported by ``compile_cache()``) the times are
    recorded as ``compile_time_warm_cache``/``compile_time_total_warm_cache``: a figure of
    a process that reused another's compilation is never held against a cold compile's.
    """
    if first_step is None:
        return  # no warm-up step: the scenario validation refuses this for compiled scenarios
    setup = float(getattr(loop, "compile_setup_seconds", 0.0) or 0.0)
    cache = _optional(loop, "compile_cache")
    suffix = "_warm_cache" if cache == "warm" else ""
    total = max(first_step, warmup_seconds - warmup_steps * steady_step) + setup
    metrics["compile_time" + suffix] = metric_from("compile_time" + suffix, [first_step + setup], "s", LOWER)
    metrics["compile_time_total" + suffix] = metric_from("compile_time_total" + suffix, [total], "s", LOWER)
    details["compile"] = {"first_step_seconds": first_step, "setup_seconds": setup,
                          "warmup_seconds": warmup_seconds, "warmup_steps": warmup_steps,
                          "steady_step_seconds": steady_step, "cache": cache,
                          **(_optional(loop, "compile_notes") or {})}
    events = _optional(loop, "compile_events")
    if events is None:
        details["compile"]["events"] = "not reported by this framework"
        return
    for name in COMPILE_EVENTS:
        if name in events:
            metrics[name] = metric_from(name, [len(events[name])], "count", LOWER)
            details[f"{name}_reasons"] = list(events[name])
