"""Two versions of your step (or of your plain training loop) in one process, their rounds alternating:
``python -m pytest_dlperf.child.alternate PAIR.json RESULT.json``, where PAIR.json holds
``{"reference": scenario, "candidate": scenario}`` (A/B of a revision, :mod:`pytest_dlperf.processes.alternation`).

A process carries an offset of its own for its whole life (memory layout, thread placement, allocator
state), which no number of rounds averages away; two versions timed in one process share it, so their
ratio keeps only the rounds' noise. Each side runs as a :class:`~pytest_dlperf.child.owncode.Side`: the
project's own modules are in ``sys.modules`` only while that side builds, warms up or times a round, each
imported from its own revision's folders and checked to have come from its tree after the build and at
the end; every other module (the framework, a venv inside the project) is loaded once and shared. Both
sides warm up, then ``scenario.rounds`` pairs of rounds run in
ABBA order (reference first in even pairs, the candidate first in odd ones), so a linear drift falls on
both alike; each round is timed with the device synchronised at its boundaries, its losses checked.
The result holds one :class:`~pytest_dlperf.result.TrainingResult` per side, rounds in pair order.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from typing import Any, Callable

from pytest_dlperf.child import loop as marked
from pytest_dlperf.child import phases
from pytest_dlperf.child.environment import hardware_key, host_record
from pytest_dlperf.child.measure import check_finite, peak_host_memory_bytes, rewarm
from pytest_dlperf.child.owncode import Side
from pytest_dlperf.child.train import LOOP_CORES, STEP_CORES, error_payload, progress
from pytest_dlperf.child.usercode import UserCodeError
from pytest_dlperf.child.rank import exit_after_result
from pytest_dlperf.lifeline import die_with_parent
from pytest_dlperf.protocol import ERROR, EXIT_ERROR, PHASES, RESULT, write_result
from pytest_dlperf.result import HIGHER, LOWER, TrainingResult, metric_from
from pytest_dlperf.scenario import Scenario, ScenarioError

SIDES = ("reference", "candidate")


def timed_round(loop: Any, steps: int, first_step: int) -> tuple[float, float, list[float], dict[str, Any]]:
    """One round of ``steps`` steps: its seconds (device synchronised at both ends), its samples per second,
    its losses (checked) and the loop's own figures for the round (a marked loop's ``data_wait``, ...)."""
    drain = getattr(loop, "drain_prefetched", None)
    if drain is not None:  # the other side's round was this loop's idle spell: its loader refilled meanwhile
        drain()
    begin = getattr(loop, "begin_round", None)
    if begin is not None:
        begin()
    loop.sync()
    start = time.perf_counter()
    handles = [loop.step() for _ in range(steps)]
    loop.sync()
    seconds = time.perf_counter() - start
    losses = loop.losses_to_floats(handles)
    check_finite(losses, first_step, loop)
    figures = loop.round_figures() if hasattr(loop, "round_figures") else {}
    return seconds, loop.samples_per_step * steps / seconds, losses, figures


def kind_of(scenarios: dict[str, Scenario]) -> str:
    """``"step"`` or ``"loop"``: what both sides are; anything else cannot alternate in one process."""
    reference, candidate = scenarios["reference"], scenarios["candidate"]
    for kind in ("step", "loop"):
        if getattr(reference, kind) and getattr(candidate, kind) and reference.framework == candidate.framework:
            return kind
    raise ScenarioError("alternating in one process needs two step= or two loop= scenarios of one framework")


def alternate(scenarios: dict[str, Scenario], say: Callable[[str], None] = progress) -> dict[str, TrainingResult]:
    """Build and warm up each side (reference first), rewarm each in the first pair's order, then time ``rounds``
    ABBA pairs of rounds.

    A ``loop=`` side's loop runs in a thread of its own (:class:`~pytest_dlperf.child.loop.LoopThread`),
    started inside its side and advanced only while its side is in place; a trainer's callback asked
    for there ends the run with :class:`~pytest_dlperf.child.loop.TrainerInOneProcess`.
    """
    kind = kind_of(scenarios)
    candidate = scenarios["candidate"]
    environment = host_record()
    environment["hardware_key"] = hardware_key(candidate.device)
    phases.enter(phases.IMPORT)
    core = importlib.import_module((LOOP_CORES if kind == "loop" else STEP_CORES)[candidate.framework])
    own = {side: Side(scenarios[side], f"the {side} side") for side in SIDES}
    loops: dict[str, Any] = {}
    threads: dict[str, marked.LoopThread] = {}
    losses: dict[str, list[float]] = {side: [] for side in SIDES}
    try:
        for side in SIDES:
            phases.enter(phases.BUILD)
            with _as(own[side]), _new_in_candidate(side, own[side]):
                if kind == "loop":
                    loops[side] = core.build(scenarios[side], alternating=True)
                    threads[side] = marked.LoopThread(loops[side])
                    threads[side].start()  # your setup runs up to its first mark while this side is in place
                else:
                    loops[side] = core.build(scenarios[side])
                phases.enter(phases.WARMUP)
                handles = [loops[side].step() for _ in range(scenarios[side].warmup_steps)]
                loops[side].sync()
                losses[side] += loops[side].losses_to_floats(handles)
            own[side].check()
            check_finite(losses[side], 0, loops[side])
        seconds: dict[str, list[float]] = {side: [] for side in SIDES}
        throughput: dict[str, list[float]] = {side: [] for side in SIDES}
        figures: dict[str, dict[str, tuple[list[float], str, str]]] = {side: {} for side in SIDES}
        steps = candidate.steps_per_round
        # A process's first timed round runs slow (after the harness's checks), and ABBA gives it to the
        # reference in every process, a bias toward the candidate: each side's rewarm takes it out of the
        # timing, as a paced child's does (docs/evidence.md, "A/A of an alternating process").
        phases.enter(phases.WARMUP)
        for side in SIDES:
            with _as(own[side]):
                rewarm(loops[side], scenarios[side])
        phases.enter(phases.MEASURE)
        for pair in range(candidate.rounds):
            for side in (SIDES if pair % 2 == 0 else SIDES[::-1]):
                with _as(own[side]):
                    elapsed, rate, values, extra = timed_round(loops[side], steps, len(losses[side]))
                seconds[side].append(elapsed)
                throughput[side].append(rate)
                losses[side] += values
                for name, (value, unit, direction) in extra.items():
                    figures[side].setdefault(name, ([], unit, direction))[0].append(value)
            ratio = throughput["candidate"][-1] / throughput["reference"][-1]
            say(f"pair {pair + 1}/{candidate.rounds}: candidate/reference {ratio:.3f}x")
        for side in SIDES:  # your loop ends (steps.done) inside its side; what it raised then is yours
            if side in threads:
                with _as(own[side]):
                    threads[side].stop()
    except BaseException as exc:
        for thread in threads.values():  # unwind your loops; the child reports this error
            thread.steps.finish(exc)
        raise
    for side in SIDES:  # what a side imported while it ran (a lazy import) is held to its tree too
        own[side].check()
    phases.enter(phases.FINISH)
    results = {}
    for side in SIDES:
        loop, scenario = loops[side], scenarios[side]
        metrics = {"throughput": metric_from("throughput", throughput[side], "samples/s", HIGHER),
                   "step_time": metric_from("step_time", [t / steps for t in seconds[side]], "s", LOWER)}
        for name, (values, unit, direction) in figures[side].items():
            metrics[name] = metric_from(name, values, unit, direction)
        details: dict[str, Any] = {"round_seconds": seconds[side]}
        if kind == "loop":
            marked.throughput_unit(loop.steps, metrics)
            details["user_loop"] = marked.describe(loop)
        else:
            loop.user_step.throughput_unit(metrics)
            details["user_step"] = {"step": scenario.step, "samples_per_step": loop.samples_per_step}
        details.update({"alternation": {"pairs": candidate.rounds, "order": "ABBA", "peak_host_memory_both_sides":
                                        peak_host_memory_bytes()},
                        "own_code": own[side].origins()})
        env = {**environment, **core.describe(scenario, loop)}
        results[side] = TrainingResult(scenario, metrics, losses[side], env, details)
    return results


class NotInReference(Exception):
    """The reference revision has no module or function the candidate's setting names: nothing to compare."""


