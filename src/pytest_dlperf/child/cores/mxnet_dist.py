"""One process of an MXNet KVStore job: ``python -m pytest_dlperf.child.cores.mxnet_dist CONFIG RESULT``.

For the ``dist_*`` types the parent starts a ps-lite cluster as MXNet's ``launch.py``
does: a scheduler, servers and workers, told apart by ``DMLC_ROLE``. A scheduler or a
server never returns from ``import mxnet`` (MXNet runs the server loop at import and
exits when the workers finish), so only workers reach :func:`main`.

A worker trains a Gluon network with ``gluon.Trainer(..., kvstore=kv)``, the idiom of
MXNet's ``example/image-classification`` (``kv = mx.kvstore.create(args.kv_store)``):

* ``local`` / ``device``: one process, the batch split over ``devices`` CPU (or GPU)
  contexts, gradients reduced by the store on the CPU (``local``) or on the devices;
* ``dist_sync`` / ``dist_device_sync``: the servers sum every worker's gradient and
  apply SGD once per step; ``trainer.step(workers * batch)`` makes that the mean over
  the global batch, i.e. exactly ``local`` with batch ``workers * batch``;
* ``dist_async``: the servers apply each worker's gradient as it arrives
  (``trainer.step(batch)``: every push is a full SGD step), with no barrier, so a
  worker's gradient may be computed on weights other workers have already moved;
* ``nccl``: the same over GPU contexts (``device="cuda"`` in the config); its test needs two GPUs.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Sequence

import mxnet as mx  # a DMLC_ROLE=server/scheduler process serves inside this import and exits
import numpy as np
from mxnet import autograd, gluon

from pytest_dlperf.child import rank as dist_util
from pytest_dlperf.protocol import PROGRESS_PREFIX
from pytest_dlperf.child.measure import measure


def tiny_cnn(num_classes: int) -> gluon.nn.HybridSequential:
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(8, 3, padding=1, activation="relu"), gluon.nn.MaxPool2D(2),
            gluon.nn.Conv2D(16, 3, padding=1, activation="relu"), gluon.nn.MaxPool2D(2),
            gluon.nn.Flatten(), gluon.nn.Dense(num_classes))
    return net


def build(config: dict[str, Any]) -> gluon.HybridBlock:
    if config["model"] == "tiny_cnn":
        return tiny_cnn(int(config["num_classes"]))
    return gluon.model_zoo.vision.get_model(config["model"], classes=int(config["num_classes"]))


def contexts(config: dict[str, Any]) -> list[mx.Context]:
    count = int(config.get("devices", 1))
    if config.get("device", "cpu") == "cuda":
        return [mx.gpu(i) for i in range(count)]
    return [mx.cpu(i) for i in range(count)]


class KVStoreLoop:
    """The TrainingLoop ``measure`` times: forward/backward per context, then ``trainer.step``."""

    synchronous = False  # the MXNet engine is asynchronous: step() only queues work

    def __init__(self, net: gluon.HybridBlock, trainer: gluon.Trainer, config: dict[str, Any], rank: int,
                 world: int, ctxs: list[mx.Context], step_scale: int):
        self.net, self.trainer, self.config = net, trainer, config
        self.rank, self.world, self.ctxs = rank, world, ctxs
        self.batch = int(config["batch_size"])
        self.samples_per_step = self.batch
        self.step_scale = step_scale
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        self.images, self.labels = dist_util.dataset(int(config["train_samples"]), int(config["image_size"]),
                                                     int(config["num_classes"]), int(config["seed"]),
                                                     float(config.get("noise", 0.5)))
        self.steps = 0

    def step(self) -> mx.nd.NDArray:
        dist_util.maybe_fault(self.config, self.rank, self.steps)
        dist_util.heartbeat(self.steps + 1)  # entering this step, before its collective
        x, y = dist_util.shard(self.images, self.labels, self.steps, self.rank, self.world, self.batch)
        xs = gluon.utils.split_and_load(mx.nd.array(x), self.ctxs, even_split=False)
        ys = gluon.utils.split_and_load(mx.nd.array(y.astype(np.float32)), self.ctxs, even_split=False)
        with autograd.record():
            losses = [self.loss_fn(self.net(a), b) for a, b in zip(xs, ys)]
        autograd.backward(losses)
        self.trainer.step(self.step_scale)
        self.steps += 1
        return mx.nd.concat(*[loss.as_in_context(mx.cpu()) for loss in losses], dim=0).mean()

    def sync(self) -> None:
        mx.nd.waitall()

    def losses_to_floats(self, handles: Sequence[mx.nd.NDArray]) -> list[float]:
        return [float(h.asscalar()) for h in handles]


def evaluate(net: gluon.HybridBlock, config: dict[str, Any], ctx: mx.Context) -> dict[str, float]:
    images, labels = dist_util.dataset(int(config.get("val_samples", 256)), int(config["image_size"]),
                                       int(config["num_classes"]), int(config["seed"]),
                                       float(config.get("noise", 0.5)), split="val")
    logits = np.concatenate([net(mx.nd.array(images[i:i + 128], ctx=ctx)).asnumpy()
                             for i in range(0, len(labels), 128)])
    return dist_util.topk_accuracy(logits, labels)


def main(argv: list[str]) -> int:

    config, result_path = dist_util.load_rank(argv)
    kind = config["kvstore"]
    kv = mx.kv.create(kind)
    rank, world = kv.rank, kv.num_workers
    print(f"[dlperf] {kind}: ps-lite rank {rank} of {world} workers", flush=True)
    batch = int(config["batch_size"])
    # dist_sync sums the workers' gradients on the servers: scale by the global batch for a mean
    step_scale = batch * world if kind in ("dist_sync", "dist_device_sync") else batch
    ctxs = contexts(config)
    total = dist_util.total_steps_of(config, world)
    scenario = dist_util.scenario_of(config, total, "mxnet").replace(kvstore=kind)
    mx.random.seed(scenario.seed)
    np.random.seed(scenario.seed)
    net = build(config)
    net.initialize(mx.init.Xavier(), ctx=ctxs)
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": scenario.lr, "momentum": scenario.momentum, "wd": scenario.weight_decay},
                            kvstore=kv)
    loop = KVStoreLoop(net, trainer, config, rank, world, ctxs, step_scale)
    start = time.perf_counter()
    # the worker launched first talks to the parent: ps-lite's rank is the order workers connected in
    launched_first = os.environ.get("DLPERF_RANK_NAME", "worker 0") == "worker 0"
    synced = kind.startswith("dist") and kind != "dist_async"
    pacer = dist_util.rank_pacer(config, 0 if launched_first else 1, kv._barrier if synced and world > 1 else None)
    metrics, losses, details = measure(loop, scenario, lambda text: print(PROGRESS_PREFIX + text, flush=True),
                                       pacer=pacer)
    train_seconds = time.perf_counter() - start
    if kind.startswith("dist") and kind != "dist_async":
        kv._barrier()  # every worker has pulled the last update before anyone reads weights
    params = {name: p.data(ctxs[0]).asnumpy() for name, p in net.collect_params().items()}
    # each context trained on its own part of the batch: only the store's reduction keeps them equal
    context_spread = max((float((np.abs(p.data(c).asnumpy() - params[name])
                                 / np.maximum(np.abs(params[name]), 1e-3)).max())
                          for name, p in net.collect_params().items() for c in ctxs[1:]), default=0.0)
    # Gluon prefixes parameter names with a per-process counter; key by position instead
    arrays = {f"p{i:03d}_{name.split('_', 1)[-1]}": v for i, (name, v) in enumerate(params.items())}
    params_path = result_path.with_suffix(".params.npz")
    np.savez(params_path, **arrays)
    payload = {
        "rank": rank, "world": world, "kvstore": kv.type, "update_on_kvstore": trainer._update_on_kvstore,
        "contexts": len(ctxs), "context_spread": context_spread,
        "throughput": list(metrics["throughput"].samples), "losses": losses, "steps": loop.steps,
        "train_seconds": train_seconds, "params": str(params_path), "details": details,
        # every worker: ps-lite numbers workers in connection order, not in launch order
        "accuracy": evaluate(net, config, ctxs[0]),
        "framework_version": mx.__version__,
        "servers": int(os.environ.get("DMLC_NUM_SERVER", 0)),
    }
    dist_util.write_rank_result(result_path, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
