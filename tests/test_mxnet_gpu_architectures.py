"""MXNet on a GPU its wheel has no kernels for is skipped, before any child starts, with both sides named.

The GPU query and the installed distribution are injected or monkeypatched: nothing here needs a GPU,
nvidia-smi, torch's CUDA or mxnet.
"""

from __future__ import annotations

import importlib.util
import subprocess

import pytest

from pytest_dlperf.child import gpus as gpu_query
from pytest_dlperf.plugin import markers
from pytest_dlperf.child.cores import mxnet_core, mxnet_support
from pytest_dlperf.child.gpus import Gpu, GpuCapability
from pytest_dlperf.scenario import Scenario, ScenarioError

find_spec = importlib.util.find_spec
H100 = GpuCapability("NVIDIA H100 80GB HBM3", 9, 0)
A100 = GpuCapability("NVIDIA A100-SXM4-40GB", 8, 0)


@pytest.fixture(autouse=True)
def _fresh_gpu_query():
    gpu_query.gpu_capabilities.cache_clear()
    yield
    gpu_query.gpu_capabilities.cache_clear()


def test_h100_with_the_cu112_wheel_names_the_gpu_and_the_wheels_architectures():
    reason = mxnet_support.unsupported_gpu([H100], "mxnet-cu112", "1.9.1")
    assert reason == (
        "mxnet 1.9.1 (mxnet-cu112) has kernels for sm_50-sm_86 only and no PTX; this GPU, NVIDIA H100 80GB HBM3, "
        "is sm_90: it cannot run here (use a GPU of compute capability 5.0 to 8.x, or an MXNet build for sm_90)"
    )
    assert "mxnet-cu117" in mxnet_support.unsupported_gpu([H100], "mxnet-cu117", "1.9.1")


@pytest.mark.parametrize("gpu", [A100, GpuCapability("NVIDIA GeForce RTX 4090", 8, 9),
                                 GpuCapability("Tesla T4", 7, 5), GpuCapability("Tesla V100-SXM2-16GB", 7, 0)])
def test_a_gpu_the_wheel_has_sass_for_is_not_skipped(gpu):
    # sm_89 and sm_75 run the sm_86 and sm_70 SASS: same major, newer minor
    assert mxnet_support.unsupported_gpu([gpu], "mxnet-cu112", "1.9.1") is None


def test_one_gpu_without_kernels_among_several_is_the_one_named():
    assert "NVIDIA H100" in mxnet_support.unsupported_gpu([A100, H100], "mxnet-cu112", "1.9.1")


def test_no_gpu_query_possible_means_no_skip(monkeypatch):
    monkeypatch.setattr(gpu_query.shutil, "which", lambda name: None)
    monkeypatch.setattr(gpu_query.importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else find_spec(name, *a))
    assert gpu_query.gpu_capabilities() is None
    assert mxnet_support.unsupported_gpu(None, "mxnet-cu112", "1.9.1") is None


@pytest.mark.parametrize("distribution, version", [("mxnet", "1.9.1"), ("mxnet-mkl", "1.6.0"),
                                                   ("mxnet-cu112", "2.0.0b1"), (None, None)])
def test_a_wheel_not_in_the_table_is_not_guessed_at(distribution, version, monkeypatch):
    # the CPU wheel has no CUDA at all: on a GPU the core says so; on a CPU this check never runs
    monkeypatch.setattr(mxnet_support, "_installed_wheel", lambda: (distribution, version))
    assert mxnet_support.unsupported_gpu([H100]) is None


def test_the_installed_wheel_is_read_from_its_metadata(monkeypatch):
    monkeypatch.setattr(mxnet_support, "_installed_wheel", lambda: ("mxnet-cu112", "1.9.1"))
    monkeypatch.setattr(mxnet_support, "gpu_capabilities", lambda: (H100,))
    assert "mxnet 1.9.1 (mxnet-cu112)" in mxnet_support.unsupported_gpu()


def fake_run(stdout: str = "", fails: bool = False):
    def run(cmd, **kwargs):
        if fails:
            raise subprocess.CalledProcessError(2, cmd, "", 'Field "compute_cap" is not a valid field to query.')
        return subprocess.CompletedProcess(cmd, 0, stdout, "")
    return run


def test_nvidia_smi_gives_name_and_capability_of_the_visible_gpus(monkeypatch):
    monkeypatch.setattr(gpu_query.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gpu_query.subprocess, "run",
                        fake_run("0, NVIDIA A100-SXM4-40GB, 8.0\n1, NVIDIA H100 80GB HBM3, 9.0\n"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpu_query.gpu_capabilities() == (H100,)
    assert H100.sm == "sm_90"


def test_an_old_driver_without_compute_cap_falls_back_to_torch(monkeypatch):
    monkeypatch.setattr(gpu_query.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gpu_query.subprocess, "run", fake_run(fails=True))
    assert gpu_query.gpu_capabilities() is None  # torch's child query is refused by the same fake
    gpu_query.gpu_capabilities.cache_clear()
    monkeypatch.setattr(gpu_query, "_capabilities_from_torch", lambda: (A100,))
    assert gpu_query.gpu_capabilities() == (A100,)


class FakeItem:
    nodeid = "perf_tests/test_x.py::test_gpu"

    def __init__(self, *marks):
        self.marks = [m.mark for m in marks]

    def iter_markers(self, name=None):
        return (m for m in self.marks if name is None or m.name == name)

    def get_closest_marker(self, name):
        return next(self.iter_markers(name), None)


def test_a_gpu_marked_mxnet_test_is_skipped_before_any_child_starts(monkeypatch):
    monkeypatch.setattr(markers.importlib.util, "find_spec",
                        lambda name, *a: object() if name == "mxnet" else find_spec(name, *a))
    monkeypatch.setattr(markers, "gpus", lambda: (Gpu("NVIDIA H100 80GB HBM3", "550.54", 81559),))
    monkeypatch.setattr(mxnet_support, "_installed_wheel", lambda: ("mxnet-cu112", "1.9.1"))
    monkeypatch.setattr(mxnet_support, "gpu_capabilities", lambda: (H100,))
    gpu_test = FakeItem(pytest.mark.framework("mxnet"), pytest.mark.gpu)
    assert markers.validate(gpu_test) == [mxnet_support.unsupported_gpu([H100], "mxnet-cu112", "1.9.1")]
    assert markers.validate(FakeItem(pytest.mark.framework("mxnet"))) == []  # a CPU test runs
    assert markers.validate(FakeItem(pytest.mark.framework("torch"), pytest.mark.gpu)) in (
        [], ["torch is not installed in this environment: " + markers.INSTALL_HINTS["torch"][1]])


def test_a_cuda_scenario_asked_for_by_hand_is_refused_in_the_child_before_mxnet_loads(monkeypatch):
    monkeypatch.setattr(mxnet_core, "unsupported_gpu", lambda: "no kernels for sm_90")
    scenario = Scenario(framework="mxnet", model="resnet18", image_size=32, num_classes=10, batch_size=4,
                        device="cuda")
    with pytest.raises(ScenarioError, match="no kernels for sm_90"):
        mxnet_core.train(scenario)
