"""Two versions of your step in one process, their rounds alternating: ``python -m pytest_dlperf.child.alternate
PAIR.json RESULT.json``, where PAIR.json holds ``{"reference": scenario, "candidate": scenario}`` (A/B of a
revision, :mod:`pytest_dlperf.processes.alternation`).

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

from pytest_dlperf.child import phases
from pytest_dlperf.child.environment import hardware_key, host_record
from pytest_dlperf.child.measure import check_finite, peak_host_memory_bytes
from pytest_dlperf.child.owncode import Side
from pytest_dlperf.child.train import STEP_CORES, error_payload, progress
from pytest_dlperf.child.usercode import UserCodeError
from pytest_dlperf.child.rank import exit_after_result
from pytest_dlperf.lifeline import die_with_parent
from pytest_dlperf.protocol import ERROR, EXIT_ERROR, PHASES, RESULT, write_result
from pytest_dlperf.result import HIGHER, LOWER, TrainingResult, metric_from
from pytest_dlperf.scenario import Scenario, ScenarioError

SIDES = ("reference", "candidate")


def timed_round(loop: Any, steps: int, first_step: int) -> tuple[float, list[float]]:
    """One round of ``steps`` steps: its seconds (device synchronised at both ends) and its losses, checked."""
    loop.sync()
    start = time.perf_counter()
    handles = [loop.step() for _ in range(steps)]
    loop.sync()
    seconds = time.perf_counter() - start
    losses = loop.losses_to_floats(handles)
    check_finite(losses, first_step, loop)
    return seconds, losses


def alternate(scenarios: dict[str, Scenario], say: Callable[[str], None] = progress) -> dict[str, TrainingResult]:
    """Build both sides (reference first), warm each up, then time ``rounds`` ABBA pairs of rounds."""
    reference, candidate = scenarios["reference"], scenarios["candidate"]
    if reference.framework != candidate.framework or not (reference.step and candidate.step):
        raise ScenarioError("alternating in one process needs two step= scenarios of one framework")
    environment = host_record()
    environment["hardware_key"] = hardware_key(candidate.device)
    phases.enter(phases.IMPORT)
    core = importlib.import_module(STEP_CORES[candidate.framework])
    phases.enter(phases.BUILD)
    own = {side: Side(scenarios[side], f"the {side} side") for side in SIDES}
    loops: dict[str, Any] = {}
    for side in SIDES:
        with _as(own[side]):
            loops[side] = core.build(scenarios[side])
        own[side].check()
    losses: dict[str, list[float]] = {side: [] for side in SIDES}
    phases.enter(phases.WARMUP)
    for side in SIDES:
        with _as(own[side]):
            handles = [loops[side].step() for _ in range(scenarios[side].warmup_steps)]
            loops[side].sync()
            losses[side] += loops[side].losses_to_floats(handles)
        check_finite(losses[side], 0, loops[side])
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    steps = candidate.steps_per_round
    phases.enter(phases.MEASURE)
    for pair in range(candidate.rounds):
        for side in (SIDES if pair % 2 == 0 else SIDES[::-1]):
            with _as(own[side]):
                elapsed, values = timed_round(loops[side], steps, len(losses[side]))
            seconds[side].append(elapsed)
            losses[side] += values
        ratio = seconds["reference"][-1] / seconds["candidate"][-1]
        say(f"pair {pair + 1}/{candidate.rounds}: candidate/reference {ratio:.3f}x")
    for side in SIDES:  # what a side imported while it ran (a lazy import) is held to its tree too
        own[side].check()
    phases.enter(phases.FINISH)
    results = {}
    for side in SIDES:
        loop, scenario = loops[side], scenarios[side]
        user_step = loop.user_step
        metrics = {"throughput": metric_from("throughput", [loop.samples_per_step * steps / t for t in seconds[side]],
                                             "samples/s", HIGHER),
                   "step_time": metric_from("step_time", [t / steps for t in seconds[side]], "s", LOWER)}
        user_step.throughput_unit(metrics)
        env = {**environment, **core.describe(scenario, loop)}
        details = {"round_seconds": seconds[side], "user_step": {"step": scenario.step,
                                                                  "samples_per_step": loop.samples_per_step},
                   "alternation": {"pairs": candidate.rounds, "order": "ABBA", "peak_host_memory_both_sides":
                                   peak_host_memory_bytes()},
                   "own_code": own[side].origins()}
        results[side] = TrainingResult(scenario, metrics, losses[side], env, details)
    return results


class _as:
    """Run the block as ``side``: its project modules in place, then set aside; your code's errors name the side."""

    def __init__(self, side: Side):
        self.side = side

    def __enter__(self) -> Side:
        self.side.enter()
        return self.side

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        self.side.leave()
        if isinstance(exc, UserCodeError) and not str(exc).startswith(self.side.name):
            raise UserCodeError(f"{self.side.name} ({self.side.where}): {exc}", exc.traceback) from exc


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
