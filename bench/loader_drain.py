"""Does a paced loader-only round measure the loader, not what it buffered while idle?  (Not a test.)

A loader-only child in a paired group idles while the other variants take their rounds; its
loader keeps decoding into its buffers meanwhile. This times 12-batch rounds after a 0.5 s idle
spell, undrained and drained (``LoaderLoop.drain_prefetched``), against the loader's continuous
rate, for one framework's loader at the input pipeline test's smoke shapes (1 worker, 32 px, batch 16):

    python bench/loader_drain.py torch
    .tox/perf-tf/bin/python bench/loader_drain.py tensorflow
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from pytest_dlperf.child.datasets import FRAMEWORK_FORMATS, ImageSetSpec, ensure_image_set
from pytest_dlperf.child.loaders import LoaderLoop
from pytest_dlperf.profiles import scenario_for

SPEC = ImageSetSpec(num_classes=10, train_per_class=160, val_per_class=40, image_size=64)
BATCH, ROUND, IDLE = 16, 12, 0.5


def main(framework: str) -> None:
    data_dir = ensure_image_set(Path(tempfile.gettempdir()) / "dlperf-loader-drain", SPEC,
                                formats=(FRAMEWORK_FORMATS[framework],))
    scenario = scenario_for("smoke", framework, "resnet18", device="cpu", image_size=32, batch_size=BATCH,
                            data=FRAMEWORK_FORMATS[framework], data_dir=str(data_dir), loader_workers=1,
                            num_classes=SPEC.num_classes)
    loop = LoaderLoop(scenario)
    for _ in range(8):  # warm-up
        loop.step()

    def round_rate(drain: bool) -> float:
        time.sleep(IDLE)  # another child's round
        if drain:
            loop.drain_prefetched()
        start = time.perf_counter()
        for _ in range(ROUND):
            loop.step()
        return BATCH * ROUND / (time.perf_counter() - start)

    start = time.perf_counter()
    for _ in range(40):
        loop.step()
    continuous = BATCH * 40 / (time.perf_counter() - start)
    undrained = statistics.median(round_rate(False) for _ in range(10))
    drained = statistics.median(round_rate(True) for _ in range(10))
    print(f"{framework}: continuous {continuous:.0f} img/s; {ROUND}-batch rounds after {IDLE} s idle: "
          f"undrained {undrained:.0f}, drained {drained:.0f} img/s; batches drained per round {loop.drained}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "torch")
