"""TensorFlow input pipeline: ``tf.data`` over TFRecord files of ``tf.train.Example``.

The tf.data performance guide's shape: shuffle and repeat the records, decode and
resize them with ``num_parallel_calls=tf.data.AUTOTUNE``, batch, ``prefetch``.
``loader_workers`` sizes tf.data's private thread pool; 0 means no parallelism at
all (sequential map, no prefetch): the loading happens when the step asks for data.
"""

from __future__ import annotations

from typing import Any, Iterator

import tensorflow as tf

from pytest_dlperf.child.datasets import TF_IMAGE_KEY, TF_LABEL_KEY, tfrecord_path
from pytest_dlperf.scenario import Scenario
from pytest_dlperf.child.loaders import MEAN_255, STD_255, check_data

SHUFFLE_BUFFER = 2048
FEATURES = {
    TF_IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
    TF_LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
}


def channels_first(scenario: Scenario) -> bool:
    """NHWC is TensorFlow's layout on CPU and GPU unless the scenario asks for NCHW."""
    return scenario.data_format == "NCHW"


def dataset(scenario: Scenario, split: str = "train") -> tf.data.Dataset:
    check_data(scenario, split)
    training = split == "train"
    parallel = scenario.loader_workers > 0
    size = scenario.image_size
    mean = tf.constant(MEAN_255, dtype=tf.float32)
    std = tf.constant(STD_255, dtype=tf.float32)

    def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(record, FEATURES)
        image = tf.io.decode_jpeg(example[TF_IMAGE_KEY], channels=3)
        image = tf.image.resize(image, (size, size))  # float32, bilinear
        image = (image - mean) / std
        if channels_first(scenario):
            image = tf.transpose(image, (2, 0, 1))
        return image, tf.cast(example[TF_LABEL_KEY], tf.int32)

    ds = tf.data.TFRecordDataset([str(tfrecord_path(scenario.data_dir or "", split))])
    if training:
        ds = ds.shuffle(SHUFFLE_BUFFER, seed=scenario.seed, reshuffle_each_iteration=True).repeat()
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE if parallel else None, deterministic=True)
    ds = ds.batch(scenario.batch_size, drop_remainder=training)
    if parallel:
        ds = ds.prefetch(tf.data.AUTOTUNE)
        options = tf.data.Options()
        options.threading.private_threadpool_size = scenario.loader_workers
        ds = ds.with_options(options)
    return ds


def endless(scenario: Scenario) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
    return iter(dataset(scenario, "train"))


def eval_batches(scenario: Scenario) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
    return iter(dataset(scenario, "val"))


def wait(batch: tuple[tf.Tensor, tf.Tensor]) -> None:
    """Eager tensors from a tf.data iterator are already computed."""


def environment() -> dict[str, Any]:
    return {"framework": "tensorflow", "framework_version": tf.__version__}
