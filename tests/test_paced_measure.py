"""measure() under a pacer: each timed round starts on the pacer's word, and a re-warming pacer's
first turn begins with untimed steps, so a child that idled long before it does not time its first round cold."""

from __future__ import annotations

import pytest

from pytest_dlperf.child.measure import measure, rewarm_steps
from pytest_dlperf.scenario import Scenario


class CountingLoop:
    """Records each step, and each sync, in one event list shared with the pacer."""

    samples_per_step = 4
    synchronous = True

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def step(self) -> float:
        self.events.append("step")
        return 1.0

    def sync(self) -> None:
        pass

    def losses_to_floats(self, handles: list[float]) -> list[float]:
        return list(handles)


class ListPacer:
    def __init__(self, events: list[str], rewarms: bool) -> None:
        self.events, self.rewarms = events, rewarms

    def wait(self) -> None:
        self.events.append("go")

    def report(self, seconds: float, samples_per_second: float) -> None:
        self.events.append("report")

    def done(self) -> None:
        self.events.append("done")


@pytest.mark.parametrize("rewarms", [True, False])
def test_a_rewarming_pacers_first_turn_starts_with_untimed_steps(rewarms: bool) -> None:
    scenario = Scenario(framework="torch", model="resnet18", warmup_steps=2, rounds=3, steps_per_round=4)
    events: list[str] = []
    metrics, losses, _ = measure(CountingLoop(events), scenario, pacer=ListPacer(events, rewarms))

    extra = ["step"] * rewarm_steps(scenario) if rewarms else []
    timed = ["step"] * 4
    assert events == (["step"] * 2 + ["go"] + extra + timed + ["report"]
                      + ["go"] + timed + ["report"] + ["go"] + timed + ["report", "done"])
    assert len(metrics["throughput"].samples) == 3  # the re-warm steps are in no round
    assert len(losses) == 2 + 3 * 4  # nor in the loss curve: warm-up plus the timed rounds


def test_rewarm_is_the_warm_up_again_at_most_a_rounds_worth() -> None:
    assert rewarm_steps(Scenario(framework="torch", model="resnet18", warmup_steps=2, steps_per_round=4)) == 2
    assert rewarm_steps(Scenario(framework="torch", model="resnet18", warmup_steps=10, steps_per_round=4)) == 4
    assert rewarm_steps(Scenario(framework="torch", model="resnet18", warmup_steps=0, steps_per_round=4)) == 0
