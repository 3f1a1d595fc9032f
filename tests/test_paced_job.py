"""Paced distributed jobs (pytest_dlperf.processes.distributed.paced_job): a 1-worker and a 2-worker job
alternate rounds.

The protocol is tested in-process (:class:`RankPacer` against a fake stdin and barrier); the
jobs are real (tiny_cnn over gloo, a few steps) and so are their failures: a rank that
crashes mid-round fails the group naming it, through pytest as a user sees it, and no
process of either job is left.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
from collections import Counter

import pytest

from pytest_dlperf.processes import distributed as dist
from pytest_dlperf import cost
from pytest_dlperf.protocol import PHASES, ROUND_PREFIX
from pytest_dlperf.processes.distributed.paced_job import paced_problem, run_paired_jobs
from pytest_dlperf.child.rank import PACED, RankPacer, rank_pacer

pytestmark = pytest.mark.serial  # jobs that hold the CPU lock for a whole paired group and time one worker against two

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (tox -e perf-torch)")

CONFIG = dict(model="tiny_cnn", batch_size=4, image_size=8, num_classes=4, lr=0.05, momentum=0.9, seed=0,
              train_samples=64, steps=12, warmup_steps=2, threads=1)
PAIRS = 4


class FakeStdin(io.StringIO):
    pass


def test_rank_0_waits_for_go_then_meets_the_others_and_reports_its_round(monkeypatch, capsys):
    events: list[str] = []
    monkeypatch.setattr("sys.stdin", FakeStdin("go\ngo\n"))
    pacer = RankPacer(0, lambda: events.append("barrier"))
    pacer.wait()
    out = capsys.readouterr().out.splitlines()
    assert out == [ROUND_PREFIX + json.dumps({"ready": True})]  # ready once, before the first go
    assert events == ["barrier"]
    pacer.report(0.5, 32.0)
    assert json.loads(capsys.readouterr().out[len(ROUND_PREFIX):]) == {"seconds": 0.5, "samples_per_second": 32.0}
    pacer.wait()
    assert capsys.readouterr().out == ""  # no second ready
    pacer.done()  # reads stdin to its end (the parent closed it), then the last barrier
    assert events == ["barrier"] * 3


def test_rank_0_fails_when_the_parent_closes_its_input_before_a_round(monkeypatch):
    monkeypatch.setattr("sys.stdin", FakeStdin(""))
    with pytest.raises(RuntimeError, match="closed this child's input"):
        RankPacer(0, None).wait()


def test_other_ranks_only_meet_in_the_barrier_and_say_nothing(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", FakeStdin(""))  # a rank > 0 never reads its stdin
    events: list[str] = []
    pacer = RankPacer(1, lambda: events.append("barrier"))
    pacer.wait()
    pacer.report(0.5, 32.0)
    pacer.done()
    assert events == ["barrier", "barrier"] and capsys.readouterr().out == ""


def test_a_job_is_paced_only_when_its_config_says_so():
    assert rank_pacer(CONFIG, 0, None) is None
    assert isinstance(rank_pacer(dict(CONFIG, **{PACED: True}), 1, None), RankPacer)


class _Ssh:
    name = "ssh"


def test_frameworks_and_launchers_that_cannot_pace_are_refused_with_the_fix():
    assert paced_problem(dist.Job("torch", 2, CONFIG)) is None
    assert paced_problem(dist.Job("tensorflow", 2, CONFIG)) is None
    assert paced_problem(dist.Job("mxnet", 2, dict(CONFIG, kvstore="dist_sync"))) is None
    problem = paced_problem(dist.Job("torch", 2, CONFIG, launcher=_Ssh()))  # type: ignore[arg-type]
    assert problem and "not 'ssh'" in problem
    with pytest.raises(ValueError, match="distinct labels"):
        run_paired_jobs([dist.Job("torch", 1, CONFIG), dist.Job("torch", 2, CONFIG)], pairs=PAIRS)


@needs_torch
def test_one_and_two_workers_alternate_rounds_and_give_a_paired_ratio(tmp_path):
    one = dist.Job("torch", 1, CONFIG, timeout=120, label="one")
    two = dist.Job("torch", 2, CONFIG, timeout=120, label="two")
    with dist.jobs_lock([one, two]), cost.recording() as recorder:
        paired = run_paired_jobs([one, two], pairs=PAIRS, workdir=tmp_path)
    ratio = paired.ratio("two")
    assert ratio.n == PAIRS and ratio.low <= ratio.estimate <= ratio.high
    assert ratio.ratios == tuple(b / a for a, b in zip(paired.throughput["one"], paired.throughput["two"]))
    assert paired.schedule[:4] == [("one", 0), ("two", 0), ("two", 0), ("one", 0)]  # ABBA
    assert Counter(paired.schedule) == {("one", 0): PAIRS, ("two", 0): PAIRS}
    single, double = paired.results["one"][0], paired.results["two"][0]
    assert len(double.workers) == 2 and double.workers[0]["world"] == 2
    for result in (single, double):
        for worker in result.workers:  # every rank took exactly the paired rounds and trained every step
            assert len(worker["throughput"]) == PAIRS and len(worker["losses"]) == CONFIG["steps"]
        assert dist.job_processes(result.job_id) == []
    # what the parent was told per round is rank 0's own timing of it
    assert paired.throughput["two"] == pytest.approx(double.workers[0]["throughput"])
    assert paired.jobs["two"].config[PACED] is True and paired.jobs["two"].config["rounds"] == PAIRS
    # the ranks are the test's children in its cost profile, their phases on its time line, not in the results
    spent = recorder.cost()
    assert spent.children == 3 and sum(spent.phases.values()) == pytest.approx(spent.wall)
    assert spent.phases["measure"] > 0 and spent.phases["build"] > 0 and spent.phases["spawn"] > 0, spent
    assert all(PHASES not in worker for result in (single, double) for worker in result.workers)


@needs_torch
def test_an_undecided_group_takes_fresh_processes_until_decided_up_to_the_cap(tmp_path):
    one = dist.Job("torch", 1, CONFIG, timeout=120, label="one")
    two = dist.Job("torch", 2, CONFIG, timeout=120, label="two")
    seen: list[int] = []

    def decided(ratios):  # undecided after the first generation, decided after the second
        seen.append(ratios["two"].units)
        return ratios["two"].units >= 2

    with dist.jobs_lock([one, two]):
        paired = run_paired_jobs([one, two], pairs=PAIRS, workdir=tmp_path, decided=decided, max_generations=4)
    assert paired.generations == 2 and seen == [1, 2]
    assert paired.ratio("two").n == 2 * PAIRS and paired.ratio("two").units == 2
    assert len(paired.results["one"]) == len(paired.results["two"]) == 2  # a fresh job per generation
    assert paired.jobs["two"].config["rounds"] == PAIRS  # each generation's jobs took their share of the rounds
    for result in paired.results["two"]:
        assert all(len(w["throughput"]) == PAIRS for w in result.workers)
        assert dist.job_processes(result.job_id) == []

    with dist.jobs_lock([one, two]):
        capped = run_paired_jobs([one, two], pairs=PAIRS, workdir=tmp_path, decided=lambda r: False,
                                 max_generations=2)
    assert capped.generations == 2


# the fixture's method: the group's lock, its progress lines, and a failed job failing the test
CRASHING_TEST = """
from pytest_dlperf.processes import distributed as dist
from pytest_dlperf.judging.stats import claim_decided
import json

