"""Makes every training step of a torch worker slower by real work, for the A/B self-test.

On ``PYTHONPATH`` with ``DLPERF_SELFTEST_SLOWDOWN=<fraction>`` set, a ``pytest_dlperf.child.train``
process busy-waits after each step for that fraction of the step's own duration: a slowdown
that is a fixed share of every step, whatever the machine's drift (the same injection as
bench/slowed_child.py). Any other process started with this folder on its path is untouched.
"""

import os
import sys
import time

_SLOWDOWN = float(os.environ.get("DLPERF_SELFTEST_SLOWDOWN", "0") or 0)

if _SLOWDOWN > 0 and "pytest_dlperf.child.train" in sys.orig_argv:
    from pytest_dlperf.child.cores import torch_core

    _step = torch_core.TorchTrainingLoop.step

    def _slowed_step(self):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        loss = _step(self)
        now = time.perf_counter()
        end = now + _SLOWDOWN * (now - start)
        while time.perf_counter() < end:
            pass
        return loss

    torch_core.TorchTrainingLoop.step = _slowed_step
