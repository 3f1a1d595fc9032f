"""One worker of a TensorFlow MultiWorkerMirroredStrategy job:
``python -m pytest_dlperf.child.cores.tf_mwms CONFIG RESULT``.

The parent gives each worker a ``TF_CONFIG`` (the cluster's worker addresses and this
task's index). The training loop is the custom loop of TensorFlow's "Custom training
loop with Keras and MultiWorkerMirroredStrategy" tutorial: variables created under
``strategy.scope()`` (initial values broadcast from worker 0), ``strategy.run`` of a
step whose loss is ``tf.nn.compute_average_loss(..., global_batch_size=W*b)``, and
the Keras optimizer all-reducing (summing) the gradients across workers, which makes
the update the mean over the global batch. ``keras.Model.fit`` is not used: under
MWMS on CPU it did not run here. With one worker the default strategy is used: the
single-process reference.

Models: ``tiny_cnn`` (no BatchNorm) for the equivalence check; ``convnet_bn`` for scaling and accuracy
(:data:`.tf_models.SMALL`: Keras has no ResNet-18 and ResNet-50 is too slow for a 2-core CI). Data are
NHWC, TensorFlow's CPU layout.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Sequence

import numpy as np
import tensorflow as tf
import keras

from pytest_dlperf.child import rank as dist_util
from pytest_dlperf.protocol import PROGRESS_PREFIX
from pytest_dlperf.child.measure import measure
from pytest_dlperf.child.cores.tf_models import SMALL


def task_index() -> int:
    config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    return int(config.get("task", {}).get("index", 0))


def workers_in_cluster() -> int:
    config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    return len(config.get("cluster", {}).get("worker", [])) or 1


class MWMSLoop:
    """The TrainingLoop ``measure`` times: one ``strategy.run`` step on this worker's shard."""

    def __init__(self, strategy: tf.distribute.Strategy, model: keras.Model, config: dict[str, Any], rank: int,
                 world: int):
        self.strategy, self.model, self.config, self.rank, self.world = strategy, model, config, rank, world
        self.batch = int(config["batch_size"])
        self.samples_per_step = self.batch
        self.synchronous = True
        images, labels = dist_util.dataset(int(config["train_samples"]), int(config["image_size"]),
                                           int(config["num_classes"]), int(config["seed"]),
                                           float(config.get("noise", 0.5)))
        self.images, self.labels = np.ascontiguousarray(images.transpose(0, 2, 3, 1)), labels
        with strategy.scope():
            self.optimizer = keras.optimizers.SGD(learning_rate=float(config["lr"]),
                                                  momentum=float(config["momentum"]))
        global_batch = self.batch * world

        def step_fn(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduces under MWMS
            return loss

        @tf.function
        def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            per_replica = strategy.run(step_fn, args=(x, y))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        self._train_step = train_step
        self._last: tf.Tensor | None = None
        self.steps = 0

    def step(self) -> tf.Tensor:
        dist_util.maybe_fault(self.config, self.rank, self.steps)
        dist_util.heartbeat(self.steps + 1)  # entering this step, before its collective
        x, y = dist_util.shard(self.images, self.labels, self.steps, self.rank, self.world, self.batch)
        self._last = self._train_step(tf.constant(x), tf.constant(y))
        self.steps += 1
        return self._last

    def sync(self) -> None:
        if self._last is not None:
            self._last.numpy()

    def losses_to_floats(self, handles: Sequence[tf.Tensor]) -> list[float]:
        return [float(h.numpy()) for h in handles]


def barrier(strategy: tf.distribute.Strategy) -> None:
    """Every worker meets the others here: MWMS has no barrier of its own, and an all-reduce waits for all."""
    one = strategy.run(lambda: tf.constant(1.0))
    strategy.reduce(tf.distribute.ReduceOp.SUM, one, axis=None).numpy()


def evaluate(model: keras.Model, config: dict[str, Any]) -> dict[str, float]:
    images, labels = dist_util.dataset(int(config.get("val_samples", 256)), int(config["image_size"]),
                                       int(config["num_classes"]), int(config["seed"]),
                                       float(config.get("noise", 0.5)), split="val")
    logits = model(images.transpose(0, 2, 3, 1), training=False)
    return dist_util.topk_accuracy(np.asarray(logits), labels)


def main(argv: list[str]) -> int:

    config, result_path = dist_util.load_rank(argv)
    threads = int(config.get("threads", 1))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    world, rank = workers_in_cluster(), task_index()
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if world > 1 else tf.distribute.get_strategy()
    total = dist_util.total_steps_of(config, world)
    scenario = dist_util.scenario_of(config, total, "tensorflow")
    keras.utils.set_random_seed(scenario.seed)
    size, classes = int(config["image_size"]), int(config["num_classes"])
    with strategy.scope():
        model = SMALL[config["model"]]((size, size, 3), classes)
    loop = MWMSLoop(strategy, model, config, rank, world)
    start = time.perf_counter()
    pacer = dist_util.rank_pacer(config, rank, (lambda: barrier(strategy)) if world > 1 else None)
    metrics, losses, details = measure(loop, scenario, lambda text: print(PROGRESS_PREFIX + text, flush=True),
                                       pacer=pacer)
    train_seconds = time.perf_counter() - start
    accuracy = evaluate(model, config)  # every worker: reading BN statistics is a collective under MWMS
    arrays = {f"p{i:03d}": np.asarray(w) for i, w in enumerate(model.get_weights())}
    params_path = result_path.with_suffix(".params.npz")
    np.savez(params_path, **arrays)  # type: ignore[arg-type]  # numpy's stub types the keywords as allow_pickle
    payload = {
        "rank": rank, "world": world,
        # what the strategy is, not what was asked for (its class is CollectiveAllReduceStrategy)
        "strategy": ("MultiWorkerMirroredStrategy" if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
                     else type(strategy).__name__),
        "throughput": list(metrics["throughput"].samples), "losses": losses, "steps": loop.steps,
        "train_seconds": train_seconds, "params": str(params_path), "details": details,
        "accuracy": accuracy if rank == 0 else None,
        "framework_version": tf.__version__,
    }
    dist_util.write_rank_result(result_path, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
