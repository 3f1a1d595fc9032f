"""Seed 000 (MXNet): mixed precision trains ResNet-50 and ResNet-18 about 2x faster.

The seed's procedure: ``example/image-classification/train_imagenet.py --network resnet-v1
--num-layers 50 --dtype float16 --batch-size 224 --kv-store nccl`` with
``MXNET_CUDNN_AUTOTUNE_DEFAULT=2`` on a V100, next to tf_cnn_benchmarks' FP32-vs-FP16
doubling. The claim tested here, the same as for the other frameworks: AMP fp16
(``mxnet.contrib.amp`` with dynamic loss scaling) is at least 1.8x the strict-FP32
throughput at batch 128, and both still train. The MXNet core sets
``MXNET_CUDNN_AUTOTUNE_DEFAULT=2`` on CUDA, as the seed does, and uses the ``device``
KVStore (aggregation and update on the GPU; ``nccl`` needs an NCCL build and only
matters with several GPUs).
"""

from __future__ import annotations

import pytest

from pytest_dlperf.child.cores.mxnet_support import check_supported
from pytest_dlperf.judging.stats import claim_decided
from pytest_dlperf.scenario import ScenarioError

pytestmark = pytest.mark.framework("mxnet")

MODELS = ("resnet50", "resnet18")
MIN_AMP_SPEEDUP = 1.8
GPU_KVSTORE = "device"
CPU_KVSTORES = ("local", "device")


def assert_computes_in(run, dtype):
    """What AMP made of the network that trained: the dtype of its convolution and dense outputs
    (type inference on the hybridized graph's internals); fp32 must have nothing else."""
    counts = run.details["compute_dtypes"]
    assert counts, f"{run.label}: the core found no convolution or dense outputs in the trained graph"
    assert max(counts, key=counts.get) == dtype, f"{run.label}: the network computes in {counts}, not mostly {dtype}"
    if dtype == "float32":
        assert set(counts) == {"float32"}, f"{run.label}: an fp32 network has outputs in {counts}"


def assert_trains(run):
    assert run.loss_fell(), f"{run.label}: loss did not fall: {run.losses[:3]} ... {run.losses[-3:]}"


@pytest.mark.gpu
@pytest.mark.parametrize("model", MODELS)
def test_amp_fp16_is_at_least_1_8x_fp32_on_gpu(dlperf, gpu, model):
    base = dlperf.scenario("mxnet", model, batch_size=128, kvstore=GPU_KVSTORE)
    paired = dlperf.run_paired(base.replace(precision="fp32"),
                               base.replace(precision="amp_fp16", label="amp_fp16_dynamic"),
                               decided=claim_decided(MIN_AMP_SPEEDUP))
    fp32, amp = paired.results["fp32"], paired.results["amp_fp16_dynamic"]
    ratio = paired.ratio("amp_fp16_dynamic")
    dlperf.ledger.speedup("amp_fp16_vs_fp32", ratio, floor=MIN_AMP_SPEEDUP)
    dlperf.check(fp32, amp)

    for run in (fp32, amp):
        assert_trains(run)
    assert_computes_in(fp32, "float32")
    assert_computes_in(amp, "float16")
    assert ratio.estimate >= MIN_AMP_SPEEDUP, (
        f"{model} amp_fp16 is {ratio.describe()} fp32 on {gpu.describe()} "
        f"(paired rounds; {amp.throughput.value:.0f} vs "
        f"{fp32.throughput.value:.0f} img/s), the claim is >= {MIN_AMP_SPEEDUP}x"
    )


@pytest.mark.precision("fp32", "amp_bf16")
@pytest.mark.parametrize("model", MODELS)
def test_cpu_precisions_train_and_hold_their_throughput(dlperf, model, precision):
    """The CPU equivalent: the same Gluon model, Trainer and AMP code path, small shapes.

    No speedup is claimed on a CPU; the figures are held against this machine's
    baselines, each precision must train and compute in its dtype. fp16 has no CPU
    kernels in MXNet 1.9, so its loss scaling is tested in test_loss_scaling_mxnet instead.
    """
    scenario = dlperf.scenario("mxnet", model, precision=precision)
    try:
        check_supported(scenario)
    except ScenarioError as exc:
        pytest.skip(f"{precision} cannot run here: {exc}")
    run = dlperf.run(scenario)
    dlperf.check(run)
    assert_trains(run)
    assert_computes_in(run, {"fp32": "float32", "amp_bf16": "bfloat16"}[precision])


def test_local_and_device_kvstores_both_train_and_are_recorded(dlperf):
    """Both single-machine KVStore types really carry the updates (the KVStore object is
    handed to the Trainer, as fit.py does, so Gluon does not bypass it on one device: it
    keeps the weights on the store and updates them there, ``update_on_kvstore``)."""
    base = dlperf.scenario("mxnet", "resnet18", rounds=3)
    runs = [dlperf.run(base.replace(kvstore=kv, label=f"fp32_kvstore_{kv}")) for kv in CPU_KVSTORES]
    dlperf.check(*runs)

    for kv, run in zip(CPU_KVSTORES, runs):
        assert run.environment["update_on_kvstore"] is True, (
            f"{kv}: Gluon decided update_on_kvstore={run.environment['update_on_kvstore']!r}: the store was bypassed")
        assert_trains(run)
    # Same seed, same data: the first loss (before any update) must be the same in both.
    first = [run.losses[0] for run in runs]
    assert abs(first[0] - first[1]) <= 1e-4 * max(1.0, abs(first[0])), f"first losses differ: {first}"
