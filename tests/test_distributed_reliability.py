"""A crashing rank or one hung in a collective fails the job in time, named; no process of the job survives.

The ranks are real: a 2-rank DDP job over gloo (and an MXNet ps-lite job where MXNet is
installed), with a fault injected into one rank by the job's config. After every job,
``/proc`` is scanned for the job's ``DLPERF_JOB`` marker: nothing may be left.
"""

from __future__ import annotations

import importlib.util
import threading
import time

import pytest

from pytest_dlperf.processes import distributed as dist
from pytest_dlperf.processes.distributed import rendezvous, supervise
from pytest_dlperf.processes.distributed.netns import unavailable_reason

pytestmark = pytest.mark.serial  # network-namespace hosts, the CPU lock, and kills timed against the hang timeout

CONFIG = dict(model="tiny_cnn", batch_size=4, image_size=8, num_classes=4, lr=0.05, momentum=0.9, seed=0,
              train_samples=64, steps=6, warmup_steps=0, rounds=1, threads=1, kvstore="dist_sync")
HANG_TIMEOUT = 30.0
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (tox -e perf-torch)")
needs_mxnet = pytest.mark.skipif(importlib.util.find_spec("mxnet") is None, reason="needs mxnet (tox -e perf-mxnet)")


def fail(job: dist.Job, tmp_path) -> tuple[dist.JobFailed, float]:
    start = time.monotonic()
    with pytest.raises(dist.JobFailed) as info:
        dist.run_job(job, tmp_path)
    return info.value, time.monotonic() - start


@needs_torch
def test_a_crashing_rank_is_named_and_the_job_is_gone(tmp_path):
    job = dist.Job("torch", 2, dict(CONFIG, fault={"rank": 1, "step": 2, "kind": "crash"}), timeout=120, label="crash")
    exc, elapsed = fail(job, tmp_path)
    assert exc.rank == "worker 1", exc.report()
    assert "crashed (exit status 17)" in exc.reason
    assert "injected fault: crash at step 2" in exc.output_tail
    assert elapsed < job.timeout
    assert dist.job_processes(exc.job) == []


@pytest.mark.slow
@needs_torch
def test_a_rank_hung_in_a_collective_is_named_within_the_timeout(tmp_path):
    job = dist.Job("torch", 2, dict(CONFIG, fault={"rank": 1, "step": 3, "kind": "hang"}), timeout=HANG_TIMEOUT,
                   label="hang")
    exc, elapsed = fail(job, tmp_path)
    assert exc.rank == "worker 1", exc.report()
    assert "hung" in exc.reason and "last step was 3" in exc.reason and "worker 0 at step" in exc.reason
    assert "injected fault: hang at step 3" in exc.output_tail
    assert HANG_TIMEOUT <= elapsed < HANG_TIMEOUT + 15
    assert dist.job_processes(exc.job) == []


@pytest.mark.slow
@needs_torch
@pytest.mark.skipif(unavailable_reason() is not None, reason=unavailable_reason() or "")
def test_a_hang_across_netns_hosts_kills_the_ranks_inside_the_namespaces(tmp_path):
    with dist.network("netns", hosts=2) as launcher:
        job = dist.Job("torch", 2, dict(CONFIG, fault={"rank": 0, "step": 1, "kind": "hang"}), launcher=launcher,
                       timeout=HANG_TIMEOUT, label="nshang")
        exc, elapsed = fail(job, tmp_path)
        assert exc.rank == "worker 0", exc.report()
        assert dist.job_processes(exc.job) == []
    assert elapsed < HANG_TIMEOUT + 15


@needs_mxnet
def test_a_hung_ps_lite_worker_is_named_and_scheduler_and_servers_are_killed(tmp_path):
    job = dist.Job("mxnet", 2, dict(CONFIG, fault={"rank": 1, "step": 2, "kind": "hang"}), timeout=HANG_TIMEOUT,
                   label="mxhang", env={"OMP_NUM_THREADS": "1"})
    exc, _ = fail(job, tmp_path)
    assert exc.rank == "worker 1", exc.report()
    assert dist.job_processes(exc.job) == []


@pytest.mark.slow
@needs_torch
def test_two_jobs_at_once_get_different_ports_and_both_finish(tmp_path):
    results: dict[int, dist.JobResult] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = dist.run_job(dist.Job("torch", 2, CONFIG, timeout=120, label=f"pair{i}"), tmp_path)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, [str(e) for e in errors]
    assert results[0].rendezvous != results[1].rendezvous
    for r in results.values():
        assert len(r.workers) == 2 and dist.job_processes(r.job_id) == []


def test_reserved_ports_are_not_handed_out_twice(monkeypatch):
    """The kernel offers the same free port to both jobs; the lock makes the second take another."""
    offers = iter([41000, 41000, 41001])
    monkeypatch.setattr(rendezvous, "_bindable_port", lambda address: next(offers))
    a, b = dist.PortReservation(), dist.PortReservation()
    try:
        assert a.take("127.0.0.1") == 41000
        assert b.take("127.0.0.1") == 41001  # 41000 is locked by a
    finally:
        a.release()
        b.release()


def test_a_job_without_a_result_file_names_the_rank(tmp_path, monkeypatch):
    """A rank that exits 0 without writing its result is a failure too (not an empty success)."""
    monkeypatch.setitem(dist.ENTRY_POINTS, "torch", "this")  # prints the Zen of Python, exits 0, writes nothing
    job = dist.Job("torch", 1, CONFIG, timeout=30, label="noresult", start="env")  # the entry point itself, no torchrun
    with pytest.raises(dist.JobFailed, match="worker 0 exited 0 but wrote no result"):
        dist.run_job(job, tmp_path)


def test_a_job_holds_the_cpu_lock_while_its_ranks_run(tmp_path, monkeypatch):
    """Another run's scenario must not share the cores with a job's ranks: the job takes the CPUs' lock."""
    from pytest_dlperf.processes import devicelock

    monkeypatch.setenv(devicelock.ENV_DIR, str(tmp_path / "locks"))
    seen = {}

    def ranks_run(job, workdir):
        seen.update(devicelock.holders(tmp_path / "locks", ["cpu"]))
        return "ran"

    monkeypatch.setattr(supervise, "_run_job", ranks_run)
    assert dist.run_job(dist.Job("torch", 2, CONFIG, timeout=5, label="locked"), tmp_path) == "ran"
    assert "cpu.lock" in seen and "distributed job locked" in seen["cpu.lock"], seen
    assert devicelock.holders(tmp_path / "locks", ["cpu"]) == {}  # released after the job
