"""Counting instructions under Valgrind: the dump reader, the counted rounds, the shim, and what a
machine without Valgrind or a scenario that cannot be counted tells the user."""

from __future__ import annotations

import pytest

from pytest_dlperf import instructions
from pytest_dlperf.child import measure as measure_module
from pytest_dlperf.judging.baselines import BaselineStore
from pytest_dlperf.judging.gates import INSTRUCTION_TOLERANCE, tolerance_for
from pytest_dlperf.judging.noise import kind_of
from pytest_dlperf.result import HIGHER, LOWER, TrainingResult, metric_from
from pytest_dlperf.scenario import Scenario, ScenarioError

DUMP = """\
version: 1
creator: callgrind-3.19.0
cmd:  python -m pytest_dlperf.child.train
desc: Trigger: Client Request: dlperf-abc
events: Ir
fn=(1) main
5 1000
summary: 84874392
totals: 84874392
"""


def test_a_dump_is_read_by_its_totals_line() -> None:
    assert instructions.read_total(DUMP) == 84874392
    assert instructions.read_total("events: Ir\nsummary: 12\n") == 12
    with pytest.raises(ValueError, match="no totals"):
        instructions.read_total("events: Ir\n")


class Loop:
    samples_per_step = 2

    def __init__(self) -> None:
        self.steps = 0

    def step(self) -> float:
        self.steps += 1
        return 1.0 / self.steps

    def sync(self) -> None:
        pass

    def losses_to_floats(self, handles: list[float]) -> list[float]:
        return list(handles)


class FakeCounter:
    """What callgrind would count: 1000 instructions per step taken since start()."""

    def __init__(self, loop: Loop) -> None:
        self.loop, self.calls = loop, []

    def start(self) -> None:
        self.calls.append("start")
        self.at = self.loop.steps

    def stop(self) -> int:
        self.calls.append("stop")
        return 1000 * (self.loop.steps - self.at)


def test_counted_rounds_give_instructions_per_step_and_no_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = Loop()
    counter = FakeCounter(loop)
    monkeypatch.setattr(instructions.Counter, "from_environment", classmethod(lambda cls: counter))
    scenario = Scenario(framework="torch", model="resnet18", warmup_steps=2, rounds=3, steps_per_round=4,
                        measure="instructions")
    metrics, losses, details = measure_module.measure(loop, scenario)
    assert set(metrics) == {"instructions_per_step"}  # a time under Valgrind is no figure
    figure = metrics["instructions_per_step"]
    assert list(figure.samples) == [1000.0, 1000.0, 1000.0] and figure.unit == "instructions"
    assert counter.calls == ["start", "stop"] * 3  # the warm-up is not counted
    assert len(losses) == 2 + 3 * 4 and "callgrind" in details["counted_by"]


def test_the_count_is_its_own_kind_held_to_half_a_percent_whatever_the_runs_tolerance() -> None:
    assert kind_of("instructions_per_step", "instructions") == "instructions"
    assert tolerance_for("instructions_per_step", 0.25) == INSTRUCTION_TOLERANCE == 0.005
    assert tolerance_for("instructions_per_step", 0.25, explicit=0.02) == 0.02


