"""The paired runner (pytest_dlperf.processes.paired): order, ratios, failures, no process left behind.

The children speak the real protocol (the training child's ``--paced`` mode, ``measure``'s pacer,
the result file) around a loop that sleeps (tests/fake_paced_child.py), so these tests
need no framework and load the machine very little.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from pytest_dlperf.processes import schedule as schedule_module
from pytest_dlperf.processes.paced_child import PacedChild
from pytest_dlperf.processes.paired import Variant, run_paired
from pytest_dlperf.processes.schedule import build_order, pairs_for, schedule, williams_rows
from pytest_dlperf.processes.runner import ScenarioFailed
from pytest_dlperf.scenario import Scenario, ScenarioError

TESTS = str(Path(__file__).resolve().parent)


def variant(label: str, step_seconds: float = 0.002, **env: str) -> Variant:
    scenario = Scenario(framework="torch", model="fake", label=label, warmup_steps=1, steps_per_round=3,
                        timeout=30.0, env={"PYTHONPATH": TESTS, "FAKE_STEP_SECONDS": str(step_seconds), **env})
    return Variant(scenario, module="fake_paced_child")


def test_schedule_puts_every_variant_and_process_first_and_last_equally_often() -> None:
    plan = schedule(variants=2, processes=2, pairs=8)
    assert [r for pair in plan[:4] for r in pair] == [(0, 0), (1, 0), (0, 1), (1, 1), (1, 0), (0, 0), (1, 1), (0, 1)]
    firsts = Counter(pair[0] for pair in plan)
    assert firsts == {(0, 0): 2, (1, 0): 2, (0, 1): 2, (1, 1): 2}
    four = schedule(variants=4, processes=2, pairs=16)
    for position in range(4):
        assert Counter(pair[position] for pair in four) == {(v, p): 2 for v in range(4) for p in range(2)}


@pytest.mark.parametrize("variants", [2, 3, 4, 5, 8])
def test_williams_rows_balance_positions_and_what_follows_what(variants: int) -> None:
    rows = williams_rows(variants)
    assert len(rows) == (variants if variants % 2 == 0 else 2 * variants)
    assert all(sorted(row) == list(range(variants)) for row in rows)
    each = len(rows) // variants
    for position in range(variants):
        assert Counter(row[position] for row in rows) == {v: each for v in range(variants)}
    follows = Counter((row[i], row[i + 1]) for row in rows for i in range(variants - 1))
    assert set(follows) == {(a, b) for a in range(variants) for b in range(variants) if a != b}
    assert set(follows.values()) == {each}  # every variant follows every other equally often


def test_the_old_design_let_the_reference_always_sit_at_an_end_the_williams_one_does_not() -> None:
    """Four variants forwards then backwards: the reference was only ever first or last, so a
    carry-over from the round before never reached it and always reached the others."""
    plan = schedule(variants=4, processes=1, pairs=4)
    assert Counter(pair.index((0, 0)) for pair in plan) == {0: 1, 1: 1, 2: 1, 3: 1}


def test_schedule_continues_its_cycle_across_generations() -> None:
    whole = schedule(variants=3, processes=2, pairs=24)
    assert schedule(variants=3, processes=2, pairs=12, first_pair=12) == whole[12:]


@pytest.mark.parametrize("variants, processes", [(2, 1), (2, 2), (3, 2), (4, 2), (5, 3)])
def test_build_order_leaves_no_variant_always_built_first(variants: int, processes: int) -> None:
    """The child built first idles longest before its first round: over whole cycles of Williams rows
    (generations included) every variant's children sit at every build position equally often."""
    assert build_order(2, 2) == [(0, 0), (1, 0), (1, 1), (0, 1)]  # A0 B0 B1 A1
    generations = len(williams_rows(variants))  # enough to use every row processes times over
    orders = [build_order(variants, processes, g) for g in range(generations)]
    for order in orders:
        assert sorted(order) == [(v, p) for v in range(variants) for p in range(processes)]
    slot = Counter((v, i % variants) for order in orders for i, (v, _) in enumerate(order))
    assert set(slot.values()) == {processes * generations // variants}


def test_pairs_round_up_to_whole_blocks() -> None:
    assert pairs_for(20, 2) == 20
    assert pairs_for(5, 2) == 8
    assert pairs_for(1, 3) == 6
    assert pairs_for(20, 2, generations=4) == 32
    assert pairs_for(40, 2, generations=5) == 40 and pairs_for(40, 2, generations=4) == 48


def test_generations_take_the_pairs_with_fresh_processes_one_set_after_the_other(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    started: list[int] = []
    real_popen = subprocess.Popen

    def recording_popen(*args, **kwargs):  # type: ignore[no-untyped-def]
        proc = real_popen(*args, **kwargs)
        started.append(proc.pid)
        assert len(_alive(started)) <= 4, "only one generation (2 variants x 2 processes) may be resident"
        return proc

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    paired = run_paired([variant("a"), variant("b")], pairs=8, processes=2, generations=2, workdir=tmp_path)
    assert len(started) == 8 and not _alive(started)
    assert Counter(paired.schedule) == {(key, p): 2 for key in "ab" for p in range(4)}
    assert [p for _, p in paired.schedule[:8]] == [0, 0, 1, 1, 0, 0, 1, 1]  # generation 1 first, then 2
    assert paired.ratio("b").n == 8 and len(paired.results["b"].throughput.samples) == 8
    assert paired.results["a"].details["paired"]["processes"] == 4
    assert len(paired.results["a"].details["paired"]["process_losses"]) == 4
    with pytest.raises(ScenarioError, match="generations=0"):
        run_paired([variant("a"), variant("b")], generations=0, workdir=tmp_path)


@pytest.mark.serial  # a ratio of sleeps of milliseconds
def test_a_slower_variant_has_a_ratio_below_one_and_every_round_is_reported(tmp_path: Path) -> None:
    fast, slow = variant("fast", 0.004), variant("slow", 0.006)
    paired = run_paired([fast, slow], pairs=8, processes=2, workdir=tmp_path)
    ratio = paired.ratio("slow")
    assert ratio.n == 8
    assert 0.55 < ratio.estimate < 0.8, ratio.describe()  # 4 ms against 6 ms a step: 0.67 plus timer overhead
    assert ratio.high < 1.0
    assert paired.reference == "fast" and set(paired.results) == {"fast", "slow"}
    assert len(paired.results["slow"].throughput.samples) == 8
    assert len(paired.results["slow"].details["paired"]["process_losses"]) == 2
    assert Counter(paired.schedule) == {("fast", 0): 4, ("fast", 1): 4, ("slow", 0): 4, ("slow", 1): 4}


def test_variants_need_distinct_labels_and_two_of_them(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="distinct labels"):
        run_paired([variant("a"), variant("a")], workdir=tmp_path)
    with pytest.raises(ScenarioError, match="at least 2 variants"):
        run_paired([variant("a")], workdir=tmp_path)


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    return alive


@pytest.mark.parametrize("fail, reason", [("crash", "crashed"), ("nan", "non-finite loss"), ("hang", "timed out")])
def test_a_failing_child_fails_the_group_with_its_output_and_ends_every_child(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: str, reason: str) -> None:
    import subprocess

    started: list[int] = []
    real_popen = subprocess.Popen

    def recording_popen(*args, **kwargs):  # type: ignore[no-untyped-def]
        proc = real_popen(*args, **kwargs)
        started.append(proc.pid)
        return proc

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    good = variant("good")
    bad = variant("bad", FAKE_FAIL=fail)
    bad = Variant(bad.scenario.replace(timeout=3.0), module=bad.module)
    with pytest.raises(ScenarioFailed) as info:
        run_paired([good, bad], pairs=4, processes=2, workdir=tmp_path)
    assert info.value.reason == reason
    assert "bad" in info.value.label
    assert len(started) == 4 and not _alive(started)


def test_a_child_can_import_this_package_and_nothing_else_of_this_environment() -> None:
    """A/B mode: the reference interpreter must find pytest_dlperf but not this environment's torch.
    (Putting the package's parent folder on PYTHONPATH put a whole site-packages there.)"""
    from pytest_dlperf.processes.runner import child_environment

    first = Path(child_environment(variant("x").scenario)["PYTHONPATH"].split(os.pathsep)[0])
    assert [p.name for p in first.iterdir()] == ["pytest_dlperf"]
    assert (first / "pytest_dlperf" / "child" / "train.py").is_file()


def test_build_one_at_a_time_starts_each_child_after_the_previous_one_warmed_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled scenarios time their warm-up (the compile): no other child may be building meanwhile."""
    import subprocess

    events: list[str] = []
    real_popen, real_ready = subprocess.Popen, PacedChild.wait_ready

    def recording_popen(*args, **kwargs):  # type: ignore[no-untyped-def]
        events.append("start")
        return real_popen(*args, **kwargs)

    def recording_ready(self, timeout):  # type: ignore[no-untyped-def]
        real_ready(self, timeout)
        events.append("ready")

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    monkeypatch.setattr(PacedChild, "wait_ready", recording_ready)
    run_paired([variant("a"), variant("b")], pairs=4, processes=2, workdir=tmp_path, build_one_at_a_time=True)
    assert events == ["start", "ready"] * 4
    events.clear()
    run_paired([variant("a"), variant("b")], pairs=4, processes=2, workdir=tmp_path)
    assert events == ["start", "ready"] * 4  # the default on CPU: one at a time (no oversubscribed warm-up)
    events.clear()
    run_paired([variant("a"), variant("b")], pairs=4, processes=2, workdir=tmp_path, build_one_at_a_time=False)
    assert events == ["start"] * 4 + ["ready"] * 4
    events.clear()
    monkeypatch.setattr(schedule_module, "CPU_BUILD_WIDTH", {"torch": 2})  # as for TensorFlow's builds
    run_paired([variant("a"), variant("b")], pairs=4, processes=2, workdir=tmp_path)
    assert events == ["start", "start", "ready", "start", "ready", "start", "ready", "ready"]  # two at a time


def test_build_width_is_two_for_tensorflow_one_for_compiled_scenarios_and_the_others_all_on_gpu() -> None:
    from pytest_dlperf.processes.schedule import build_width

    def s(framework: str, **fields: object) -> Scenario:
        return Scenario(framework=framework, model="resnet50", **fields)  # type: ignore[arg-type]
    assert build_width([s("torch"), s("torch", env={"OMP_NUM_THREADS": "1"})]) == 1
    assert build_width([s("tensorflow"), s("tensorflow", env={"OMP_NUM_THREADS": "1"})]) == 2
    assert build_width([s("mxnet"), s("mxnet")]) == 1
    assert build_width([s("tensorflow"), s("tensorflow", jit_compile=True)]) == 1  # its warm-up is its compile time
    assert build_width([s("torch", device="cuda"), s("torch", device="cuda", precision="amp_fp16")]) is None


def test_every_variants_child_gets_an_argv_of_the_same_length(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The argv's length moves the child's stack, and with it a CPU figure by a few percent: a label
    ("reference" vs "aa") must not reach it. The log still says which variant it belongs to."""
    import subprocess

    argvs: dict[str, list[str]] = {}
    real_popen = subprocess.Popen

    def recording_popen(command, *args, **kwargs):  # type: ignore[no-untyped-def]
        argvs[command[-3]] = list(command)
        return real_popen(command, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    run_paired([variant("reference"), variant("aa")], pairs=4, processes=2, workdir=tmp_path)
    assert len(argvs) == 4
    assert len({sum(len(arg) for arg in argv) for argv in argvs.values()}) == 1
    logs = {path.read_text().splitlines()[0] for path in tmp_path.glob("paired-*/*.log")}
    assert {line.split(":")[0] for line in logs} == {"# reference#0", "# reference#1", "# aa#0", "# aa#1"}


def test_the_generations_option_reaches_a_tests_paired_group(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_group=f"""
from pytest_dlperf.processes.paired import Variant
from pytest_dlperf.scenario import Scenario

def fake(label):
    return Variant(Scenario(framework="torch", model="fake", label=label, warmup_steps=1, steps_per_round=3,
                            timeout=30.0, env={{"PYTHONPATH": {TESTS!r}, "FAKE_STEP_SECONDS": "0.002"}}),
                   module="fake_paced_child")

def test_group(dlperf):
    paired = dlperf.run_paired(fake("a"), fake("b"), record=False)
    assert paired.results["a"].details["paired"]["processes"] == 4
    assert paired.ratio("b").n == 8
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "dlperf_pairs=8", "-o",
                                           "dlperf_processes=2", "-o", "dlperf_generations=2")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*training interleaved, 8 pairs x 2 processes x 2 generations per variant*"])
    bad = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "dlperf_generations=0")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*ini key dlperf_generations = '0'*must be at least 1*"])
