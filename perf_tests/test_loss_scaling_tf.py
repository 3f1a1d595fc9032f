"""Loss scaling really works in the TensorFlow core (issue 3; seeds 000 and 001 train in FP16).

A small classifier is trained through the core's own step (``TfTrainingLoop``, the
``mixed_float16`` policy, ``make_optimizer``), with a loss weight of 2**-22, as a small
auxiliary loss would have: the gradient of the logits is below float16's smallest
subnormal (2**-24), so in plain FP16 every gradient is exactly zero and nothing trains.
The learning rate is divided by the same weight, so in FP32 this is ordinary training.
Dynamic loss scaling must recover the gradients (the loss falls as in FP32); started
far too high, it must skip the overflowing steps, count them and halve the scale once
for each. Runs in-process on the CPU in a few seconds; the global Keras policy is reset
after each test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

pytestmark = pytest.mark.framework("tensorflow")

LOSS_WEIGHT = 2.0**-22
#: Learning rate of the unweighted problem; SGD gets LEARNING_RATE / LOSS_WEIGHT.
LEARNING_RATE = 0.1
BATCH, IMAGE, CLASSES = 64, 8, 4
#: float16 overflows above 65504: a logit gradient of ~2**-28 times 2**50 is ~2**22.
TOO_HIGH_SCALE = 2.0**50


@dataclass
class Run:
    losses: list[float]  # unweighted cross-entropy per step
    skipped: int
    final_scale: float | None
    weights_moved: bool

    def fell(self, factor: float = 0.5) -> bool:
        """The mean of the last 4 steps is below ``factor`` x the mean of the first 4."""
        return np.mean(self.losses[-4:]) < factor * np.mean(self.losses[:4])


@pytest.fixture
def tf_policy(request):
    """In-process TensorFlow, holding the CPUs' lock like every measured run (another run's scenario
    would distort it, and it theirs); the mixed-precision policy is global, so restore it afterwards."""
    import keras

    from pytest_dlperf.processes.devicelock import device_lock

    with device_lock(["cpu"], owner=request.node.nodeid):
        yield
    keras.mixed_precision.set_global_policy("float32")


def scenario(precision: str, loss_scale: str | float = "dynamic"):
    from pytest_dlperf.scenario import Scenario

    return Scenario(framework="tensorflow", model="mlp", precision=precision, batch_size=BATCH,
                    image_size=IMAGE, num_classes=CLASSES, warmup_steps=0, rounds=4, steps_per_round=15,
                    lr=LEARNING_RATE / LOSS_WEIGHT, momentum=0.9, weight_decay=0.0, loss_scale=loss_scale,
                    label=f"{precision}-{loss_scale}")


def small_model(s):
    """A 2-layer MLP in the current global policy, the same initial weights every time."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((3, s.image_size, s.image_size))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(64, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(s.num_classes)(x))


def weighted_loss(labels, logits):
    import keras

    return LOSS_WEIGHT * keras.ops.mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


def data(s):
    import tensorflow as tf

    from pytest_dlperf.child.synthetic import batches

    return [(tf.constant(x), tf.constant(y.astype(np.int32)))
            for x, y in batches(4, s.batch_size, s.image_size, s.num_classes, seed=1)]


def train(precision: str, loss_scale: str | float = "dynamic", initial_scale: float | None = None) -> Run:
    from pytest_dlperf.child.cores import tf_core
    from pytest_dlperf.child.measure import measure

    s = scenario(precision, loss_scale)
    tf_core.configure_precision(s)
    model = small_model(s)
    before = [w.copy() for w in model.get_weights()]
    optimizer = tf_core.make_optimizer(s, initial_scale or tf_core.INITIAL_LOSS_SCALE)
    loop = tf_core.TfTrainingLoop(s, data(s), model=model, optimizer=optimizer, loss_fn=weighted_loss)
    _, losses, details = measure(loop, s)
    moved = any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    return Run([v / LOSS_WEIGHT for v in losses], details["skipped_steps"], details["final_loss_scale"], moved)


def test_fp16_gradients_underflow_to_zero_without_loss_scaling(tf_policy):
    import keras
    import tensorflow as tf

    s = scenario("fp32")
    x, y = data(s)[0]
    grads = {}
    for policy in ("float32", "mixed_float16"):
        keras.mixed_precision.set_global_policy(policy)
        model = small_model(s)
        with tf.GradientTape() as tape:
            loss = weighted_loss(y, tf.cast(model(x, training=True), tf.float32))
        grads[policy] = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    assert all(np.count_nonzero(g) > 0 for g in grads["float32"]), "the FP32 control has zero gradients"
    nonzero = [int(np.count_nonzero(g)) for g in grads["mixed_float16"]]
    assert nonzero == [0] * len(nonzero), f"expected every FP16 gradient to underflow to 0, non-zeros: {nonzero}"

    fp32 = train("fp32")
    plain_fp16 = train("amp_fp16", loss_scale=1.0)  # a static scale of 1 is no loss scaling
    assert fp32.fell(), f"the FP32 control did not train: {fp32.losses[:4]} ... {fp32.losses[-4:]}"
    assert not plain_fp16.weights_moved, "FP16 without loss scaling changed the weights: no underflow?"
    assert not plain_fp16.fell(0.99), f"FP16 without loss scaling trained: {plain_fp16.losses[-4:]}"


def test_dynamic_loss_scaling_recovers_the_gradients_and_trains(tf_policy):
    fp32 = train("fp32")
    scaled = train("amp_fp16")
    assert scaled.weights_moved
    assert scaled.fell(), f"FP16 with dynamic loss scaling did not train: {scaled.losses[:4]} ... {scaled.losses[-4:]}"
    # Recovered, not just non-zero: it ends about where FP32 ends.
    assert np.mean(scaled.losses[-4:]) < 2 * np.mean(fp32.losses[-4:]) + 0.05, (
        f"FP16+loss scaling ends at {np.mean(scaled.losses[-4:]):.4f}, FP32 at {np.mean(fp32.losses[-4:]):.4f}"
    )


def test_overflowing_steps_are_skipped_and_counted(tf_policy):
    run = train("amp_fp16", initial_scale=TOO_HIGH_SCALE)
    frozen = train("amp_fp16", loss_scale=1.0)  # the weights never move: the loss of the initial model
    assert run.skipped >= 1, "a scale of 2**50 overflows float16, yet no step was skipped"
    assert run.final_scale == TOO_HIGH_SCALE / 2**run.skipped, (
        f"{run.skipped} skipped steps should leave the scale at 2**{50 - run.skipped}, it is {run.final_scale:g}"
    )
    assert run.skipped < len(run.losses) // 2, f"{run.skipped} of {len(run.losses)} steps skipped: it never settled"
    # A skipped step leaves the weights as they were: the first losses are the initial model's.
    np.testing.assert_allclose(run.losses[: run.skipped], frozen.losses[: run.skipped], rtol=1e-6)
    assert run.fell(), f"it did not train once the scale settled: {run.losses[:4]} ... {run.losses[-4:]}"
