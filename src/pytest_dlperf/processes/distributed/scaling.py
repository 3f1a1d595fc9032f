"""Weak-scaling efficiency: how much of N workers' ideal throughput a data-parallel job reaches."""

from __future__ import annotations

from typing import Sequence


def scaling_efficiency(single_worker_throughput: float, per_worker_throughputs: Sequence[float]) -> float:
    """Weak scaling: the N workers' total throughput over N times one worker's."""
    n = len(per_worker_throughputs)
    return sum(per_worker_throughputs) / (n * single_worker_throughput)