class _new_in_candidate:
    """The reference side's build: a ``module:function`` its revision does not hold becomes
    :class:`NotInReference` (the step or loop is new in the candidate), not an error in your code."""

    def __init__(self, side: str, own: Side):
        self.side, self.own = side, own

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self.side == "reference" and isinstance(exc, UserCodeError) and exc.absent:
            raise NotInReference(f"{self.own.where} has no {exc.absent}") from exc


class _as:
    """Run the block as ``side``: its project modules in place, then set aside; your code's errors name the side."""

    def __init__(self, side: Side):
        self.side = side

    def __enter__(self) -> Side:
        self.side.enter()
        return self.side

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        self.side.leave()
        if exc is None:
            return
        cause = marked.loop_error(exc)  # a mark that never came: your loop's own exception
        if isinstance(cause, UserCodeError) and not str(cause).startswith(self.side.name):
            raise UserCodeError(f"{self.side.name} ({self.side.where}): {cause}", cause.traceback,
                                cause.absent) from cause
        if cause is not exc:
            raise cause


def main(argv: list[str]) -> int:
    die_with_parent()
    pair_path, result_path = argv
    try:
        with open(pair_path, encoding="utf-8") as fh:
            data = json.load(fh)
        results = alternate({side: Scenario.from_dict(data[side]) for side in SIDES})
    except BaseException as exc:  # report everything, including KeyboardInterrupt, then exit non-zero
        traceback.print_exc()
        write_result(result_path, {ERROR: error_payload(exc), PHASES: phases.PROCESS.report()})
        return EXIT_ERROR
    write_result(result_path, {RESULT: {side: results[side].to_dict() for side in SIDES},
                               PHASES: phases.PROCESS.report()})
    progress("done")
    return 0


if __name__ == "__main__":
    exit_after_result(main(sys.argv[1:]))
