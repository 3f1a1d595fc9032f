"""Seed 004 (PyTorch on one and two machines): DDP is the large-batch computation, scales, and keeps accuracy.

The seed trains ResNet on ImageNet on one VM and on two (``RANK=0``/``RANK=1``,
``torch.distributed``), and reports the time saved and top-1/top-5 after two epochs
(46.9%/72.6% on one VM, 51.6%/77.4% on two). Here, on CPU with gloo:

* DDP with 2 ranks of batch ``b`` ends with the same parameters as one process with
  batch ``2b`` after ``k`` steps (a BatchNorm-free CNN: BN statistics are per rank, so
  a BN model is not that computation); a 1-process batch-``b`` run must differ, which
  shows the comparison can fail;
* 1 vs 2 workers of ResNet-18 (32 px, batch 16 per worker, 2 epochs): throughput per
  worker, weak-scaling efficiency and top-1/top-5 on held-out data, on loopback and across
  two network namespaces behind a ``tbf`` rate limit. The
  1-worker job and the 2-worker job run at once and alternate timed rounds
  (:mod:`pytest_dlperf.processes.distributed.paced_job`), so the efficiency is a paired ratio with its interval,
  not two sequential runs' quotient that carries the machine's drift between them.
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_dlperf.judging.stats import claim_decided
from pytest_dlperf.processes import distributed as dist
from perf_tests.claims.scaling import ScalingClaim, check_paired_workers, check_scaling

pytestmark = pytest.mark.framework("torch")

EQUIVALENCE = dict(model="tiny_cnn", batch_size=8, image_size=16, num_classes=10, lr=0.05, momentum=0.9,
                   seed=0, train_samples=256, steps=6, warmup_steps=0, rounds=1, threads=1)
#: float32 sums in a different order (per-rank means averaged vs one mean): ~1e-7 relative; allow 1e-4.
PARAM_RTOL = 1e-4
SCALING = dict(model="resnet18", batch_size=16, image_size=32, num_classes=10, lr=0.01, momentum=0.9, seed=0,
               train_samples=512, val_samples=512, noise=2.0, epochs=2, warmup_steps=2, rounds=4, threads=1)
#: Two workers (twice the global batch, half the steps, same epochs) may lose this much top-1.
ACCURACY_MARGIN = 0.15
#: Above chance (10 classes) by a wide margin: the single worker really learned.
MIN_TOP1 = 0.5
#: 2 ranks x 1 thread on a 2-core machine, loopback or veth: at least this weak-scaling efficiency
#: (paired per-worker ratio; fails when stats.decide calls it below the floor), about 25% below the
#: lowest measured on the 2-core VMs (docs/evidence.md, "Data-parallel scaling").
MIN_EFFICIENCY = {"loopback": 0.35}
#: Pairs of timed rounds: each job's 2 epochs split into this many rounds (1 worker: 64 steps,
#: 6 a round after 4 warm-up steps; 2 workers: 32 steps, 3 a round after 2), so it is fixed here,
#: not taken from the ini key dlperf_pairs, which would change how much each round trains.
PAIRS = 10
RATE = "1gbit"
#: Fair, compute-bound weak scaling on this host: each rank on a core of its own (``core_per_rank``;
#: the 1-worker job gets one core too, not the machine), ~130 ms of convolution per step on one core
#: (a 40k-parameter CNN, 96 px, batch 64) against ~160 KB of gradient, so the efficiency is about
#: DDP and the all-reduce, not about threads or bandwidth.
COMPUTE_BOUND = dict(model="tiny_cnn", batch_size=64, image_size=96, num_classes=10, lr=0.02, momentum=0.9,
                     seed=0, train_samples=2048, val_samples=512, noise=2.0, epochs=1, warmup_steps=4, threads=1,
                     core_per_rank=True)
#: About 5 timed rounds in each process of a job (the runner makes it 6): 4 steps a round for the single
#: worker, 2 for each of the two, where 1-step rounds read the two workers above one (1.16x, 1.07x).
COMPUTE_BOUND_PAIRS = 10
#: About 10% below the lowest efficiency measured on the 2-core VMs and above what the pinning lost
#: gives (docs/evidence.md, "Data-parallel scaling").
MIN_COMPUTE_BOUND_EFFICIENCY = 0.7
COMPUTE_BOUND_CLAIM = ScalingClaim(min_efficiency={"core_per_worker": MIN_COMPUTE_BOUND_EFFICIENCY},
                                   accuracy_margin=ACCURACY_MARGIN, min_top1=MIN_TOP1, rate=RATE)
CLAIM = ScalingClaim(min_efficiency=MIN_EFFICIENCY, accuracy_margin=ACCURACY_MARGIN, min_top1=MIN_TOP1,
                     rate=RATE)
#: Two jobs one after the other (a launcher that cannot pace) carry the machine's drift between them.
SEQUENTIAL_CLAIM = dataclasses.replace(CLAIM, min_efficiency={"loopback": 0.3})
TIMEOUT = 240.0


def run(workers, config, launcher=None, label="job", tmp_path=None):
    job = dist.Job("torch", workers, config, timeout=TIMEOUT, label=label,
                   **({"launcher": launcher} if launcher is not None else {}))
    try:
        return job, dist.run_job(job, tmp_path)
    except dist.JobFailed as exc:
        pytest.fail(exc.report(), pytrace=False)


@pytest.mark.distributed(workers=2, launcher="local")
def test_ddp_parameters_equal_single_process_large_batch(distributed, tmp_path):
    _, ddp = run(2, EQUIVALENCE, distributed.launcher, label="ddp2x8", tmp_path=tmp_path)
    _, big = run(1, dict(EQUIVALENCE, batch_size=16), label="single16", tmp_path=tmp_path)
    _, small = run(1, EQUIVALENCE, label="single8", tmp_path=tmp_path)
    rank0, rank1 = ddp.workers
    assert rank0["backend"] == "gloo" and rank0["world"] == 2

    name, rel = dist.max_param_difference(rank0["params"], rank1["params"])
    assert rel == 0.0, f"DDP replicas diverged: {name} differs by {rel:.3g} between rank 0 and rank 1"
    name, rel = dist.max_param_difference(rank0["params"], big.workers[0]["params"])
    assert rel <= PARAM_RTOL, (
        f"DDP 2x8 vs one process batch 16 after {EQUIVALENCE['steps']} steps: {name} differs by {rel:.3g} "
        f"(relative), tolerance {PARAM_RTOL:g}"
    )
    name, control = dist.max_param_difference(small.workers[0]["params"], big.workers[0]["params"])
    assert control > 100 * PARAM_RTOL, f"control: batch 8 vs 16 should differ, got {control:.3g} on {name}"


#: loopback: this host through the user's launcher (--dlperf-launcher, local by default); netns_limited:
#: two network namespaces built for the test behind a tbf rate limit, removed after it. Two namespaces
#: without a limit read as loopback does (a veth pair is as fast as lo); a job across hosts without a
#: limit is test_engines.py's, through each engine.
NETWORK_PARAMS = [
    pytest.param("loopback", marks=pytest.mark.distributed(workers=2)),
    pytest.param("netns_limited",
                 marks=[pytest.mark.slow, pytest.mark.distributed(workers=2, launcher="netns", rate=RATE)]),
]


@pytest.mark.parametrize("network", NETWORK_PARAMS)
def test_two_workers_scale_and_keep_accuracy(dlperf, network, distributed, tmp_path):
    """The 1-worker job (this host) and the 2-worker job (on ``network``) alternate timed rounds.

    A launcher that cannot pace a job's ranks (ssh, MPI, Slurm: ``paced_job.paced_problem``)
    gets the sequential measurement: one job after the other.
    """
    one = dist.Job("torch", 1, SCALING, timeout=TIMEOUT, label="single")
    two = dist.Job("torch", 2, SCALING, timeout=TIMEOUT, label=f"ddp2-{network}", launcher=distributed.launcher)
    check_scaling(dlperf, CLAIM, SEQUENTIAL_CLAIM, network, SCALING["batch_size"], one, two, PAIRS, tmp_path)


# Slow tier: its claim is decided by process pairs (about four, two generations, on a quiet 2-core VM), each
# training every job in full, so it takes more than a quick test's minute whatever its rounds.
@pytest.mark.slow
@pytest.mark.distributed(workers=2, launcher="local")
def test_compute_bound_weak_scaling_with_a_core_per_worker(dlperf, distributed):
    """Seed 002's table (1, 2 and 4 workers: speed per worker and held-out accuracy), fairly: 1 worker
    on one core against N workers on a core each, paired round by round (2 processes per job, so one
    process's luck cannot decide). 4 workers where this process may use 4 CPUs (the 16-core GPU box)."""
    import os

    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        pytest.skip(f"needs 2 CPUs of its own for a core per worker; this process may use {cores}")
    counts = [n for n in (2, 4) if n <= cores]
    if len(counts) < 2:
        print(f"4 workers not run: this process may use {cores} CPUs, 4 workers need a core each")
    jobs = [dist.Job("torch", 1, COMPUTE_BOUND, timeout=TIMEOUT, label="single-core")]
    jobs += [dist.Job("torch", n, COMPUTE_BOUND, timeout=TIMEOUT, label=f"ddp{n}-core-per-worker") for n in counts]
    paired = dlperf.run_paired_jobs(*jobs, pairs=COMPUTE_BOUND_PAIRS, processes=2,
                                    decided=claim_decided(MIN_COMPUTE_BOUND_EFFICIENCY, [j.label for j in jobs[1:]]))
    assert len(paired.results[jobs[0].label][0].workers[0]["cpus"]) == 1
    for job in jobs[1:]:
        used = sorted(tuple(w["cpus"]) for w in paired.results[job.label][0].workers)
        assert len(set(used)) == job.workers and all(len(c) == 1 for c in used), (
            f"{job.label}: its ranks did not each get a core of their own: {used}")
    for i, job in enumerate(jobs[1:]):
        check_paired_workers(dlperf, COMPUTE_BOUND_CLAIM, "core_per_worker", COMPUTE_BOUND["batch_size"], paired,
                             jobs[0].label, job.label, check_single=i == 0)
