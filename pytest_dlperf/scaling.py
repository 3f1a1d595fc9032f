"""The scaling claim of seeds 002 and 004, shared by every framework's distributed test.

One worker against two, after the same epochs: throughput per worker, weak-scaling
efficiency and top-1/top-5 on held-out data. Figures go to the baselines through the
``dlperf`` fixture; the claims are asserted here, with one summary line of figures.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping

from . import distributed as dist
from .netns import rate_bits_per_second


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


def check_two_workers(dlperf: Any, claim: ScalingClaim, network: str, batch_size: int,
                      one: tuple[dist.Job, dist.JobResult], two: tuple[dist.Job, dist.JobResult]) -> str:
    """Record both jobs against the baselines, then assert the claim; returns the summary line."""
    (one_job, one_result), (two_job, two_result) = one, two
    single = dist.as_training_result(one_job, one_result, "single_worker")
    pair = dist.as_training_result(two_job, two_result, f"two_workers_{network}")
    base = statistics.median(one_result.workers[0]["throughput"])
    per_worker = [statistics.median(w["throughput"]) for w in two_result.workers]
    efficiency = dist.scaling_efficiency(base, per_worker)
    rounds = zip(*[w["throughput"] for w in two_result.workers])
    dlperf.metric(f"two_workers_{network}", "scaling_efficiency", [sum(r) / (2 * base) for r in rounds], "x")
    dlperf.check(single, pair)

    acc1, acc2 = one_result.workers[0]["accuracy"], two_result.workers[0]["accuracy"]
    summary = (f"{network}: 1 worker {base:.1f} samples/s, 2 workers {[round(p, 1) for p in per_worker]} samples/s "
               f"each, efficiency {efficiency:.2f}; top-1 {acc1['top1']:.3f} -> {acc2['top1']:.3f}, top-5 "
               f"{acc1['top5']:.3f} -> {acc2['top5']:.3f}; wall {one_result.wall_seconds:.1f} s vs "
               f"{two_result.wall_seconds:.1f} s")
    print(summary)
    assert single.loss_fell() and pair.loss_fell(), f"loss did not fall: {summary}"
    assert acc1["top1"] >= claim.min_top1, f"the single worker did not learn: {summary}"
    margin = claim.accuracy_margin
    assert acc2["top1"] >= acc1["top1"] - margin, f"2-worker top-1 below the margin {margin}: {summary}"
    assert acc2["top5"] >= acc1["top5"] - margin, f"2-worker top-5 below the margin {margin}: {summary}"
    if network in claim.min_efficiency:
        floor = claim.min_efficiency[network]
        assert efficiency >= floor, f"scaling efficiency below {floor}: {summary}"
    if network == "netns_limited":
        # The limit is real: the slower worker moves at least one gradient's bytes per step through its veth.
        wire = dist.param_bytes(two_result.workers[0]["params"]) * 8 / rate_bits_per_second(claim.rate)
        step = batch_size / min(per_worker)
        assert step >= 0.8 * wire, f"step {step:.3f} s is faster than {claim.rate} allows ({wire:.3f} s): {summary}"
    return summary