CONFIG = json.loads({config!r})

def test_scaling(dlperf):
    one = dist.Job("torch", 1, CONFIG, timeout=120, label="one")
    two = dist.Job("torch", 2, dict(CONFIG, fault={{"rank": 1, "step": {step}, "kind": "crash"}}), timeout=120,
                   label="two")
    dlperf.run_paired_jobs(one, two, pairs={pairs}, decided=claim_decided(0.1))
"""


@needs_torch
def test_a_rank_that_crashes_mid_round_fails_the_group_naming_it_and_nothing_is_left(pytester, tmp_path,
                                                                                     monkeypatch):
    # 2-worker job: 12 steps = 4 warm-up + 4 rounds of 2; step 6 is the first step of round 2
    pytester.makepyfile(test_crash=CRASHING_TEST.format(config=json.dumps(CONFIG), step=6, pairs=PAIRS))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--basetemp={tmp_path}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*one vs two: jobs interleaved, 4 pairs x 1 process per job, more generations "
                                 "until decided (up to 6)*",
                                 "*one vs two: failed: *",
                                 "*distributed job 'two-*': worker 1 crashed (exit status 17)*",
                                 "*--- last output of worker 1 ---*", "*injected fault: crash at step 6*"])
    jobs = sorted(d.name for d in tmp_path.glob("**/paired-jobs-*/*") if d.is_dir())  # one folder per job, its id
    assert [j.split("-")[0] for j in jobs] == ["one", "two"], jobs
    assert {j: dist.job_processes(j) for j in jobs} == {j: [] for j in jobs}  # both jobs' ranks are gone


@pytest.mark.slow
@needs_torch
def test_a_rank_hung_mid_round_is_named_within_the_timeout_and_both_jobs_are_killed(tmp_path, monkeypatch):
    started: list[int] = []
    real_popen = subprocess.Popen

    def recording_popen(*args, **kwargs):  # type: ignore[no-untyped-def]
        proc = real_popen(*args, **kwargs)
        started.append(proc.pid)
        return proc

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    one = dist.Job("torch", 1, CONFIG, timeout=25, label="one")
    two = dist.Job("torch", 2, dict(CONFIG, fault={"rank": 1, "step": 6, "kind": "hang"}), timeout=25, label="two")
    with pytest.raises(dist.JobFailed) as info, dist.jobs_lock([one, two]):
        run_paired_jobs([one, two], pairs=PAIRS, workdir=tmp_path)
    exc = info.value
    assert exc.rank == "worker 1", exc.report()
    assert "hung: no round reported within 25 s" in exc.reason and "last step was 6" in exc.reason
    assert "injected fault: hang at step 6" in exc.output_tail
    assert len(started) == 3 and not _alive(started)


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    return alive

