"""The GPUs this process may use, and what each can run: read from nvidia-smi (or torch, in a
child process), never by creating a CUDA context here.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    memory_mib: int


def _visible(indexes: list[int]) -> list[int]:
    """The nvidia-smi indexes CUDA_VISIBLE_DEVICES names, in its order, as CUDA reads it: an index, a GPU
    UUID (``GPU-...``, or a unique prefix of one) or a MIG device's (``MIG-...``, ``MIG-GPU-.../gi/ci``),
    which stands for the GPU it is a slice of; CUDA ignores every entry after one that names no device."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return indexes
    raw = raw.strip()
    if raw in ("", "-1", "none", "NoDevFiles"):
        return []
    uuids: dict[str, int] | None = None
    wanted = []
    for part in (p.strip() for p in raw.split(",")):
        if part.isdigit():
            index: int | None = int(part)
        else:
            if uuids is None:
                uuids = _uuids()
            index = _by_uuid(part, uuids)
        if index is None or index not in indexes:
            break
        wanted.append(index)
    return wanted


def _by_uuid(name: str, uuids: dict[str, int]) -> int | None:
    """The index of the GPU that ``name`` (a UUID or a unique prefix of one) names; None if none or several."""
    if name.startswith("MIG-GPU-"):  # the MIG naming of drivers before R470: MIG-<GPU's UUID>/<gi>/<ci>
        name = name[len("MIG-"):].split("/")[0]
    found = {index for uuid, index in uuids.items() if uuid.startswith(name)}
    return found.pop() if len(found) == 1 else None


def _uuids() -> dict[str, int]:
    """Every GPU's and MIG device's UUID and the index of its GPU: from NVML where the optional pynvml
    (nvidia-ml-py) imports, else from ``nvidia-smi -L``; empty when neither answers."""
    found = _uuids_from_nvml()
    return found if found is not None else _uuids_from_nvidia_smi()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)  # older pynvml returns bytes


def _uuids_from_nvml() -> dict[str, int] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        found = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            gpu = pynvml.nvmlDeviceGetHandleByIndex(index)
            found[_text(pynvml.nvmlDeviceGetUUID(gpu))] = index
            try:
                slots = pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu)
            except pynvml.NVMLError:  # a GPU without MIG
                slots = 0
            for slot in range(slots):
                try:
                    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, slot)
                except pynvml.NVMLError:  # an empty slot
                    continue
                found[_text(pynvml.nvmlDeviceGetUUID(mig))] = index
        return found
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


#: ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)``, and under a GPU in MIG mode
#: ``  MIG 1g.10gb     Device  0: (UUID: MIG-...)``.
_LISTED = re.compile(r"^(?:GPU (?P<index>\d+):|\s+MIG\b).*\(UUID: (?P<uuid>(?:GPU|MIG)-[^)\s]+)\)")


def _uuids_from_nvidia_smi() -> dict[str, int]:
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[str, int] = {}
    gpu = None
    for line in out.splitlines():
        match = _LISTED.match(line)
        if match and match["index"] is not None:
            gpu = int(match["index"])
        if match and gpu is not None:
            found[match["uuid"]] = gpu
    return found


@functools.lru_cache(maxsize=1)
def _all_gpus() -> tuple[Gpu, ...]:
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    gpus = {}
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            memory = int(float(parts[3])) if parts[3].replace(".", "").isdigit() else 0
            gpus[int(parts[0])] = Gpu(parts[1], parts[2], memory)
    return tuple(gpus[i] for i in _visible(sorted(gpus)) if i in gpus)


def gpus() -> tuple[Gpu, ...]:
    """The CUDA devices this process may use (honours CUDA_VISIBLE_DEVICES)."""
    return _all_gpus()


@dataclass(frozen=True)
class GpuCapability:
    """A GPU's name and CUDA compute capability (an H100 is 9.0, i.e. ``sm_90``)."""

    name: str
    major: int
    minor: int

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}"


def _capabilities_from_nvidia_smi() -> tuple[GpuCapability, ...] | None:
    """nvidia-smi's ``compute_cap`` field (drivers from 510 on); None when it cannot say."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:  # a separate query: an older driver refuses the field, and gpus() must not lose its list for that
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = {}
    for line in out.strip().splitlines():
        index, _, rest = line.partition(",")
        name, _, cap = rest.rpartition(",")
        major, dot, minor = cap.strip().partition(".")
        if not (index.strip().isdigit() and dot and major.isdigit() and minor.isdigit()):
            return None
        found[int(index)] = GpuCapability(name.strip(), int(major), int(minor))
    return tuple(found[i] for i in _visible(sorted(found)) if i in found)


#: Asks torch in a child process, so that this one never creates a CUDA context.
_TORCH_QUERY = ("import json, torch; c = torch.cuda; print(json.dumps("
                "[[c.get_device_name(i), *c.get_device_capability(i)] for i in range(c.device_count())]))")


def _capabilities_from_torch() -> tuple[GpuCapability, ...] | None:
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        out = subprocess.run([sys.executable, "-c", _TORCH_QUERY], capture_output=True, text=True, timeout=120,
                             check=True).stdout
        return tuple(GpuCapability(str(name), int(major), int(minor)) for name, major, minor in json.loads(out))
    except (OSError, subprocess.SubprocessError, ValueError, TypeError):
        return None


@functools.lru_cache(maxsize=1)
def gpu_capabilities() -> tuple[GpuCapability, ...] | None:
    """Name and compute capability of each GPU this process may use, read without launching a kernel:
    nvidia-smi, else torch (in a child process); None when neither can tell."""
    found = _capabilities_from_nvidia_smi()
    return found if found is not None else _capabilities_from_torch()
