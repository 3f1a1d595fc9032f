"""Dynamic loss scaling in MXNet really rescues float16 gradients that underflow.

The model is small on purpose: a linear softmax classifier in float16 with float32
master weights (``net.cast('float16')`` + SGD ``multi_precision``, seed 000's
``--dtype float16`` recipe). Its loss carries a weight of 2**-20, the size of a loss
averaged over a million elements (pixels, tokens), and the learning rate is 2**20
larger, so in exact arithmetic it takes the same steps as a plain classifier. In
float16 its gradients do not exist: the gradient of the logits, 2**-20 * (p - y) / 32
(mean over a batch of 32), is below half of float16's smallest subnormal (2**-24) and
rounds to zero. Trained three ways:

- float32: the reference, it learns;
- float16 without scaling: every gradient is exactly zero, the weights never move,
  the loss stays where it started;
- float16 with ``mxnet.contrib.amp``'s dynamic loss scaler (``amp.init_trainer`` +
  ``amp.scale_loss``): it learns like float32. Its first steps overflow, as every
  float16 loss does with MXNet's initial scale of 2**16 (65536 is above float16's
  largest value, 65504): those updates are skipped, which the test checks by
  comparing the weights, and counted by the core's ``OverflowCounter``.

Why this model and not a ResNet: MXNet 1.9 has no float16 GEMM or convolution on CPU
("FP16 gemm on cpu not implemented"), so the classifier is written with
``broadcast_mul`` + ``sum``, which do have float16 CPU kernels. Each variant trains in
its own process (``python this_file.py VARIANT``) because ``amp.init()`` rewrites
MXNet's operators for the rest of the process it runs in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.framework("mxnet")

LOSS_WEIGHT = 2.0 ** -20
BATCH_SIZE = 32
IMAGE_SIZE = 4  # 3 x 4 x 4 = 48 features
NUM_CLASSES = 10
NOISE = 3.0
STEPS = 60
POOL = 8
LEARNING_RATE = 0.05
#: MXNet 1.9 LossScaler's starting scale.
AMP_INITIAL_SCALE = 2.0 ** 16
VARIANTS = ("fp32", "fp16", "fp16_dynamic")


def train_linear(variant: str) -> dict[str, Any]:
    """Train the classifier one way; runs in a child process (see the module docstring)."""
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon
    from mxnet.contrib import amp

    from pytest_dlperf.child.cores.mxnet_core import OverflowCounter
    from pytest_dlperf.child.synthetic import batches

    dynamic = variant == "fp16_dynamic"
    dtype = "float32" if variant == "fp32" else "float16"
    if dynamic:
        amp.init()
    mx.random.seed(0)

    class Linear(gluon.Block):
        """``x @ weight.T + bias`` from broadcast_mul + sum (float16 has no CPU GEMM)."""

        def __init__(self, classes: int, features: int):
            super().__init__()
            self.weight = self.params.get("weight", shape=(classes, features), init=mx.init.Normal(0.01))
            self.bias = self.params.get("bias", shape=(classes,), init="zeros")

        def forward(self, x: Any) -> Any:
            x = x.flatten().expand_dims(1)
            w = self.weight.data().expand_dims(0)
            return mx.nd.broadcast_mul(x, w).sum(axis=2) + self.bias.data().expand_dims(0)

    net = Linear(NUM_CLASSES, 3 * IMAGE_SIZE * IMAGE_SIZE)
    net.initialize()
    net.cast(dtype)
    trainer = gluon.Trainer(
        net.collect_params(), "sgd",
        {"learning_rate": LEARNING_RATE / LOSS_WEIGHT, "momentum": 0.9, "multi_precision": True},
    )
    counter = None
    if dynamic:
        amp.init_trainer(trainer)
        counter = OverflowCounter(trainer)
    weighted_loss = gluon.loss.SoftmaxCrossEntropyLoss(weight=LOSS_WEIGHT)
    plain_loss = gluon.loss.SoftmaxCrossEntropyLoss()
    data = [
        (mx.nd.array(x).astype(dtype), mx.nd.array(y).astype(dtype))
        for x, y in batches(POOL, BATCH_SIZE, IMAGE_SIZE, NUM_CLASSES, seed=0, noise=NOISE)
    ]

    losses, zero_grad_steps, skipped_but_moved, updated = [], 0, 0, 0
    for i in range(STEPS):
        x, y = data[i % POOL]
        before = net.weight.data().asnumpy().copy()
        skipped_before = counter.skipped if counter else 0
        with autograd.record():
            logits = net(x)
            loss = weighted_loss(logits, y).mean()
            if dynamic:
                with amp.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
        if not dynamic:
            loss.backward()
        zero_grad_steps += int(not np.any(net.weight.grad().asnumpy()))
        trainer.step(1)  # the loss is already a mean over the batch
        moved = bool(np.any(net.weight.data().asnumpy() != before))
        if counter and counter.skipped > skipped_before:
            skipped_but_moved += int(moved)
        else:
            updated += int(moved)
        # The curve is the unweighted loss in float32, so it is comparable between variants.
        losses.append(float(plain_loss(logits.astype("float32"), y.astype("float32")).mean().asscalar()))
    return {
        "variant": variant,
        "losses": losses,
        "zero_grad_steps": zero_grad_steps,
        "updated_steps": updated,
        "skipped_steps": counter.skipped if counter else 0,
        "skipped_steps_that_moved_weights": skipped_but_moved,
        "final_loss_scale": counter.loss_scale if counter else None,
    }


def run_variant(variant: str) -> dict[str, Any]:
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, MXNET_SAFE_ACCUMULATION="1",
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.run([sys.executable, __file__, variant], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"{variant}: the training child failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    return {variant: run_variant(variant) for variant in VARIANTS}


def test_float32_reference_learns(runs):
    ref = runs["fp32"]
    first, last = mean(ref["losses"][:POOL]), mean(ref["losses"][-POOL:])
    assert last < 0.5 * first, f"float32 reference did not learn: loss {first:.3f} -> {last:.3f}"


def test_plain_float16_gradients_underflow_and_nothing_trains(runs):
    plain = runs["fp16"]
    assert plain["zero_grad_steps"] == STEPS, (
        f"expected every float16 gradient to underflow to zero, but {STEPS - plain['zero_grad_steps']} of "
        f"{STEPS} steps had a non-zero gradient: the model no longer shows the underflow"
    )
    assert plain["updated_steps"] == 0, f"weights moved in {plain['updated_steps']} steps with zero gradients"
    first, last = mean(plain["losses"][:POOL]), mean(plain["losses"][-POOL:])
    assert last >= first - 1e-3, f"unscaled float16 loss fell ({first:.3f} -> {last:.3f}): no underflow shown"


def test_dynamic_loss_scaling_skips_overflows_and_trains(runs):
    dyn, ref = runs["fp16_dynamic"], runs["fp32"]
    assert dyn["skipped_steps"] >= 1, "no step overflowed at the initial scale 2**16, so none was skipped"
    assert dyn["skipped_steps_that_moved_weights"] == 0, (
        f"{dyn['skipped_steps_that_moved_weights']} update(s) counted as skipped changed the weights"
    )
    assert dyn["skipped_steps"] + dyn["updated_steps"] == STEPS, f"steps neither skipped nor applied: {dyn}"
    assert dyn["final_loss_scale"] < AMP_INITIAL_SCALE, f"loss scale never decreased: {dyn['final_loss_scale']}"
    first, last = mean(dyn["losses"][:POOL]), mean(dyn["losses"][-POOL:])
    ref_last = mean(ref["losses"][-POOL:])
    assert last < 0.5 * first, f"float16 with dynamic loss scaling did not learn: loss {first:.3f} -> {last:.3f}"
    assert last < ref_last + 0.1, f"float16 + loss scaling ends at {last:.3f}, float32 at {ref_last:.3f}"


if __name__ == "__main__":
    print(json.dumps(train_linear(sys.argv[1])))
