"""MXNet input pipeline: ``mx.io.ImageRecordIter`` over ``<split>.rec`` with its ``.idx``.

As ``train_imagenet.py`` (seed 000) reads ImageNet: decoding and augmentation in
``preprocess_threads`` C++ threads (``--data-nthreads``), the index giving random
access for the shuffle. ``loader_workers`` is the thread count; the iterator has no
in-process mode, so 0 means one thread.
"""

from __future__ import annotations

from typing import Any, Iterator

import mxnet as mx

from pytest_dlperf.child.datasets import recordio_paths
from pytest_dlperf.scenario import Scenario
from pytest_dlperf.child.loaders import MEAN_255, STD_255, check_data

Batch = tuple[mx.nd.NDArray, mx.nd.NDArray]


def record_iter(scenario: Scenario, split: str = "train") -> mx.io.ImageRecordIter:
    check_data(scenario, split)
    rec, idx = recordio_paths(scenario.data_dir or "", split)
    training = split == "train"
    size = scenario.image_size
    return mx.io.ImageRecordIter(
        path_imgrec=str(rec),
        path_imgidx=str(idx),
        data_shape=(3, size, size),
        resize=size,
        batch_size=scenario.batch_size,
        shuffle=training,
        seed=scenario.seed,
        round_batch=training,
        preprocess_threads=max(1, scenario.loader_workers),
        mean_r=MEAN_255[0], mean_g=MEAN_255[1], mean_b=MEAN_255[2],
        std_r=STD_255[0], std_g=STD_255[1], std_b=STD_255[2],
    )


def endless(scenario: Scenario) -> Iterator[Batch]:
    """Training batches, epoch after epoch (the iterator is reset, and reshuffled, at each end)."""
    it = record_iter(scenario, "train")
    while True:
        for batch in it:
            yield batch.data[0], batch.label[0]
        it.reset()


def eval_batches(scenario: Scenario) -> Iterator[Batch]:
    """The validation split once; the padding of the last batch is cut off."""
    for batch in record_iter(scenario, "val"):
        keep = scenario.batch_size - (batch.pad or 0)
        yield batch.data[0][:keep], batch.label[0][:keep]


def wait(batch: Batch) -> None:
    batch[0].wait_to_read()


def environment() -> dict[str, Any]:
    return {"framework": "mxnet", "framework_version": mx.__version__}
