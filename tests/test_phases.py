"""The child's phase timer (pytest_dlperf.child.phases) and where the harness marks the phases: the
suite's cost profile reads them (pytest_dlperf.cost, tests/test_cost.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dlperf.child import phases
from pytest_dlperf.child.measure import measure
from pytest_dlperf.protocol import ERROR, PHASES, read_result
from pytest_dlperf.scenario import Scenario

TESTS = Path(__file__).resolve().parent
PACKAGE_ROOT = Path(phases.__file__).resolve().parents[2]


class Clock:
    """A clock the test moves: ``now`` seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_phase_ends_where_the_next_begins_and_is_placed_on_the_wall_clock() -> None:
    clock = Clock()
    timer = phases.Phases(clock=clock, wall=lambda: 1000.0)
    timer.enter(phases.IMPORT)
    clock.now = 2.5
    timer.enter(phases.BUILD)
    clock.now = 3.0
    timer.enter(phases.BUILD)  # entered again: a span of its own, the same phase
    clock.now = 3.5
    timer.enter(phases.WARMUP)
    timer.enter(phases.MEASURE)  # an empty warm-up leaves no span
    clock.now = 7.5
    assert timer.seconds() == {"import": 2.5, "build": 1.0}
    assert timer.report() == {"import": [[1000.0, 1002.5]], "build": [[1002.5, 1003.0], [1003.0, 1003.5]],
                              "measure": [[1003.5, 1007.5]]}
    clock.now = 9.0  # stopped: nothing runs on
    assert timer.seconds()["measure"] == 4.0


class Loop:
    samples_per_step = 2
    synchronous = True

    def step(self) -> float:
        return 1.0

    def sync(self) -> None:
        pass

    def losses_to_floats(self, handles: list[float]) -> list[float]:
        return list(handles)


class Pacer:
    rewarms = True

    def wait(self) -> None:
        pass

    def report(self, seconds: float, samples_per_second: float) -> None:
        pass

    def done(self) -> None:
        pass


@pytest.mark.parametrize("pacer, expected", [
    (None, ["warmup", "measure", "finish"]),
    (Pacer(), ["warmup", "wait", "warmup", "measure", "wait", "finish"]),
])
def test_the_harness_marks_warmup_rounds_and_a_paced_childs_waits(monkeypatch: pytest.MonkeyPatch,
                                                                  pacer: Pacer | None, expected: list[str]) -> None:
    ticks = iter(range(1, 10_000))
    timer = phases.Phases(clock=lambda: float(next(ticks)))  # every reading a second later: no empty span
    monkeypatch.setattr(phases, "PROCESS", timer)
    scenario = Scenario(framework="torch", model="fake", warmup_steps=2, rounds=2, steps_per_round=2)
    measure(Loop(), scenario, pacer=pacer)
    timer.stop()
    assert [name for name, _, _ in timer._spans] == expected


def test_a_child_that_fails_still_reports_its_phases(tmp_path: Path) -> None:
    """The error result carries the phases up to the failure (here a NaN loss in the first round)."""
    scenario_path, result_path = tmp_path / "s.json", tmp_path / "r.json"
    scenario_path.write_text(Scenario(framework="torch", model="fake", warmup_steps=1, rounds=2,
                                      steps_per_round=2).to_json(), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(PACKAGE_ROOT)]),
           "FAKE_FAIL": "nan", "FAKE_FAIL_ROUND": "1"}
    subprocess.run([sys.executable, str(TESTS / "fake_paced_child.py"), str(scenario_path), str(result_path)],
                   env=env, capture_output=True, timeout=60)
    payload = read_result(result_path)
    assert payload[ERROR]["reason"] == "non-finite loss"
    assert list(payload[PHASES]) == ["import", "import+build", "warmup", "measure"]
