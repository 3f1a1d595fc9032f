"""Seed 000 (TensorFlow): mixed precision trains ResNet-50 about 2x faster than FP32.

The seed's procedure: ``tf_cnn_benchmarks.py --model=resnet50 --batch_size=128`` (FP32,
~400 img/s on a V100), then ``--batch_size=256 --use_fp16=True``, "doubling the
throughput". The claim tested here, with the Keras idioms that replaced
tf_cnn_benchmarks (a ``mixed_float16`` policy, ``LossScaleOptimizer``, a custom step
under ``tf.function``): AMP fp16 is at least 1.8x strict-FP32 (TF32 off) throughput,
both at the same batch of 128 and as the seed ran it (fp16 at 256, since FP16 halves
the activation memory), and every run still trains. Same assertions as the PyTorch file.
"""

from __future__ import annotations

import pytest

from pytest_dlperf.plugin.options import DEFAULT_AB_THRESHOLD as AB_THRESHOLD
from pytest_dlperf.judging.outcomes import REGRESSION
from pytest_dlperf.judging.stats import all_decided, claim_decided, decide, decided_at

pytestmark = pytest.mark.framework("tensorflow")

MIN_AMP_SPEEDUP = 1.8
#: Seed 000: tf_cnn_benchmarks --batch_size=128 (fp32) and --batch_size=256 --use_fp16=True.
SEED_FP32_BATCH = 128
SEED_FP16_BATCH = 256


#: The dtype the convolutions and matmuls of the traced step must run in, per precision.
COMPUTE_DTYPE = {"fp32": "float32", "tf32": "float32", "amp_bf16": "bfloat16", "amp_fp16": "float16"}


def assert_computes_in(run, dtype):
    """What the Keras policy made of the step: the dtype of its traced Conv2D/MatMul ops (forward
    and backward). A mixed policy may leave a few in float32; most must run in ``dtype``, and a
    float32 run must have nothing else."""
    counts = run.details["compute_dtypes"]
    assert max(counts, key=counts.get) == dtype, f"{run.label}: the step computes in {counts}, not mostly {dtype}"
    if dtype == "float32":
        assert set(counts) == {"float32"}, f"{run.label}: an fp32 step has ops in {counts}"


def assert_trained(*runs):
    for run in runs:
        assert run.loss_fell(), f"{run.label}: loss did not fall: {run.losses[:3]} ... {run.losses[-3:]}"


@pytest.mark.gpu
def test_amp_fp16_is_at_least_1_8x_fp32_on_gpu(dlperf, gpu):
    base = dlperf.scenario("tensorflow", "resnet50", batch_size=SEED_FP32_BATCH)
    labels = (f"amp_fp16_b{SEED_FP32_BATCH}", f"amp_fp16_b{SEED_FP16_BATCH}")
    paired = dlperf.run_paired(base.replace(precision="fp32"),
                               base.replace(precision="amp_fp16", label=labels[0]),
                               base.replace(precision="amp_fp16", batch_size=SEED_FP16_BATCH, label=labels[1]),
                               decided=claim_decided(MIN_AMP_SPEEDUP))
    fp32, same_batch, seed_batch = (paired.results[k] for k in ("fp32", *labels))
    for label in labels:
        dlperf.ledger.speedup(f"{label}_vs_fp32", paired.ratio(label), floor=MIN_AMP_SPEEDUP)
    dlperf.check(fp32, same_batch, seed_batch)

    assert_trained(fp32, same_batch, seed_batch)
    assert_computes_in(same_batch, "float16")
    for run in (same_batch, seed_batch):
        assert run.details["final_loss_scale"], f"{run.label}: no loss scale reported for fp16"
        ratio = paired.ratio(run.label)
        assert ratio.estimate >= MIN_AMP_SPEEDUP, (
            f"resnet50 {run.label} is {ratio.describe()} fp32 on {gpu.describe()} (paired rounds; "
            f"{run.throughput.value:.0f} vs {fp32.throughput.value:.0f} img/s), the claim is >= {MIN_AMP_SPEEDUP}x"
        )


@pytest.mark.gpu
def test_tf32_and_bf16_on_gpu_are_not_slower_than_strict_fp32(dlperf, gpu):
    base = dlperf.scenario("tensorflow", "resnet50", batch_size=SEED_FP32_BATCH)
    paired = dlperf.run_paired(base.replace(precision="fp32"), base.replace(precision="tf32"),
                               base.replace(precision="amp_bf16"),
                               decided=all_decided(decided_at(AB_THRESHOLD, ["tf32"]),
                                                   claim_decided(MIN_AMP_SPEEDUP, ["amp_bf16"])))
    fp32, tf32, bf16 = (paired.results[k] for k in ("fp32", "tf32", "amp_bf16"))
    tf32_ratio, bf16_ratio = paired.ratio("tf32"), paired.ratio("amp_bf16")
    dlperf.ledger.speedup("tf32_vs_fp32", tf32_ratio)
    dlperf.ledger.speedup("amp_bf16_vs_fp32", bf16_ratio, floor=MIN_AMP_SPEEDUP)
    dlperf.check(fp32, tf32, bf16)

    assert_trained(tf32, bf16)
    assert_computes_in(bf16, "bfloat16")
    assert decide(tf32_ratio, AB_THRESHOLD) != REGRESSION, f"TF32 slower than strict FP32: {tf32_ratio.describe()}"
    assert bf16_ratio.estimate >= MIN_AMP_SPEEDUP, f"AMP bf16 only {bf16_ratio.describe()} FP32"


@pytest.mark.precision("fp32", "amp_bf16")
@pytest.mark.parametrize("model", ("resnet50", "resnet18"))
def test_cpu_precisions_train_and_hold_their_throughput(dlperf, model, precision):
    """The CPU equivalent: the same model, step and Keras policy code path, small shapes.

    No speedup is claimed on a CPU; the figures are held against this machine's
    baselines, each precision must train and compute in its dtype. (mixed_float16 has
    no fast CPU kernels, about 7x slower than fp32 here, so its loss-scaling mechanics
    are tested on a small model in test_loss_scaling_tf instead.)
    """
    run = dlperf.run(dlperf.scenario("tensorflow", model, precision=precision))
    dlperf.check(run)
    assert_trained(run)
    assert_computes_in(run, COMPUTE_DTYPE[precision])
