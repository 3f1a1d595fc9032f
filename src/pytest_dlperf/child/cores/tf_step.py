"""Your own TensorFlow training step, measured like the built-in cores' (``Scenario.step``).

``make_step(scenario)`` returns a callable (typically a ``tf.function``) that runs one training
step and returns its loss, a scalar tensor or a float; attributes ``samples_per_step``,
``flops_per_step`` and ``unit`` as for torch (:class:`pytest_dlperf.child.usercode.UserStep`). Before
``make_step`` runs, the core does what it does for its own models: thread pools, the visible
devices (a CPU scenario hides the GPUs), TF32 and the Keras mixed-precision policy from
``scenario.precision``, and ``keras.utils.set_random_seed(scenario.seed)``. The device is
synchronised at every timing boundary (``tf.test.experimental.sync_devices``) on a GPU.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import tensorflow as tf

from pytest_dlperf.scenario import Scenario
from pytest_dlperf.child.usercode import UserStep
from pytest_dlperf.child.cores.tf_core import configure, environment
from pytest_dlperf.child.measure import measure


class TfUserStepLoop:
    """A :class:`~pytest_dlperf.child.measure.TrainingLoop` around the callable your ``make_step`` returned."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.synchronous = scenario.device == "cpu"
        self.compiles = scenario.jit_compile
        self.user_step = UserStep(scenario)
        self.samples_per_step = self.user_step.samples_per_step
        self.flops_per_step = self.user_step.flops_per_step

    def step(self) -> Any:
        loss = self.user_step()
        if isinstance(loss, (tf.Tensor, tf.Variable)):
            if loss.shape.num_elements() != 1:
                raise self.user_step.not_a_loss(loss, loss.shape)
            return tf.reshape(tf.cast(loss, tf.float32), [])
        if isinstance(loss, numbers.Real) and not isinstance(loss, bool):
            return float(loss)
        raise self.user_step.not_a_loss(loss)

    def sync(self) -> None:
        if not self.synchronous:
            tf.test.experimental.sync_devices()

    def losses_to_floats(self, handles: Sequence[Any]) -> list[float]:
        return [float(h.numpy()) if isinstance(h, tf.Tensor) else float(h) for h in handles]

    def peak_device_memory(self) -> int | None:
        if self.scenario.device != "cuda":
            return None
        return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])


def build(scenario: Scenario) -> TfUserStepLoop:
    """The configured process's loop around your step (also one side of an alternation in one process)."""
    configure(scenario)
    return TfUserStepLoop(scenario)


def describe(scenario: Scenario, loop: TfUserStepLoop) -> dict[str, Any]:
    return environment(scenario)


def train(scenario: Scenario, progress: Any = None) -> tuple[Any, list[float], dict[str, Any], dict[str, Any]]:
    """Entry point used by the worker for ``framework='tensorflow'`` with ``step=``."""
    loop = build(scenario)
    metrics, losses, details = measure(loop, scenario, progress)
    loop.user_step.throughput_unit(metrics)
    details["user_step"] = {"step": scenario.step, "samples_per_step": loop.samples_per_step}
    return metrics, losses, details, describe(scenario, loop)
