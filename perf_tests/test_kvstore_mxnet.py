"""Seed 002 (MXNet distributed training): every KVStore type, and 1 vs 2 workers in speed *and* accuracy.

The seed launches ``train_cifar10.py --kv-store dist_device_sync`` with ``launch.py``
(scheduler, servers, workers over ps-lite) and tabulates, per cluster size, the time,
the samples/s of each worker and the validation accuracy (1 worker: 350 samples/s,
0.47; 2 workers: 210 samples/s each, 0.42). Its definitions, tested here:

* ``dist_sync`` "behaves like ``local`` with batch size n * b": 2 workers of batch b end
  with the parameters of ``local`` at batch 2b after k steps (float tolerance), and so
  does ``dist_device_sync``;
* ``dist_async`` "performs asynchronous updates ... the order is not guaranteed": it
  trains (the loss falls), but each worker's gradient is applied on its own, possibly
  computed on weights the other worker has since moved, so it is *not* the large-batch
  computation: its parameters differ from ``local`` at 2b by far more than the tolerance;
* ``local``/``device`` aggregate over two CPU contexts in one process: each context
  computes its gradient on its own half of the batch, and after training the weights on
  both are identical (without the store's reduction they would drift apart); ``nccl``
  does the same over two GPUs (a GPU test: skipped with the reason without them or
  without an mxnet-cu* build that runs on them). ``horovod`` is not tested: it needs
  horovod built against MXNet and ``horovodrun``, which this suite does not install;
* the seed's table as a test: per-worker throughput, scaling efficiency and top-1/top-5
  of 1 vs 2 workers after the same epochs (ResNet-18 v1 from the Gluon model zoo, 32 px),
  on loopback and across two network namespaces behind a ``tbf`` rate limit; the 1-worker
  and the 2-worker job run at once and alternate timed rounds, so the efficiency is a paired
  ratio decided adaptively against its floor. The seed's 4-worker row needs more than this
  2-core CI machine.
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_dlperf.processes import distributed as dist
from pytest_dlperf.child.cores.mxnet_support import unsupported_gpu
from perf_tests.claims.scaling import ScalingClaim, check_scaling

pytestmark = pytest.mark.framework("mxnet")

ENV = {"OMP_NUM_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": "1", "MXNET_ENGINE_TYPE": "ThreadedEnginePerDevice"}
EQUIVALENCE = dict(model="tiny_cnn", batch_size=8, image_size=16, num_classes=10, lr=0.05, momentum=0.9,
                   seed=0, train_samples=256, steps=6, warmup_steps=0, rounds=1, threads=1)
#: Harder data and a gentler rate: async applies stale gradients with momentum, which diverges at lr 0.05.
TRAINS = dict(EQUIVALENCE, steps=24, warmup_steps=4, rounds=2, noise=2.0, lr=0.01)
PARAM_RTOL = 1e-4
SCALING = dict(model="resnet18_v1", batch_size=16, image_size=32, num_classes=10, lr=0.01, momentum=0.9, seed=0,
               train_samples=1024, val_samples=512, noise=2.0, epochs=2, warmup_steps=2, rounds=4, threads=1)
ACCURACY_MARGIN = 0.15
MIN_TOP1 = 0.5
#: 2 ranks x 1 thread on a 2-core machine: about 25% below the lowest weak-scaling efficiency measured
#: on the 2-core VMs (docs/evidence.md, "Data-parallel scaling").
MIN_EFFICIENCY = {"loopback": 0.37}
#: Pairs of timed rounds the 2 epochs split into (fixed: the ini key dlperf_pairs would change how much a round trains).
PAIRS = 20
RATE = "1gbit"
CLAIM = ScalingClaim(min_efficiency=MIN_EFFICIENCY, accuracy_margin=ACCURACY_MARGIN, min_top1=MIN_TOP1,
                     rate=RATE)
#: Two jobs one after the other (a launcher that cannot pace) carry the machine's drift between them.
SEQUENTIAL_CLAIM = dataclasses.replace(CLAIM, min_efficiency={"loopback": 0.3})
TIMEOUT = 240.0


def nccl_unavailable() -> str | None:
    reason = unsupported_gpu()  # asks nvidia-smi: mxnet would count an H100 and then crash on it
    if reason:
        return reason
    import mxnet as mx

    if mx.context.num_gpus() < 2:
        return ("kvstore 'nccl' reduces across GPUs: needs 2 and an mxnet-cu* build; "
                f"this mxnet sees {mx.context.num_gpus()}")
    if not mx.runtime.Features().is_enabled("NCCL"):
        return "kvstore 'nccl' needs an mxnet build with NCCL (mxnet-cu112 has it); this one has none"
    return None


def run(workers, config, launcher=None, label="job", tmp_path=None):
    job = dist.Job("mxnet", workers, config, timeout=TIMEOUT, label=label, env=ENV,
                   **({"launcher": launcher} if launcher is not None else {}))
    try:
        return job, dist.run_job(job, tmp_path)
    except dist.JobFailed as exc:
        pytest.fail(exc.report(), pytrace=False)


def loss_fell(losses, window=4):
    return sum(losses[-window:]) / window < sum(losses[:window]) / window


def assert_reduced(kind, result):
    """What the store did with the gradients: one process over two contexts ends with the same weights
    on both (each context computed its gradient on its own half of the batch, so without the store's
    reduction they would differ); two ps-lite workers were both connected, and with a sync store
    they pulled the same weights."""
    if not kind.startswith("dist"):
        (worker,) = result.workers
        assert worker["contexts"] == 2, f"{kind}: trained on {worker['contexts']} context(s), not 2"
        assert worker["context_spread"] == 0.0, (
            f"{kind}: the weights on the two contexts differ by {worker['context_spread']:.3g} (relative): "
            "the store did not reduce their gradients")
        return
    a, b = result.workers
    assert a["world"] == b["world"] == 2, f"{kind}: ps-lite connected {a['world']} and {b['world']} workers, not 2"
    if kind != "dist_async":
        name, rel = dist.max_param_difference(a["params"], b["params"])
        assert rel == 0.0, f"{kind}: the workers pulled different weights: {name} differs by {rel:.3g}"


#: Asynchronous SGD applies stale gradients in whatever order the workers push them: at smoke size its
#: top-1 has read from 0.43 to 0.98 on one machine (docs/evidence.md), no figure to hold against a
#: baseline. What it must show is that it learned: top-1 well above chance (0.1 over 10 classes).
ASYNC_UNJUDGED = ("accuracy_top1", "accuracy_top5")
ASYNC_MIN_TOP1 = 0.25


def train_every_kvstore(dlperf, kind, tmp_path, device="cpu"):
    distributed = kind.startswith("dist")
    config = dict(TRAINS, kvstore=kind, devices=1 if distributed else 2, device=device)
    job, result = run(2 if distributed else 1, config, label=kind, tmp_path=tmp_path)
    training = dist.as_training_result(job, result, kind)
    dlperf.check(training, unjudged=ASYNC_UNJUDGED if kind == "dist_async" else ())
    for worker in result.workers:
        assert loss_fell(worker["losses"]), f"{kind}: loss did not fall: {worker['losses']}"
    if kind == "dist_async":
        top1 = training.metric("accuracy_top1").value
        assert top1 >= ASYNC_MIN_TOP1, f"dist_async: top-1 {top1:.3f} after training, below {ASYNC_MIN_TOP1}"
    assert_reduced(kind, result)


@pytest.mark.parametrize("kind", ("local", "device", "dist_sync", "dist_device_sync", "dist_async"))
def test_every_kvstore_type_trains_and_reduces(dlperf, kind, tmp_path):
    train_every_kvstore(dlperf, kind, tmp_path)


@pytest.mark.gpu(count=2)
def test_nccl_kvstore_trains_and_reduces_across_two_gpus(dlperf, gpu, tmp_path):
    reason = nccl_unavailable()
    if reason:
        pytest.skip(reason)
    train_every_kvstore(dlperf, "nccl", tmp_path, device="cuda")


@pytest.mark.distributed(workers=2, launcher="local")
@pytest.mark.parametrize("kind", ("dist_sync", "dist_device_sync"))
def test_dist_sync_with_two_workers_equals_local_with_twice_the_batch(distributed, kind, tmp_path):
    _, two = run(2, dict(EQUIVALENCE, kvstore=kind), distributed.launcher, label=kind, tmp_path=tmp_path)
    _, local = run(1, dict(EQUIVALENCE, kvstore="local", batch_size=16), label="local16", tmp_path=tmp_path)
    a, b = two.workers
    assert a["update_on_kvstore"], "dist_sync should update on the servers (update_on_kvstore)"
    name, rel = dist.max_param_difference(a["params"], b["params"])
    assert rel == 0.0, f"{kind}: workers pulled different weights: {name} differs by {rel:.3g}"
    name, rel = dist.max_param_difference(a["params"], local.workers[0]["params"])
    assert rel <= PARAM_RTOL, (f"{kind} 2x8 vs local batch 16 after {EQUIVALENCE['steps']} steps: {name} differs by "
                               f"{rel:.3g} (relative), tolerance {PARAM_RTOL:g}")


@pytest.mark.distributed(workers=2, launcher="local")
def test_dist_async_trains_but_is_not_the_large_batch_computation(distributed, tmp_path):
    _, asynchronous = run(2, dict(TRAINS, kvstore="dist_async"), distributed.launcher, label="dist_async",
                          tmp_path=tmp_path)
    _, local = run(1, dict(TRAINS, kvstore="local", batch_size=16), label="local16", tmp_path=tmp_path)
    for worker in asynchronous.workers:
        assert loss_fell(worker["losses"]), f"dist_async worker {worker['rank']}: loss did not fall"
    # what differs from sync: each push is its own SGD step on possibly stale weights, no aggregation
    name, rel = dist.max_param_difference(asynchronous.workers[0]["params"], local.workers[0]["params"])
    assert rel > 100 * PARAM_RTOL, f"dist_async matched local at 2b ({rel:.3g} on {name}): it did not run async"


#: loopback: this host through the user's launcher (--dlperf-launcher, local by default); netns_limited:
#: two network namespaces built for the test behind a tbf rate limit, removed after it. Two namespaces
#: without a limit read as loopback does (a veth pair is as fast as lo); a job across hosts without a
#: limit is test_engines.py's, through each engine.
NETWORK_PARAMS = [
    pytest.param("loopback", marks=pytest.mark.distributed(workers=2)),
    pytest.param("netns_limited",
                 marks=[pytest.mark.slow, pytest.mark.distributed(workers=2, launcher="netns", rate=RATE)]),
]


@pytest.mark.parametrize("network", NETWORK_PARAMS)
def test_two_workers_scale_and_keep_accuracy(dlperf, network, distributed, tmp_path):
    """The 1-worker job (``local`` store, this host) and the 2-worker ``dist_sync`` job (on ``network``)
    alternate timed rounds; a launcher that cannot pace a job's ranks gets one job after the other."""
    single, pair = dict(SCALING, kvstore="local"), dict(SCALING, kvstore="dist_sync")
    one = dist.Job("mxnet", 1, single, timeout=TIMEOUT, label="single", env=ENV)
    two = dist.Job("mxnet", 2, pair, timeout=TIMEOUT, label=f"dist_sync-{network}", env=ENV,
                   launcher=distributed.launcher)
    check_scaling(dlperf, CLAIM, SEQUENTIAL_CLAIM, network, SCALING["batch_size"], one, two, PAIRS, tmp_path)
