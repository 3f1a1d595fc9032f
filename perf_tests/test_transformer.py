"""A GPT-style decoder language model (the built-in ``model="gpt"``): tokens/s, model FLOPs, MFU.

Transformers are most of today's training; this is the ResNet suite's claims on one. The model is
GPT-2's layout (pytest_dlperf.child.cores.torch_gpt): causal attention through
``scaled_dot_product_attention``, AdamW, synthetic but learnable tokens. Throughput is tokens/s
(``samples_per_step = batch * context``); ``achieved_tflops`` counts the PaLM model FLOPs
(6 x parameters per token, plus attention), and on a GPU whose peak is known ``mfu`` divides it by
that peak. Sizes: the smoke profile trains a 2-layer, 64-wide model on a CPU in seconds; the full
profile, and the GPU claims, GPT-2 small (12 layers, 768 wide, 12 heads, context 1024).

The GPU claim is the seeds': mixed precision is at least 1.8x strict FP32 (seed 001 measured ResNet-50
at 2.02x); a transformer's matmuls are where tensor cores pay most, so it must hold here too.
"""

from __future__ import annotations

import os
import shutil

import pytest

from pytest_dlperf.profiles import GPT_SIZES
from pytest_dlperf.plugin.options import DEFAULT_AB_THRESHOLD as AB_THRESHOLD
from pytest_dlperf.judging.outcomes import REGRESSION
from pytest_dlperf.judging.stats import claim_decided, decide, decided_at

pytestmark = pytest.mark.framework("torch")

MIN_AMP_SPEEDUP = 1.8
#: GPT-2 small at its full context, 8 sequences per step: 8,192 tokens per step.
GPT2_SMALL = GPT_SIZES["full"]
GPU_BATCH = 8


def cxx_compiler() -> str | None:
    """The C++ compiler inductor's CPU backend would use ($CXX, else g++, c++ or clang++ on PATH)."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def assert_trains(run):
    assert run.loss_fell(), f"{run.label}: loss did not fall: {run.losses[:3]} ... {run.losses[-3:]}"


def assert_counts_tokens(run):
    """Throughput is in tokens: batch x context per step, and the FLOPs figure is there to read."""
    config = run.details["gpt"]
    assert run.throughput.unit == "tokens/s"
    assert config["tokens_per_step"] == run.scenario.batch_size * config["context"]
    assert "achieved_tflops" in run.metrics and run.details["flops_per_step"] > 0


@pytest.mark.precision("fp32", "amp_bf16")
def test_gpt_trains_and_holds_its_tokens_per_second(dlperf, precision):
    """Eager, in this run's profile's size: trains (the loss falls, no NaN), and its tokens/s, memory
    and achieved TFLOP/s are held against this machine's baselines."""
    run = dlperf.run(dlperf.scenario("torch", "gpt", precision=precision))
    dlperf.check(run)
    assert_trains(run)
    assert_counts_tokens(run)


def test_gpt_compiled_trains_and_records_its_compile(dlperf, tmp_path):
    """torch.compile (inductor) of the same model: the compiled step trains, its cold compile time and
    graph breaks are recorded and held against the baselines (a new graph break fails the check)."""
    scenario = dlperf.scenario("torch", "gpt", compile="default", label="compiled",
                               env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    if scenario.device == "cpu" and cxx_compiler() is None:
        pytest.skip("torch.compile's CPU backend (inductor) compiles C++: no C++ compiler ($CXX, g++, c++ or "
                    "clang++) on PATH; install one (Debian: apt-get install g++)")
    run = dlperf.run(scenario)
    dlperf.check(run)
    assert_trains(run)
    assert_counts_tokens(run)
    assert run.metrics["compile_time_total"].value >= run.metrics["compile_time"].value > 0
    assert run.metrics["graph_breaks"].value == 0, run.details.get("graph_breaks_reasons")


@pytest.mark.gpu
def test_gpt2_small_amp_is_at_least_1_8x_fp32_on_gpu(dlperf, gpu):
    """GPT-2 small, context 1024, batch 8: AMP fp16 (dynamic loss scale) and bf16 against strict FP32,
    paired round by round; each is at least 1.8x (the floor is recorded with the speedup), and all train.
    MFU is recorded where the GPU's peak is known."""
    base = dlperf.scenario("torch", "gpt", batch_size=GPU_BATCH, model_config=GPT2_SMALL)
    paired = dlperf.run_paired(base.replace(precision="fp32"), base.replace(precision="amp_fp16"),
                               base.replace(precision="amp_bf16"), decided=claim_decided(MIN_AMP_SPEEDUP))
    fp32, fp16, bf16 = (paired.results[k] for k in ("fp32", "amp_fp16", "amp_bf16"))
    for label in ("amp_fp16", "amp_bf16"):
        dlperf.ledger.speedup(f"{label}_vs_fp32", paired.ratio(label), floor=MIN_AMP_SPEEDUP)
    dlperf.check(fp32, fp16, bf16)

    for run in (fp32, fp16, bf16):
        assert_trains(run)
        assert_counts_tokens(run)
    for run in (fp16, bf16):
        ratio = paired.ratio(run.label)
        assert ratio.estimate >= MIN_AMP_SPEEDUP, (
            f"GPT-2 small {run.label} is {ratio.describe()} fp32 on {gpu.describe()} (paired rounds; "
            f"{run.throughput.value:.0f} vs {fp32.throughput.value:.0f} tokens/s, MFU "
            f"{run.metrics['mfu'].value if 'mfu' in run.metrics else 'unknown'}), the claim is >= {MIN_AMP_SPEEDUP}x")


@pytest.mark.gpu
def test_gpt2_small_compiled_is_not_slower_than_eager_on_gpu(dlperf, gpu, tmp_path):
    """torch.compile of GPT-2 small in bf16, paired with eager: not slower beyond the A/B threshold."""
    base = dlperf.scenario("torch", "gpt", precision="amp_bf16", batch_size=GPU_BATCH, model_config=GPT2_SMALL,
                           env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    eager, compiled = base.replace(label="eager"), base.replace(compile="default", label="compiled")
    paired = dlperf.run_paired(eager, compiled, build_one_at_a_time=True, decided=decided_at(AB_THRESHOLD))
    ratio = paired.ratio("compiled")
    dlperf.ledger.speedup("compiled_vs_eager", ratio)
    dlperf.check(*paired.results.values())
    for run in paired.results.values():
        assert_trains(run)
    assert decide(ratio, AB_THRESHOLD) != REGRESSION, f"compiled GPT-2 small is slower than eager: {ratio.describe()}"
