"""The suite's scaling claim, shared by every framework's distributed test.

One worker against two, after the same epochs: throughput per worker, weak-scaling
efficiency and top-1/top-5 on held-out data. Figures go to the baselines through the
``dlperf`` fixture; the claims are asserted here, with one line of figures.

Two ways to measure the efficiency: :func:`check_two_workers` takes two jobs run one after
the other (its figure carries the machine's drift between them, so its floor must be low);
:func:`check_paired_workers` takes the jobs of :func:`pytest_dlperf.processes.distributed.paced_job.run_paired_jobs`,
which alternated timed rounds, and judges the paired per-worker ratio with ``stats.decide``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pytest

from pytest_dlperf.judging.outcomes import REGRESSION
from pytest_dlperf.judging.stats import claim_decided, decide
from pytest_dlperf.processes.distributed.job import Job, JobFailed, JobResult
from pytest_dlperf.processes.distributed.paced_job import paced_problem
from pytest_dlperf.processes.distributed.supervise import run_job
from pytest_dlperf.processes.distributed.netns import rate_bits_per_second
from pytest_dlperf.processes.distributed.results import as_training_result, param_bytes
from pytest_dlperf.processes.distributed.scaling import scaling_efficiency


@dataclass(frozen=True)
class ScalingClaim:
    #: Lowest weak-scaling efficiency per network; the rate-limited network is absent on purpose:
    #: there the efficiency is what the limit makes it, and the limit itself is asserted instead.
    min_efficiency: Mapping[str, float]
    #: Two workers may lose at most this much top-1/top-5 against one.
    accuracy_margin: float
    #: The single worker must learn at least this (well above chance).
    min_top1: float
    #: The tbf rate of the limited network.
    rate: str


def check_scaling(dlperf: Any, claim: ScalingClaim, sequential: ScalingClaim, network: str, batch_size: int,
                  one: Job, two: Job, pairs: int, tmp_path: Path) -> str:
    """The claim for the 1-worker job ``one`` against the N-worker job ``two`` on ``network``: the jobs
    alternate timed rounds, decided adaptively against the floor (:func:`check_paired_workers`); a
    launcher that cannot pace a job's ranks runs one job after the other, held to the ``sequential``
    claim's lower floors (:func:`check_two_workers`). Returns the line of figures."""
    problem = paced_problem(two)
    if problem:
        print(f"not paired: {problem}")
        return check_two_workers(dlperf, sequential, network, batch_size,
                                 (one, _run_or_fail(one, tmp_path)), (two, _run_or_fail(two, tmp_path)))
    floor = claim.min_efficiency.get(network)
    paired = dlperf.run_paired_jobs(one, two, pairs=pairs,
                                    decided=None if floor is None else claim_decided(floor, [two.label]))
    return check_paired_workers(dlperf, claim, network, batch_size, paired, one.label, two.label)


def _run_or_fail(job: Job, tmp_path: Path) -> JobResult:
    try:
        return run_job(job, tmp_path)
    except JobFailed as exc:
        pytest.fail(exc.report(), pytrace=False)


def check_two_workers(dlperf: Any, claim: ScalingClaim, network: str, batch_size: int,
                      one: tuple[Job, JobResult], two: tuple[Job, JobResult]) -> str:
    """Record both jobs against the baselines, then assert the claim; returns the line of figures."""
    (one_job, one_result), (two_job, two_result) = one, two
    single = as_training_result(one_job, one_result, "single_worker")
    pair = as_training_result(two_job, two_result, f"two_workers_{network}")
    base = statistics.median(one_result.workers[0]["throughput"])
    per_worker = [statistics.median(w["throughput"]) for w in two_result.workers]
    efficiency = scaling_efficiency(base, per_worker)
    rounds = zip(*[w["throughput"] for w in two_result.workers])
    dlperf.ledger.metric(f"two_workers_{network}", "scaling_efficiency", [sum(r) / (2 * base) for r in rounds], "x")
    dlperf.check(single, pair)

    acc1, acc2 = one_result.workers[0]["accuracy"], two_result.workers[0]["accuracy"]
    figures = (f"{network}: 1 worker {base:.1f} samples/s, 2 workers {[round(p, 1) for p in per_worker]} samples/s "
               f"each, efficiency {efficiency:.2f}; {_accuracy_text(acc1, acc2)}; wall {one_result.wall_seconds:.1f} s "
               f"vs {two_result.wall_seconds:.1f} s")
    print(figures)
    _assert_learned(claim, single, pair, acc1, acc2, figures)
    if network in claim.min_efficiency:
        floor = claim.min_efficiency[network]
        _require(efficiency >= floor, f"scaling efficiency below {floor}: {figures}")
    _assert_rate_limit(claim, network, batch_size, two_result, per_worker, figures)
    return figures


