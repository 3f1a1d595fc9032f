"""A/B of two versions of your step, alternating in one process at a time (:mod:`pytest_dlperf.child.alternate`).

Each process times both sides round by round, so the offset a process carries falls on both and its
ratio keeps only the rounds' noise; what differs between processes (a layout that suits one version
better) is measured by taking fresh processes: the process is the unit of the interval
(:func:`pytest_dlperf.judging.stats.paired_ratio` with ``units``). Processes run one after the other
until ``decided`` says the ratio is decided, at least ``min_processes`` and at most ``max_processes``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pytest_dlperf.child.alternate import SIDES
from pytest_dlperf.judging.stats import PairedRatio, paired_ratio
from pytest_dlperf.processes.paired import merge
from pytest_dlperf.processes.runner import child_environment, child_result, run_child
from pytest_dlperf.result import TrainingResult
from pytest_dlperf.scenario import Scenario

MODULE = "pytest_dlperf.child.alternate"


@dataclass
class Alternated:
    """Each side's processes merged (rounds in pair order), and the candidate/reference ratio."""

    results: dict[str, TrainingResult]
    ratio: PairedRatio


def one_process(reference: Scenario, candidate: Scenario, workdir: Path,
                on_progress: Callable[[str], None] | None = None) -> dict[str, TrainingResult]:
    """One child alternating both sides; a crash, error or hang raises :class:`ScenarioFailed`."""
    workdir.mkdir(parents=True, exist_ok=True)
    pair_path, result_path, log_path = (workdir / "pair.json", workdir / "result.json", workdir / "alternate.log")
    pair_path.write_text(json.dumps({"reference": reference.to_dict(), "candidate": candidate.to_dict()}),
                         encoding="utf-8")
    result_path.unlink(missing_ok=True)
    command = [*candidate.launch_prefix, sys.executable, "-m", MODULE, str(pair_path), str(result_path)]
    code = run_child(command, child_environment(candidate), log_path, candidate.timeout, candidate.label, on_progress)
    payload = child_result(result_path, code, candidate.label, log_path)
    return {side: TrainingResult.from_dict(payload[side]) for side in SIDES}


def run_alternated(reference: Scenario, candidate: Scenario, workdir: Path, *, min_processes: int,
                   max_processes: int, decided: Callable[[PairedRatio], bool],
                   on_progress: Callable[[str], None] | None = None, confidence: float = 0.95) -> Alternated:
    """Fresh alternating processes, one at a time, until the ratio (its interval at ``confidence``) is decided
    or ``max_processes`` ran."""
    if not 2 <= min_processes <= max_processes:
        raise ValueError(f"need 2 <= min_processes <= max_processes, got {min_processes} and {max_processes}")
    runs: dict[str, list[TrainingResult]] = {side: [] for side in SIDES}
    ratio = None
    for index in range(max_processes):
        done = one_process(reference, candidate, workdir / f"process-{index}", on_progress)
        for side in SIDES:
            runs[side].append(done[side])
        ratio = paired_ratio(_throughputs(runs["candidate"]), _throughputs(runs["reference"]), confidence,
                             units=[i for i, r in enumerate(runs["candidate"]) for _ in r.throughput.samples])
        if index + 1 >= min_processes and decided(ratio):
            break
    assert ratio is not None
    results = {side: merge(runs[side], _throughputs(runs[side]), len(runs[side])) for side in SIDES}
    return Alternated(results, ratio)


def _throughputs(results: list[TrainingResult]) -> list[float]:
    return [t for r in results for t in r.throughput.samples]
