"""Your own TensorFlow training loop (``Scenario.loop``): ``model.fit`` with ``steps.keras()``, or a loop of yours.

Run as a TensorFlow ``step=`` is (:mod:`.tf_step`): before your loop starts, the core sets up what
it sets up for its own models (thread pools, the visible devices, TF32 and the Keras
mixed-precision policy from ``scenario.precision``, ``keras.utils.set_random_seed``); the harness
and the figures are the torch loop's (:mod:`pytest_dlperf.child.loop`), with the device
synchronised at every round's boundaries (``tf.test.experimental.sync_devices``) on a GPU.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from pytest_dlperf.child import loop as marked
from pytest_dlperf.child.cores.tf_core import configure, environment
from pytest_dlperf.scenario import Scenario


def _peak_gpu_memory() -> int:
    return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])


def build(scenario: Scenario, alternating: bool = False) -> marked.MarkedLoop:
    configure(scenario)
    gpu = scenario.device == "cuda"
    if gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")
    return marked.MarkedLoop(
        marked.Steps(scenario, alternating),
        sync=tf.test.experimental.sync_devices if gpu else (lambda: None),
        synchronous=not gpu,
        peak_device_memory=_peak_gpu_memory if gpu else (lambda: None),
    )


def train(scenario: Scenario, progress: Any = None) -> tuple[Any, list[float], dict[str, Any], dict[str, Any]]:
    """Entry point used by the worker for ``framework='tensorflow'`` with ``loop=``."""
    metrics, losses, details = marked.train(scenario, build(scenario), progress)
    return metrics, losses, details, describe(scenario)


def describe(scenario: Scenario, loop: Any = None) -> dict[str, Any]:
    return environment(scenario)