def check_paired_workers(dlperf: Any, claim: ScalingClaim, network: str, batch_size: int, paired: Any,
                         one_label: str, two_label: str, check_single: bool = True) -> str:
    """The claim on jobs that alternated timed rounds (``paired``: a ``paced_job.PairedJobs``):
    the 1-worker job ``one_label`` against the N-worker job ``two_label`` (2 workers, or more).

    The efficiency is the paired ratio of the N-worker job's per-worker round throughput over
    the 1-worker job's in the same pair (Hodges-Lehmann, Wilcoxon interval); it is stored as the
    ``speedup`` of ``per_worker_N_vs_1_<network>`` with its interval and the claimed floor. The
    claim fails when ``stats.decide(ratio, 1 - floor)`` says REGRESSION: the estimate below the floor
    *and* the interval below 1 (the rule every paired ratio of the suite is judged by).
    ``check_single=False``: the 1-worker job was already recorded (a group with several N).
    """
    one_job, two_job = paired.jobs[one_label], paired.jobs[two_label]
    one_result, two_result = paired.results[one_label][0], paired.results[two_label][0]
    n = two_job.workers
    single = as_training_result(one_job, one_result, "single_worker")
    pair = as_training_result(two_job, two_result, f"{'two' if n == 2 else n}_workers_{network}")
    ratio = paired.ratio(two_label)
    floor = claim.min_efficiency.get(network)
    dlperf.ledger.speedup(f"per_worker_{n}_vs_1_{network}", ratio, floor=floor)
    dlperf.check(*([single] if check_single else []), pair)

    base = statistics.median(paired.throughput[one_label])
    per_worker = [statistics.median(w["throughput"]) for w in two_result.workers]
    acc1, acc2 = one_result.workers[0]["accuracy"], two_result.workers[0]["accuracy"]
    figures = (f"{network}, paired ({ratio.n} pairs of rounds): 1 worker {base:.1f} samples/s, {n} workers "
               f"{[round(p, 1) for p in per_worker]} samples/s each, efficiency {ratio.describe()}; "
               f"{_accuracy_text(acc1, acc2)}")
    print(figures)
    _assert_learned(claim, single, pair, acc1, acc2, figures)
    if floor is not None:
        _require(decide(ratio, 1 - floor) != REGRESSION, f"scaling efficiency below {floor}: {figures}")
    _assert_rate_limit(claim, network, batch_size, two_result, per_worker, figures)
    return figures


def _accuracy_text(acc1: Mapping[str, float], acc2: Mapping[str, float]) -> str:
    return (f"top-1 {acc1['top1']:.3f} -> {acc2['top1']:.3f}, top-5 {acc1['top5']:.3f} -> {acc2['top5']:.3f}")


def _assert_learned(claim: ScalingClaim, single: Any, pair: Any, acc1: Mapping[str, float],
                    acc2: Mapping[str, float], figures: str) -> None:
    _require(single.loss_fell() and pair.loss_fell(), f"loss did not fall: {figures}")
    _require(acc1["top1"] >= claim.min_top1, f"the single worker did not learn: {figures}")
    margin = claim.accuracy_margin
    _require(acc2["top1"] >= acc1["top1"] - margin, f"2-worker top-1 below the margin {margin}: {figures}")
    _require(acc2["top5"] >= acc1["top5"] - margin, f"2-worker top-5 below the margin {margin}: {figures}")


def _assert_rate_limit(claim: ScalingClaim, network: str, batch_size: int, two_result: JobResult,
                       per_worker: list[float], figures: str) -> None:
    if network == "netns_limited":
        # The limit is real: the slower worker moves at least one gradient's bytes per step through its veth.
        wire = param_bytes(two_result.workers[0]["params"]) * 8 / rate_bits_per_second(claim.rate)
        step = batch_size / min(per_worker)
        _require(step >= 0.8 * wire, f"step {step:.3f} s is faster than {claim.rate} allows ({wire:.3f} s): {figures}")


def _require(ok: bool, message: str) -> None:
    """A claim's check that holds under ``python -O`` too (a bare ``assert`` would vanish)."""
    if not ok:
        raise AssertionError(message)
