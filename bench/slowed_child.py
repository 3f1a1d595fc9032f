"""The training child with every step made slower by real work: ``DLPERF_BENCH_SLOWDOWN`` (a fraction).

For ``verdict_power.py``: after each step of the torch core (the device synchronised first, so
the step's work is done), the host busy-waits for that fraction of the step's own duration, so
the slowdown is a fixed share of every step whatever the machine's drift.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from pytest_dlperf.child import train
from pytest_dlperf.child.cores import torch_core

SLOWDOWN = float(os.environ.get("DLPERF_BENCH_SLOWDOWN", "0"))
_step = torch_core.TorchTrainingLoop.step


def slowed_step(self: torch_core.TorchTrainingLoop):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    loss = _step(self)
    if torch.cuda.is_available() and self.scenario.device == "cuda":
        torch.cuda.synchronize()
    now = time.perf_counter()
    end = now + SLOWDOWN * (now - start)
    while time.perf_counter() < end:
        pass
    return loss


if __name__ == "__main__":
    torch_core.TorchTrainingLoop.step = slowed_step  # type: ignore[method-assign]
    sys.exit(train.main(sys.argv[1:]))
