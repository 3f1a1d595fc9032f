"""The GPUs CUDA_VISIBLE_DEVICES names, read as CUDA reads it: indexes, GPU and MIG UUIDs, on a host with
mixed GPUs, from a fake nvidia-smi and a fake pynvml."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from pytest_dlperf.child import gpus

A100_UUID = "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"
H100_UUID = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
MIG_UUID = "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"
QUERY = "0, NVIDIA A100-SXM4-40GB, 550.54.15, 40960\n1, NVIDIA H100 80GB HBM3, 550.54.15, 81559\n"
LISTED = (f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {A100_UUID})\n"
          f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {H100_UUID})\n"
          f"  MIG 1g.10gb     Device  0: (UUID: {MIG_UUID})\n")
A100 = gpus.Gpu("NVIDIA A100-SXM4-40GB", "550.54.15", 40960)
H100 = gpus.Gpu("NVIDIA H100 80GB HBM3", "550.54.15", 81559)


@pytest.fixture(autouse=True)
def fake_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """nvidia-smi on a host with an A100 (GPU 0) and an H100 in MIG mode (GPU 1); no pynvml."""
    calls: list[list[str]] = []

    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, LISTED if cmd[1:] == ["-L"] else QUERY, "")

    monkeypatch.setattr(gpus.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gpus.subprocess, "run", run)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    gpus._all_gpus.cache_clear()
    yield calls
    gpus._all_gpus.cache_clear()


@pytest.mark.parametrize("visible, expected", [
    (H100_UUID, [H100]),                       # the H100 by its UUID: not "the first GPU", the A100
    (f"{H100_UUID},{A100_UUID}", [H100, A100]),  # in the order given
    (H100_UUID[:12], [H100]),                  # a unique prefix, as CUDA takes it
    ("GPU-", []),                              # a prefix of both names neither
    (MIG_UUID, [H100]),                        # a MIG device stands for the GPU it is a slice of
    (f"MIG-{H100_UUID}/7/0", [H100]),          # the MIG naming of older drivers
    ("1,0", [H100, A100]),
    (f"1,GPU-00000000,{A100_UUID}", [H100]),   # CUDA ignores every entry after one that names no device
    ("7,0", []),
])
def test_cuda_visible_devices_names_the_gpus_cuda_will_use(monkeypatch, visible, expected):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert list(gpus.gpus()) == expected


def test_indexes_alone_ask_nvidia_smi_nothing_more(monkeypatch, fake_nvidia_smi):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpus.gpus() == (H100,)
    assert [cmd[1] for cmd in fake_nvidia_smi] == ["--query-gpu=index,name,driver_version,memory.total"]


class FakeNvmlError(Exception):
    pass


def fake_pynvml(uuids: list[str], migs: dict[int, list[str | None]]) -> types.ModuleType:
    """pynvml over GPUs of ``uuids`` (bytes, as older releases return them), ``migs`` their MIG slots."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = FakeNvmlError  # type: ignore[attr-defined]
    state = {"open": 0}

    def max_migs(handle: tuple[str, int]) -> int:
        if handle[1] not in migs:
            raise FakeNvmlError("Not Supported")
        return len(migs[handle[1]])

    def mig_handle(handle: tuple[str, int], slot: int) -> tuple[str, int]:
        uuid = migs[handle[1]][slot]
        if uuid is None:
            raise FakeNvmlError("Not Found")
        return ("mig", uuid)  # type: ignore[return-value]

    nvml.nvmlInit = lambda: state.update(open=state["open"] + 1)  # type: ignore[attr-defined]
    nvml.nvmlShutdown = lambda: state.update(open=state["open"] - 1)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: len(uuids)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetUUID = (  # type: ignore[attr-defined]
        lambda h: uuids[h[1]].encode() if h[0] == "gpu" else h[1])
    nvml.nvmlDeviceGetMaxMigDeviceCount = max_migs  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle  # type: ignore[attr-defined]
    nvml.state = state  # type: ignore[attr-defined]
    return nvml


def test_nvml_names_the_uuids_where_pynvml_imports(monkeypatch, fake_nvidia_smi):
    nvml = fake_pynvml([A100_UUID, H100_UUID], {1: [None, MIG_UUID]})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{MIG_UUID},{A100_UUID}")
    assert gpus.gpus() == (H100, A100)
    assert not any(cmd[1:] == ["-L"] for cmd in fake_nvidia_smi) and nvml.state["open"] == 0  # type: ignore[attr-defined]


def test_without_nvml_or_nvidia_smi_a_uuid_names_no_gpu(monkeypatch):
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", H100_UUID)
    assert gpus._visible([0, 1]) == []
