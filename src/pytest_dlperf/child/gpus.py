"""The GPUs this process may use, and what each can run: read from nvidia-smi (or torch, in a
child process), never by creating a CUDA context here.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
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
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return indexes
    raw = raw.strip()
    if raw in ("", "-1", "none", "NoDevFiles"):
        return []
    wanted = []
    for part in raw.split(","):
        part = part.strip()
        if part.isdigit() and int(part) in indexes:
            wanted.append(int(part))
        elif not part.isdigit():  # UUIDs: count them, trust the driver
            wanted.append(len(wanted))
    return wanted


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
