"""Is the TensorFlow core as fast as a hand-written Keras custom loop?  (Not a pytest test.)

The same configuration is trained twice in one process: by a bare loop written the
way the Keras "custom training loop" and mixed-precision guides write it, and by
pytest-dlperf's ``TfTrainingLoop`` timed by the plugin's own harness (``measure``).
Rounds alternate (bare, core, core, bare, ...) so drift of the machine (other load)
hits both alike; a bare round ends with a blocking read of its last loss (the round
before it ended synchronised too).
Prints ``bare <median> img/s, dlperf <median> img/s, ratio <x>`` and exits 1 when the
ratio is outside 1 +/- ``--max-gap``.

    python bench/bare_vs_core_tf.py --model resnet18 --batch-size 16 --image-size 64
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable

from pytest_dlperf.child.cores.tf_core import TfTrainingLoop, configure
from pytest_dlperf.child.cores.tf_models import build_model
from pytest_dlperf.child.measure import measure
from pytest_dlperf.scenario import Scenario
from pytest_dlperf.child.synthetic import batches


def bare_loop(s: Scenario) -> Callable[[], Any]:
    """The hand-written loop: GradientTape in a tf.function, SGD, LossScaleOptimizer for fp16."""
    import keras
    import numpy as np
    import tensorflow as tf

    model = build_model(s)  # keras.applications.ResNet50, or the Keras ResNet-18 (Keras has none)
    optimizer = keras.optimizers.SGD(learning_rate=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)
    fp16 = s.precision == "amp_fp16"
    if fp16:
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
    device = "/GPU:0" if s.device == "cuda" else "/CPU:0"
    with tf.device(device):
        data = [(tf.constant(np.ascontiguousarray(x.transpose(0, 2, 3, 1))), tf.constant(y.astype(np.int32)))
                for x, y in batches(4, s.batch_size, s.image_size, s.num_classes, s.seed)]

    @tf.function(jit_compile=s.jit_compile)
    def train_step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
            scaled = optimizer.scale_loss(loss) if fp16 else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    state = {"i": 0}

    def step() -> Any:
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        return train_step(x, y)

    return step


def bare_round(step: Callable[[], Any], steps: int, batch_size: int) -> tuple[float, float]:
    """(img/s, CPU seconds of this process per step)."""
    cpu, start = time.process_time(), time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss.numpy()  # blocks until the last step (and so every step before it) is done
    return batch_size * steps / (time.perf_counter() - start), (time.process_time() - cpu) / steps


def core_round(loop: TfTrainingLoop, one_round: Scenario) -> tuple[float, float]:
    cpu = time.process_time()
    metrics, _, _ = measure(loop, one_round)
    return metrics["throughput"].value, (time.process_time() - cpu) / one_round.steps_per_round


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", choices=("resnet18", "resnet50"))
    parser.add_argument("--precision", default="fp32", choices=("fp32", "tf32", "amp_fp16", "amp_bf16"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--xla", action="store_true", help="jit_compile both steps")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (default: TF's)")
    parser.add_argument("--warmup", type=int, default=3, help="steps per loop before timing")
    parser.add_argument("--rounds", type=int, default=8, help="timed rounds per loop")
    parser.add_argument("--steps", type=int, default=6, help="steps per round")
    parser.add_argument("--max-gap", type=float, default=0.03, help="allowed |ratio - 1|")
    args = parser.parse_args(argv)

    scenario = Scenario(
        framework="tensorflow", model=args.model, precision=args.precision, device=args.device,
        batch_size=args.batch_size, image_size=args.image_size, num_classes=args.num_classes, lr=0.05,
        jit_compile=args.xla, intra_op_threads=args.threads, warmup_steps=0, rounds=1, steps_per_round=args.steps,
    )
    configure(scenario)  # threads, device, data format, precision policy: shared by both loops
    core = TfTrainingLoop(scenario)
    bare = bare_loop(scenario)
    for step in (bare, core.step):
        for _ in range(args.warmup):
            step()
    core.sync()
    bare_rounds: list[tuple[float, float]] = []
    core_rounds: list[tuple[float, float]] = []
    for r in range(args.rounds):
        if r % 2 == 0:  # ABBA order: neither loop always runs first
            bare_rounds.append(bare_round(bare, args.steps, args.batch_size))
            core_rounds.append(core_round(core, scenario))
        else:
            core_rounds.append(core_round(core, scenario))
            bare_rounds.append(bare_round(bare, args.steps, args.batch_size))
        print(f"round {r + 1}/{args.rounds}: bare {bare_rounds[-1][0]:.2f}, dlperf {core_rounds[-1][0]:.2f} img/s",
              flush=True)
    bare_median = statistics.median(rate for rate, _ in bare_rounds)
    core_median = statistics.median(rate for rate, _ in core_rounds)
    ratio = core_median / bare_median
    bare_cpu = statistics.median(cpu for _, cpu in bare_rounds)
    core_cpu = statistics.median(cpu for _, cpu in core_rounds)
    print(f"{args.model} {args.precision} batch {args.batch_size} {args.image_size}px on {args.device}, "
          f"xla {args.xla}")
    paired = statistics.median(c[0] / b[0] for b, c in zip(bare_rounds, core_rounds))
    print(f"median of the per-round ratios (adjacent rounds, dlperf/bare): {paired:.3f}")
    # CPU time per step barely moves with other load on a shared machine: a second opinion on the ratio.
    print(f"cpu time per step: bare {bare_cpu * 1e3:.1f} ms, dlperf {core_cpu * 1e3:.1f} ms, "
          f"ratio {bare_cpu / core_cpu:.3f}")
    print(f"bare {bare_median:.2f} img/s, dlperf {core_median:.2f} img/s, ratio {ratio:.3f}")
    return 0 if abs(ratio - 1.0) <= args.max_gap else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
