"""Compiled training against eager, per framework: torch.compile, TensorFlow XLA, MXNet hybridize.

Most production PyTorch training now runs through ``torch.compile`` (often with CUDA
graphs), and its regressions are the ones an upgrade brings: slower kernels, a new graph
break, a recompilation, a longer compile. Each test trains the same model eager and
compiled, interleaved round by round (pytest_dlperf.processes.paired), and asserts that the
compiled step is not slower than the eager one beyond the A/B threshold (the paired
ratio's interval below 1 - 5%); the speedup, the compile time (first step, and the whole
warm-up's excess over steady-state steps) and the graph-break and recompilation counts are
held against this machine's baselines (a graph break or recompilation the baseline did
not have fails with its reason).

Measured on the 2-core CPU (smoke shapes) only MXNet's hybridized graph is faster than its
eager (imperative) step; torch.compile (0.76x) and XLA (0.10x) are slower than eager there,
so on CPU those two are reported as slowdowns and held against the baselines rather than
claimed; the claim is asserted on GPU.

The compared steps, per framework:

- torch: eager vs ``torch.compile(model)`` (inductor; on CUDA also CUDA graphs,
  mode "reduce-overhead", and "max-autotune" for the H100 target).
- tensorflow: the ``tf.function`` graph step vs the same with ``jit_compile=True`` (XLA).
- mxnet: imperative Gluon vs ``hybridize(static_alloc=True, static_shape=True)``.

CPU (smoke shapes): one process per variant, not the paired runner's default 2: a cold
inductor compile of ResNet-18 takes about 50 s of a 2-core runner per process, and the CI
budget for this file is about 3 minutes. MXNet's claim is decided on 20 pairs (the default): on 10
it read 1.10x and stayed undecided for 3 more generations, 108 s against 44 (Intel AMX type, issue
59); with 6 a signed-rank interval was the full range of the pairs (measured: 0.32x to 5.2x around
0.84x on a busy 2-core VM), an assertion nobody could fail. torch's and XLA's slowdowns, asserted on
no interval, are recorded from 8 and 4 pairs. Every child
is built and warmed up alone (``build_one_at_a_time``), so the compile time is not
stretched by another child's warm-up; torch compiles into a fresh inductor cache
(``TORCHINDUCTOR_CACHE_DIR`` in the test's temporary folder), so the compile time is a
cold one, what a user pays in a new environment (the core names a figure measured with a
warm cache ``compile_time_warm_cache``, never compared with a cold one).
"""

from __future__ import annotations

import os
import shutil
import warnings

import pytest

from pytest_dlperf.plugin.options import DEFAULT_AB_THRESHOLD as AB_THRESHOLD
from pytest_dlperf.judging.outcomes import REGRESSION
from pytest_dlperf.judging.stats import decide, decided_at
from perf_tests.claims.tuning import SlowdownWarning

#: CPU: processes per variant and pairs (see the module docstring for why fewer than the default).
CPU_PROCESSES = 1
CPU_PAIRS = 20
#: Issue 15: the torch core's compiled ResNet-50 AMP (batch 128, synthetic) on one H100; eager measured 4,111 img/s.
H100_TARGET_IMG_S = 5000.0
#: Dense fp16/bf16 tensor-core peak (no sparsity), TFLOP/s, by the device name torch reports: NVIDIA's data sheets.
PEAK_FP16_TFLOPS = {"H100 80GB HBM3": 989.4, "H100 PCIe": 756.0, "H200": 989.4, "A100": 312.0}


def cxx_compiler() -> str | None:
    """The C++ compiler inductor's CPU backend would use ($CXX, else g++, c++ or clang++ on PATH)."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def assert_trains(*runs):
    for run in runs:
        assert run.loss_fell(), f"{run.label}: loss did not fall: {run.losses[:3]} ... {run.losses[-3:]}"


def assert_compile_recorded(run, events=("graph_breaks", "recompilations")):
    """The compiled run measured its compile cold and reported the framework's compile events."""
    compile_info = run.details["compile"]
    assert "compile_time" in run.metrics, (
        f"{run.label}: no cold compile_time (cache {compile_info.get('cache')!r}): {sorted(run.metrics)}")
    assert run.metrics["compile_time_total"].value >= run.metrics["compile_time"].value > 0
    for name in events:
        assert name in run.metrics, f"{run.label}: the framework's {name} were not recorded: {sorted(run.metrics)}"