@pytest.mark.parametrize("changes, message", [
    (dict(measure="cycles"), "measure='cycles' is not supported; use one of: time, instructions"),
    (dict(measure="instructions", device="cuda"), "counts one CPU process's steps"),
    (dict(measure="instructions", kvstore="dist_sync"), "no kvstore"),
])
def test_a_scenario_that_cannot_be_counted_is_refused(changes: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        Scenario(framework="mxnet", model="resnet18", **changes)


def test_without_valgrind_the_reason_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    reason = instructions.unavailable()
    assert reason and "valgrind" in reason and "apt-get install valgrind" in reason
    with pytest.raises(instructions.InstructionsUnavailable, match="valgrind"):
        instructions.build_shim()


@pytest.mark.skipif(instructions.unavailable() is not None, reason=str(instructions.unavailable()))
def test_the_shim_is_built_once_and_reused(tmp_path) -> None:
    first = instructions.build_shim(tmp_path)
    assert first.exists() and first.parent == tmp_path
    assert instructions.build_shim(tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no scratch left behind


def test_outside_valgrind_the_counter_says_where_counting_happens(tmp_path) -> None:
    if instructions.unavailable():
        pytest.skip(str(instructions.unavailable()))
    shim = instructions.build_shim(tmp_path)
    with pytest.raises(instructions.InstructionsUnavailable, match="not running under Valgrind"):
        instructions.Counter(str(shim), str(tmp_path))


TEST_FILE = """
import pytest

def test_counted(dlperf):
    dlperf.run(dlperf.scenario("torch", "resnet18", measure="instructions"))

def test_timed_under_the_option(dlperf):
    dlperf.run(dlperf.scenario("mxnet", "resnet18", kvstore="dist_sync"))
"""


def test_without_valgrind_counted_tests_skip_with_the_install_hint(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(TEST_FILE)
    monkeypatch.setenv("PATH", "/nonexistent")
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "--dlperf-measure=instructions")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines([
        "*counting instructions needs valgrind and cc on PATH: install Valgrind*apt-get install valgrind*",
        "*--dlperf-measure=instructions counts one CPU process's steps*run it without the option*",
    ])


def test_a_counted_result_asked_for_its_throughput_says_why_it_has_none() -> None:
    scenario = Scenario(framework="torch", model="resnet18", measure="instructions")
    counted = TrainingResult(scenario, {"instructions_per_step": metric_from("instructions_per_step", [1.0, 1.0],
                                                                            "instructions", LOWER)}, [], {})
    with pytest.raises(KeyError, match="counted under Valgrind.*without --dlperf-measure=instructions"):
        _ = counted.throughput


def test_recording_one_measure_keeps_the_other_measures_figures(tmp_path) -> None:
    """A counted --update-baselines run drops no timed figure of its test, nor a timed run the count;
    a figure of the same measure that the test no longer writes is still dropped."""
    key, hw = "test_x.py::test_x::fp32@smoke", "cpu-test"
    timed = BaselineStore(tmp_path)
    for name in ("throughput", "step_time_gone"):
        timed.stage(hw, {}, key, metric_from(name, [10.0, 11.0], "samples/s", HIGHER), {})
    timed.flush()
    counted = BaselineStore(tmp_path)
    counted.stage(hw, {}, key, metric_from("instructions_per_step", [5e7, 5e7], "instructions", LOWER), {})
    counted.flush()
    assert counted.pruned == []
    retimed = BaselineStore(tmp_path)
    retimed.stage(hw, {}, key, metric_from("throughput", [10.0, 11.0], "samples/s", HIGHER), {})
    retimed.flush()
    assert retimed.pruned == [(hw, key, "step_time_gone")]
    assert set(BaselineStore(tmp_path).entries(hw)[key]) == {"throughput", "instructions_per_step"}


def test_the_counting_key_names_the_counting_model_not_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(instructions, "valgrind_version", lambda: "3.22")
    monkeypatch.setattr(instructions.platform, "machine", lambda: "x86_64")
    assert instructions.counting_key() == "counted-x86_64-valgrind3.22-nofma"
    model = instructions.counting_model()
    assert model["valgrind"] == "3.22" and "ONEDNN_MAX_CPU_ISA=AVX" in model["lane_environment"]


def test_valgrind_version_is_read_from_valgrind_or_says_none(monkeypatch: pytest.MonkeyPatch) -> None:
    instructions.valgrind_version.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    assert instructions.valgrind_version() == instructions.NO_VALGRIND
    instructions.valgrind_version.cache_clear()


def _counted_result(count: float, host: str) -> TrainingResult:
    from pytest_dlperf.processes.runner import filed_by_counting_model

    scenario = Scenario(framework="torch", model="resnet18", measure="instructions")
    result = TrainingResult(scenario, {"instructions_per_step": metric_from(
        "instructions_per_step", [count] * 3, "instructions", LOWER)}, [],
        {"hardware_key": host + "-avx-capped", "framework": "torch", "framework_version": "2.14.1"})
    filed_by_counting_model(result)
    return result


def test_counts_recorded_on_one_host_judge_the_first_count_on_another(tmp_path, monkeypatch) -> None:
    """Counts recorded on an Intel host (runs[].host says so) judge a count made on this host: the same
    count holds, 2% more instructions is a regression; recording here files the run under this host."""
    from pytest_dlperf.judging.gates import Policy
    from pytest_dlperf.judging.judge import judge
    from pytest_dlperf.judging.outcomes import OK, REGRESSION

    monkeypatch.setattr(instructions, "valgrind_version", lambda: "3.19")
    monkeypatch.setattr("pytest_dlperf.processes.runner.hardware_key", lambda device: "cpu-other-host-2cpu-avx2")
    key, nodeid = "test_x.py::test_x::fp32@smoke", "test_x.py::test_x"
    recorder = BaselineStore(tmp_path)
    for i, count in enumerate((242_460_297.0, 242_420_823.0, 242_454_763.0)):
        recorder.session = f"session-{i}"
        monkeypatch.setattr("pytest_dlperf.processes.runner.hardware_key", lambda device: "cpu-intel-2cpu-amx")
        result = _counted_result(count, "cpu-intel-2cpu-amx")
        judge(recorder, nodeid, "smoke", [("fp32", result.metrics["instructions_per_step"], result)],
              Policy(0.10), update=True)
        recorder.flush()
    files = sorted(p.name for p in tmp_path.glob("*.json"))
    assert files == ["counted-x86_64-valgrind3.19-nofma.json"], files

    monkeypatch.setattr("pytest_dlperf.processes.runner.hardware_key", lambda device: "cpu-amd-epyc-2cpu-avx512")
    for count, expected in ((242_532_379.0, OK), (242_460_297.0 * 1.02, REGRESSION)):
        here = _counted_result(count, "cpu-amd-epyc-2cpu-avx512")
        [verdict] = judge(BaselineStore(tmp_path), nodeid, "smoke",
                          [("fp32", here.metrics["instructions_per_step"], here)], Policy(0.10), update=False)
        assert (verdict.status, verdict.hardware) == (expected, "counted-x86_64-valgrind3.19-nofma")

    same = _counted_result(242_532_379.0, "cpu-amd-epyc-2cpu-avx512")
    store = BaselineStore(tmp_path)
    judge(store, nodeid, "smoke", [("fp32", same.metrics["instructions_per_step"], same)], Policy(0.10), update=True)
    store.flush()
    runs = BaselineStore(tmp_path).entries("counted-x86_64-valgrind3.19-nofma")[key]["instructions_per_step"]
    assert [r.get("host") for r in runs["runs"]][-2:] == ["cpu-intel-2cpu-amx", "cpu-amd-epyc-2cpu-avx512"]
