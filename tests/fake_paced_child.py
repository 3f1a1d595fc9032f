"""A training child without a framework, for the paired runner's tests: the real protocol
(``measure`` with the training child's ``--paced`` pacer, the result file), a loop that sleeps.

``FAKE_STEP_SECONDS`` sets the step's duration; ``FAKE_FAIL`` makes it fail: ``crash`` (exit
at once in the given round), ``nan`` (a NaN loss), ``hang`` (sleep forever in a round).
``FAKE_FAIL_ROUND`` (default 2) is the round, counted from 1, in which it fails.
"""

from __future__ import annotations

import os
import sys
import time

from pytest_dlperf.child import train as training_child


class SleepingLoop:
    samples_per_step = 8
    synchronous = True

    def __init__(self, steps_per_round: int, warmup: int, rewarm: int) -> None:
        self.step_seconds = float(os.environ.get("FAKE_STEP_SECONDS", "0.002"))
        self.fail = os.environ.get("FAKE_FAIL", "")
        self.fail_step = warmup + rewarm + (int(os.environ.get("FAKE_FAIL_ROUND", "2")) - 1) * steps_per_round
        self.steps = 0

    def step(self) -> float:
        if self.steps == self.fail_step:
            if self.fail == "crash":
                os._exit(9)
            if self.fail == "hang":
                time.sleep(3600)
        self.steps += 1
        time.sleep(self.step_seconds)
        return float("nan") if self.fail == "nan" and self.steps > self.fail_step else 2.0 / self.steps

    def sync(self) -> None:
        pass

    def losses_to_floats(self, handles: list[float]) -> list[float]:
        return list(handles)


def train(scenario, progress):  # type: ignore[no-untyped-def]
    from pytest_dlperf.child.measure import measure, rewarm_steps

    rewarm = rewarm_steps(scenario) if "--paced" in sys.argv else 0  # untimed steps before the first timed round
    loop = SleepingLoop(scenario.steps_per_round, scenario.warmup_steps, rewarm)
    metrics, losses, details = measure(loop, scenario, progress)
    return metrics, losses, details, {"framework": "fake", "framework_version": "0"}


if __name__ == "__main__":
    sys.modules["fake_core"] = sys.modules[__name__]
    training_child.CORES["torch"] = "fake_core"
    sys.exit(training_child.main(sys.argv[1:]))