def compare(dlperf, eager, *compiled, cpu: bool, request, claim: bool = True, pairs: int = CPU_PAIRS):
    """Train ``eager`` and the ``compiled`` variants interleaved; record, check, and assert that each
    compiled one is not slower (``claim=False``: a known slowdown is reported as a SlowdownWarning and
    a ``slower_than_<eager>`` property instead, its figures still held against the baselines)."""
    options = dict(processes=CPU_PROCESSES, pairs=pairs) if cpu else {}
    paired = dlperf.run_paired(eager, *compiled, build_one_at_a_time=True,
                               decided=decided_at(AB_THRESHOLD) if claim else None, **options)
    runs = [paired.results[s.label] for s in (eager, *compiled)]
    for s in compiled:
        dlperf.ledger.speedup(f"{s.label}_vs_{eager.label}", paired.ratio(s.label))
    dlperf.check(*runs)
    assert_trains(*runs)
    for s in compiled:
        ratio = paired.ratio(s.label)
        run = paired.results[s.label]
        request.node.user_properties.append(
            (f"dlperf.{s.label}.compile_summary",
             f"{ratio.estimate:.3f}x {eager.label}; compile {run.metrics['compile_time'].value:.1f} s first step, "
             f"{run.metrics['compile_time_total'].value:.1f} s to steady state"
             if "compile_time" in run.metrics else f"{ratio.estimate:.3f}x {eager.label}"))
        slower = (f"{s.label} is slower than {eager.label}: {ratio.describe()} (paired rounds; "
                  f"{run.throughput.value:.1f} vs {paired.results[eager.label].throughput.value:.1f} samples/s), "
                  f"beyond the {AB_THRESHOLD:.0%} threshold")
        if not claim:
            if decide(ratio, AB_THRESHOLD) == REGRESSION:
                request.node.user_properties.append((f"dlperf.{s.label}.slower_than_{eager.label}",
                                                     f"{ratio.estimate:.3f}"))
                warnings.warn(SlowdownWarning(slower), stacklevel=1)
            continue
        assert decide(ratio, AB_THRESHOLD) != REGRESSION, slower
    return paired


# --------------------------------------------------------------------------- CPU, smoke shapes


