"""What MXNet 1.9 and the MXNet core can run, decided before mxnet is imported: a scenario this core
refuses (with the alternative), and a GPU the installed wheel has no kernels for.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from typing import Sequence

from pytest_dlperf.child.gpus import GpuCapability, gpu_capabilities
from pytest_dlperf.scenario import Scenario, ScenarioError

#: The GPU architectures (SASS only, no PTX) each MXNet 1.9 CUDA wheel was compiled for, by pip
#: distribution. The installed mxnet does not say (``mxnet.runtime.Features`` lists CUDA, CUDNN,
#: NCCL but no architectures; ``mxnet.libinfo`` only finds the library), so this is the release
#: build's configuration: apache/mxnet ``config/distribution/linux_cu112.cmake`` and
#: ``linux_cu117.cmake``, ``set(MXNET_CUDA_ARCH "5.0;6.0;7.0;8.0;8.6")``, without the ``+PTX``
#: suffix that would have added PTX a newer GPU could JIT-compile. A distribution or version
#: not listed here is not guessed at: its scenarios run.
WHEEL_CUDA_ARCHITECTURES: dict[str, tuple[tuple[int, int], ...]] = {
    "mxnet-cu112": ((5, 0), (6, 0), (7, 0), (8, 0), (8, 6)),
    "mxnet-cu117": ((5, 0), (6, 0), (7, 0), (8, 0), (8, 6)),
}
WHEEL_TABLE_VERSION = "1.9."


def default_kvstore(scenario: Scenario) -> str:
    """``device`` on GPU (aggregate and update on the GPU), ``local`` on CPU."""
    return scenario.kvstore or ("device" if scenario.device == "cuda" else "local")


def _has_avx512() -> bool | None:
    """Whether the CPU has AVX-512 (oneDNN's bfloat16 kernels need it); None if unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = next((line for line in fh if line.startswith("flags")), "")
    except OSError:
        return None
    return " avx512bw" in flags if flags else None


def check_supported(scenario: Scenario) -> None:
    """Refuse what this core or MXNet 1.9 cannot do, before anything is built."""
    if scenario.precision == "tf32":
        raise ScenarioError(
            "precision='tf32': MXNet 1.9 has no TF32 setting. Use precision='fp32' (strict FP32: this core sets "
            "NVIDIA_TF32_OVERRIDE=0 on CUDA; pass env={'NVIDIA_TF32_OVERRIDE': '1'} to let cuDNN use TF32 on "
            "Ampere as it does by default), 'amp_fp16' on CUDA, or 'amp_bf16' on CPU"
        )
    if scenario.precision == "amp_fp16" and scenario.device == "cpu":
        raise ScenarioError(
            "precision='amp_fp16' on CPU: MXNet 1.9 has no float16 GEMM or convolution kernels on CPU "
            "('FP16 gemm on cpu not implemented'); use precision='amp_bf16' on CPU, or device='cuda'"
        )
    if scenario.precision == "amp_bf16" and scenario.device == "cuda":
        raise ScenarioError(
            "precision='amp_bf16' on CUDA: MXNet 1.9's bfloat16 AMP runs on oneDNN (CPU) kernels only; "
            "use precision='amp_fp16' on CUDA, or device='cpu'"
        )
    if scenario.precision == "amp_bf16" and _has_avx512() is False:
        raise ScenarioError(
            "precision='amp_bf16' needs oneDNN's bfloat16 kernels, which need an AVX-512 CPU (avx512bw); "
            "this CPU has none: use precision='fp32'"
        )
    if scenario.data_format == "NHWC" or scenario.channels_last:
        raise ScenarioError(
            "data_format='NHWC' / channels_last=True: the Gluon model-zoo ResNets are built NCHW only; "
            "leave data_format and channels_last unset (or NCHW / False) for MXNet"
        )
    if scenario.jit_compile:
        raise ScenarioError("jit_compile=True is TensorFlow's XLA switch; MXNet's is hybridize=True "
                            "(the default hybridizes too): drop it")
    kvstore = default_kvstore(scenario)
    if kvstore == "nccl" and scenario.device != "cuda":
        raise ScenarioError("kvstore='nccl' needs device='cuda'; on CPU use kvstore='local' or 'device'")
    if kvstore.startswith("dist_") and "DMLC_ROLE" not in os.environ:
        raise ScenarioError(
            f"kvstore={kvstore!r} is a distributed KVStore: it runs under MXNet's launcher (tools/launch.py), "
            "which sets DMLC_ROLE and the scheduler address; use 'local' or 'device' for one process"
        )
    if kvstore == "horovod":
        raise ScenarioError(
            "kvstore='horovod' needs horovod.mxnet and horovodrun; use 'local', 'device' or 'nccl' for one process"
        )


def installed_distribution() -> str | None:
    """The pip distribution that provides ``mxnet`` (``mxnet``, ``mxnet-cu112``, ...)."""
    try:
        names = importlib.metadata.packages_distributions().get("mxnet", [])
    except Exception:  # metadata is best effort
        return None
    return names[0] if names else None


@functools.lru_cache(maxsize=1)
def _installed_wheel() -> tuple[str | None, str | None]:
    """The installed mxnet's distribution and version, from its metadata (mxnet is not imported)."""
    distribution = installed_distribution()
    try:
        return distribution, importlib.metadata.version(distribution) if distribution else None
    except importlib.metadata.PackageNotFoundError:
        return distribution, None


def _runs_on(gpu: GpuCapability, architectures: Sequence[tuple[int, int]]) -> bool:
    """SASS built for X.y runs on compute capability X.z with z >= y (CUDA's binary compatibility)."""
    return any(major == gpu.major and minor <= gpu.minor for major, minor in architectures)


def unsupported_gpu(gpus: Sequence[GpuCapability] | None = None, distribution: str | None = None,
                    version: str | None = None) -> str | None:
    """Why the installed MXNet wheel cannot run on a GPU here (a skip reason), or None when it can or
    nobody can tell. Defaults: the visible GPUs (:func:`~pytest_dlperf.child.gpus.gpu_capabilities`)
    and the installed distribution; neither imports mxnet nor starts CUDA in this process."""
    if distribution is None:
        distribution, version = _installed_wheel()
    architectures = WHEEL_CUDA_ARCHITECTURES.get(distribution or "")
    if architectures is None or not (version or "").startswith(WHEEL_TABLE_VERSION):
        return None
    gpus = gpu_capabilities() if gpus is None else gpus
    gpu = next((g for g in gpus or () if not _runs_on(g, architectures)), None)
    if gpu is None:
        return None
    low, high = min(architectures), max(architectures)
    return (f"mxnet {version} ({distribution}) has kernels for sm_{low[0]}{low[1]}-sm_{high[0]}{high[1]} only and "
            f"no PTX; this GPU, {gpu.name}, is {gpu.sm}: it cannot run here (use a GPU of compute capability "
            f"{low[0]}.{low[1]} to {high[0]}.x, or an MXNet build for {gpu.sm})")
