"""The spread of MXNet's timed rounds, by thread setting: the core's fp32 ResNet-18 at the smoke profile
(the shape `tox -m ci`'s MXNet A/B times), 12 rounds per child, the settings alternating child by child.

    python bench/mxnet_round_noise.py [REPEATS]     # in an environment with mxnet (tox -e perf-mxnet)

default: OpenMP's one thread per core; omp1: ``intra_op_threads=1`` (OMP_NUM_THREADS=1); naive:
``MXNET_ENGINE_TYPE=NaiveEngine`` (no engine worker threads). Output quoted in docs/evidence.md."""

from __future__ import annotations

import math
import statistics
import sys

from pytest_dlperf.processes.runner import run_scenario
from pytest_dlperf.profiles import scenario_for

VARIANTS = {"default": {}, "omp1": {"intra_op_threads": 1}, "naive": {"env": {"MXNET_ENGINE_TYPE": "NaiveEngine"}}}


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for repeat in range(repeats):
        for name, overrides in VARIANTS.items():
            result = run_scenario(scenario_for("smoke", "mxnet", "resnet18", precision="fp32", rounds=12, **overrides))
            rounds = result.metrics["throughput"].samples
            spread = statistics.stdev(math.log(v) for v in rounds)
            print(f"{name} {repeat} mean {statistics.mean(rounds):.2f} sd(log) {spread:.3f}",
                  [round(v, 1) for v in rounds], flush=True)


if __name__ == "__main__":
    main()