@pytest.mark.slow
@pytest.mark.framework("torch")
def test_torch_compile_on_cpu_is_held_against_eager(dlperf, tmp_path, request):
    """inductor's CPU code for training is not faster than eager here: ResNet-18, fp32, batch 16, 64 px,
    2-core EPYC, torch 2.14.1 measured 0.76x eager (interval [0.71, 0.82], 20 pairs; 0.84x in an earlier
    6-pair run), the convolutions being the same oneDNN calls either way. So no speedup is claimed on
    CPU (the GPU tests claim it): the slowdown is reported (SlowdownWarning), and the compiled figures
    (throughput, the ratio, cold compile time, graph breaks, recompilations) are held against this
    machine's baselines, which is what catches a compiler regression after an upgrade."""
    if cxx_compiler() is None:
        pytest.skip("torch.compile's CPU backend (inductor) compiles C++: no C++ compiler ($CXX, g++, c++ or "
                    "clang++) on PATH; install one (Debian: apt-get install g++)")
    base = dlperf.scenario("torch", "resnet18", env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    eager = base.replace(label="eager")
    compiled = base.replace(compile="default", label="compiled")
    paired = compare(dlperf, eager, compiled, cpu=True, request=request, claim=False, pairs=8)
    assert_compile_recorded(paired.results["compiled"])


@pytest.mark.slow
@pytest.mark.framework("tensorflow")
def test_tf_xla_on_cpu_is_held_against_graph_mode(dlperf, request):
    """XLA's CPU backend is not TensorFlow's fast CPU path: it compiles its own convolutions instead of
    calling oneDNN's, and measured 0.10x graph mode here (9.4 vs 88 img/s, interval [0.09, 0.12], 20 pairs;
    TF 2.21, 2-core EPYC). So no speedup is claimed on CPU (the GPU test claims it): the slowdown is
    reported (SlowdownWarning), and the XLA figures (throughput, the ratio, compile time,
    recompilations) are held against this machine's baselines, so a change of XLA:CPU shows. 4 pairs:
    an XLA round takes about 7 s here (CI budget), and an effect this size does not need 20 to be seen."""
    base = dlperf.scenario("tensorflow", "resnet18")
    paired = compare(dlperf, base.replace(label="graph"), base.replace(jit_compile=True, label="xla"),
                     cpu=True, request=request, claim=False, pairs=4)
    assert_compile_recorded(paired.results["xla"], events=("recompilations",))


@pytest.mark.slow
@pytest.mark.framework("mxnet")
def test_mxnet_hybridized_is_not_slower_than_imperative_on_cpu(dlperf, request):
    base = dlperf.scenario("mxnet", "resnet18")
    paired = compare(dlperf, base.replace(hybridize=False, label="imperative"),
                     base.replace(hybridize=True, label="hybridized"), cpu=True, request=request)
    assert_compile_recorded(paired.results["hybridized"], events=())  # MXNet reports no compile events


# --------------------------------------------------------------------------- GPU, full shapes


@pytest.mark.gpu
@pytest.mark.framework("torch")
@pytest.mark.parametrize("model", ("resnet50", "resnet18"))
def test_torch_compile_and_cuda_graphs_are_not_slower_than_eager_on_gpu(dlperf, model, tmp_path, request):
    base = dlperf.scenario("torch", model, precision="amp_fp16", batch_size=128,
                           env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    paired = compare(dlperf, base.replace(label="eager"), base.replace(compile="default", label="compiled"),
                     base.replace(compile="default", cuda_graphs=True, label="compiled_cuda_graphs"),
                     cpu=False, request=request)
    assert_compile_recorded(paired.results["compiled"])
    # the second compiled child reuses the first's inductor cache: its compile figures say so by name
    assert not paired.results["compiled_cuda_graphs"].details["compile"].get("cudagraph_skip_reasons"), (
        "inductor skipped CUDA graphs: " + str(paired.results["compiled_cuda_graphs"].details["compile"]))


@pytest.mark.gpu
@pytest.mark.framework("torch")
def test_torch_resnet50_amp_compiled_reaches_5000_img_s_on_h100(dlperf, tmp_path, request):
    """Issue 15: ResNet-50, AMP fp16, channels_last, batch 128 (the seeds'), synthetic data, torch.compile
    max-autotune with CUDA graphs: >= 5,000 img/s on one H100 (eager measured 4,111). Achieved TFLOP/s
    (FLOPs of forward+backward counted by torch's FlopCounterMode) and MFU against the GPU's dense fp16
    peak are recorded."""
    import torch

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    base = dlperf.scenario("torch", "resnet50", precision="amp_fp16", batch_size=128,
                           env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    run = dlperf.run(base.replace(compile="max-autotune", cuda_graphs=True, label="max_autotune_cuda_graphs"))
    peak = next((v for k, v in PEAK_FP16_TFLOPS.items() if k in name), None)
    tflops = run.metrics["achieved_tflops"].value
    request.node.user_properties.append(("dlperf.max_autotune_cuda_graphs.gpu_peak_fp16_tflops", str(peak)))
    if peak:
        request.node.user_properties.append(("dlperf.max_autotune_cuda_graphs.mfu", f"{tflops / peak:.4f}"))
    dlperf.check(run)
    assert_trains(run)
    assert_compile_recorded(run)
    if "H100" not in name:
        pytest.skip(f"the {H100_TARGET_IMG_S:.0f} img/s target is for an H100; this GPU is {name!r} "
                    f"({run.throughput.value:.0f} img/s recorded and checked against its baseline)")
    assert run.throughput.value >= H100_TARGET_IMG_S, (
        f"compiled ResNet-50 AMP at {run.throughput.value:.0f} img/s on {name}, the target is "
        f">= {H100_TARGET_IMG_S:.0f} ({tflops:.0f} TFLOP/s achieved)")


@pytest.mark.gpu
@pytest.mark.framework("tensorflow")
def test_tf_xla_is_not_slower_than_graph_mode_on_gpu(dlperf, request):
    base = dlperf.scenario("tensorflow", "resnet50", precision="amp_fp16", batch_size=128)
    paired = compare(dlperf, base.replace(label="graph"), base.replace(jit_compile=True, label="xla"),
                     cpu=False, request=request)
    assert_compile_recorded(paired.results["xla"], events=("recompilations",))


@pytest.mark.gpu
@pytest.mark.framework("mxnet")
def test_mxnet_hybridized_is_not_slower_than_imperative_on_gpu(dlperf, request):
    base = dlperf.scenario("mxnet", "resnet50", precision="amp_fp16", batch_size=128)
    paired = compare(dlperf, base.replace(hybridize=False, label="imperative"),
                     base.replace(hybridize=True, label="hybridized"), cpu=False, request=request)
    assert_compile_recorded(paired.results["hybridized"], events=())
