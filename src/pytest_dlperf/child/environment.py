"""The machine a figure was measured on, and the key its baselines are filed under.

Nothing here imports a deep-learning framework: the plugin asks how many GPUs there
are before any child starts, and the MXNet environment has no torch to ask.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from pytest_dlperf.child.gpus import gpus
from pytest_dlperf.scenario import INSTALL_HINTS

#: Environment variables that change how training runs; recorded with every figure.
RECORDED_ENV_PREFIXES = ("OMP_", "KMP_", "MKL_", "DNNL_", "ONEDNN_", "ATEN_", "TF_", "MXNET_", "CUDA_", "NCCL_",
                         "DMLC_")
#: Variables that cap the vector instruction set of the frameworks' CPU kernels: oneDNN's (torch,
#: TensorFlow; MXNet's older oneDNN reads the DNNL_ name) and ATen's own. A capped run stands for
#: another CPU class (e.g. an AVX-512 Xeon without native bf16), so its figures get their own key.
ISA_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def physical_cores() -> int:
    """Distinct (package, core) pairs among the usable CPUs; falls back to logical count."""
    cores = set()
    try:
        for cpu in os.sched_getaffinity(0):
            base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
            with open(f"{base}/physical_package_id") as a, open(f"{base}/core_id") as b:
                cores.add((a.read().strip(), b.read().strip()))
    except (OSError, AttributeError):
        return usable_cpus()
    return len(cores) or usable_cpus()


def numa_nodes() -> int:
    try:
        return len([d for d in os.listdir("/sys/devices/system/node") if re.fullmatch(r"node\d+", d)]) or 1
    except OSError:
        return 1


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


#: The vector ISA levels the frameworks' CPU kernels dispatch on, lowest first, each with the
#: /proc/cpuinfo flags that make it and the names the ISA-cap variables give it.
ISA_LEVELS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("sse4", ("sse4_2",), ("sse41", "default")),
    ("avx", ("avx",), ("avx",)),
    ("avx2", ("avx2", "fma"), ("avx2", "avx2_vnni", "avx2_vnni_2")),
    ("avx512", ("avx512f", "avx512bw", "avx512vl", "avx512dq"), ("avx512_core", "avx512", "avx512_core_vnni")),
    ("avx512bf16", ("avx512_bf16",), ("avx512_core_bf16", "avx512_core_fp16", "avx10_1_512")),
    ("amx", ("amx_tile", "amx_bf16"), ("avx512_core_amx", "avx512_core_amx_fp16", "avx10_1_512_amx",
                                       "avx10_1_512_amx_fp16", "all")),
)
_LEVEL_NAMES = [name for name, _, _ in ISA_LEVELS]


@functools.lru_cache(maxsize=1)
def cpu_identity() -> dict[str, Any]:
    """Vendor, family, model and flags of this CPU as /proc/cpuinfo shows them (empty where it does not)."""
    found: dict[str, Any] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("vendor_id", "cpu family", "model", "flags") and key not in found:
                    found[key] = value.strip()
                if not line.strip() and found:
                    break
    except OSError:
        pass
    return {"vendor": found.get("vendor_id", ""), "family": found.get("cpu family", ""),
            "model": found.get("model", ""), "flags": frozenset(found.get("flags", "").split())}


def native_isa(flags: frozenset[str] | None = None) -> str:
    """The highest vector ISA level this CPU has all the flags of (``avx2``, ``avx512``, ``amx``, ...)."""
    flags = cpu_identity()["flags"] if flags is None else flags
    level = "unknown" if not flags else "baseline"
    for name, needs, _ in ISA_LEVELS:
        if all(flag in flags for flag in needs):
            level = name
        else:
            break
    return level


def capped_level(cap: str) -> str | None:
    """The ISA level an ISA-cap value names (``AVX512_CORE`` -> ``avx512``); None for a name not known."""
    value = cap.strip().lower()
    for name, _, caps in ISA_LEVELS:
        if value in caps:
            return name
    return None


def isa_level(environ: Any = None, flags: frozenset[str] | None = None) -> str:
    """The level the kernels run at: the CPU's own, lowered by a cap in force, never raised by one."""
    native = native_isa(flags)
    levels = [capped_level(v) for v in isa_cap_values(environ)]
    if native not in _LEVEL_NAMES:
        return native
    known = [level for level in levels if level is not None]
    return min([native, *known], key=_LEVEL_NAMES.index)


def cap_problem(environ: Any = None, flags: frozenset[str] | None = None) -> str:
    """Why the ISA cap in force cannot stand for another CPU here (it would not lower this CPU's level,
    or names a level not known), or "" when it lowers it or no cap is set."""
    values = isa_cap_values(environ)
    if not values:
        return ""
    unknown = [v for v in values if capped_level(v) is None]
    if unknown:
        return (f"the ISA cap {', '.join(unknown)} is not a level pytest-dlperf knows "
                f"({', '.join(c for _, _, caps in ISA_LEVELS for c in caps)})")
    native = native_isa(flags)
    if isa_level(environ, flags) == native:
        return (f"the ISA cap {'/'.join(values)} does not lower this CPU's own level ({native}): a capped rerun "
                "here would run this CPU's kernels again, or force ones it lacks")
    return ""


def emulated_precisions(level: str | None = None) -> frozenset[str]:
    """Precisions this CPU runs without native instructions for them: bf16 below AVX512_BF16."""
    level = isa_level() if level is None else level
    native_bf16 = level in _LEVEL_NAMES and _LEVEL_NAMES.index(level) >= _LEVEL_NAMES.index("avx512bf16")
    return frozenset() if native_bf16 else frozenset({"amp_bf16"})


def hardware_key(device: str) -> str:
    """The baseline file a figure measured on ``device`` belongs to.

    Hardware only, on purpose: software versions are recorded with every entry and
    shown when they differ, so a framework or driver upgrade is compared against the
    figures from before it, which is the regression this tool exists to catch. A CPU is
    its model name, family and model number, usable CPUs and the vector ISA level the
    kernels run at (:func:`isa_level`): two VMs sold under one name with other ISAs never share a file.
    """
    if device == "cuda":
        found = gpus()
        if found:
            name = found[0].name
            # the SKU's memory, where its name does not give it (an H200 NVL and SXM share a name)
            if not re.search(r"\d+\s*gb", name.lower()) and found[0].memory_mib:
                name += f" {round(found[0].memory_mib / 1024)}gb"
            return f"gpu-{slug(name)}-x{len(found)}"
        return "gpu-unknown"
    return _cpu_key(isa_level(), native_isa())


def _cpu_key(level: str, native: str) -> str:
    model = re.sub(r"\((r|tm)\)|cpu|@.*$", "", cpu_model().lower())
    ident = cpu_identity()
    number = f"-f{ident['family']}m{ident['model']}" if ident["family"] and ident["model"] else ""
    capped = "-capped" if level != native else ""
    return f"cpu-{slug(model)}{number}-{usable_cpus()}cpu-{level}{capped}"


def cpu_keys() -> list[str]:
    """Every key this CPU's figures can be filed under: its own level's first, then each lower level's,
    which an ISA cap gives them (the ISA-capped reruns)."""
    native = native_isa()
    if native not in _LEVEL_NAMES:
        return [_cpu_key(native, native)]
    lower = reversed(_LEVEL_NAMES[:_LEVEL_NAMES.index(native)])
    return [_cpu_key(native, native)] + [_cpu_key(level, native) for level in lower]


def isa_cap_values(environ: Any = None) -> list[str]:
    """The ISA-cap values in force (:data:`ISA_CAP_VARIABLES`), distinct, lower case."""
    environ = os.environ if environ is None else environ
    return list(dict.fromkeys(environ[name].strip().lower() for name in ISA_CAP_VARIABLES
                              if environ.get(name, "").strip()))


def isa_cap(environ: Any = None) -> str:
    """The vector-ISA cap in force, e.g. ``avx512_core``; empty when none is set."""
    return "-".join(isa_cap_values(environ))


def cpu_record() -> dict[str, Any]:
    """What identifies this CPU beside its key: vendor, family, model, native and effective ISA level."""
    ident = cpu_identity()
    return {"cpu_vendor": ident["vendor"], "cpu_family": ident["family"], "cpu_model_number": ident["model"],
            "isa_native": native_isa(), "isa_level": isa_level()}


#: ``get_mempolicy(2)`` modes (linux/mempolicy.h) and the syscall's number per architecture.
MEMPOLICY_MODES = {0: "default", 1: "preferred", 2: "bind", 3: "interleave", 4: "local", 5: "preferred_many",
                   6: "weighted_interleave"}
_GET_MEMPOLICY = {"x86_64": 239, "aarch64": 236, "ppc64le": 260}


def memory_policy() -> dict[str, Any] | None:
    """The NUMA memory policy the kernel applies to this process (what ``numactl --interleave=all``
    sets): ``{"mode": "interleave", "nodes": [0, 1]}``, asked of the kernel with ``get_mempolicy``;
    None where it cannot be asked (not Linux, an unknown architecture, a kernel without NUMA)."""
    number = _GET_MEMPOLICY.get(platform.machine())
    if number is None or not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    mode = ctypes.c_int(-1)
    words = 16  # 1024 nodes
    mask = (ctypes.c_ulong * words)()
    bits = ctypes.sizeof(ctypes.c_ulong) * 8
    if libc.syscall(number, ctypes.byref(mode), mask, ctypes.c_ulong(words * bits), ctypes.c_ulong(0),
                    ctypes.c_ulong(0)) != 0:
        return None
    nodes = [w * bits + b for w in range(words) for b in range(bits) if mask[w] >> b & 1]
    return {"mode": MEMPOLICY_MODES.get(mode.value & 0xFF, str(mode.value)), "nodes": nodes}


def allowed_memory_nodes() -> list[int] | None:
    """The NUMA nodes this process may allocate on (``Mems_allowed_list`` of /proc/self/status)."""
    try:
        with open("/proc/self/status", encoding="utf-8") as fh:
            line = next((entry for entry in fh if entry.startswith("Mems_allowed_list:")), None)
    except OSError:
        return None
    if line is None:
        return None
    nodes: list[int] = []
    for part in line.split(":", 1)[1].strip().split(","):
        low, _, high = part.partition("-")
        if low.strip():
            nodes.extend(range(int(low), int(high or low) + 1))
    return nodes


def host_record() -> dict[str, Any]:
    """Hardware, OS and settings of this process, without any framework."""
    record: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        **cpu_record(),
        "usable_cpus": usable_cpus(),
        "physical_cores": physical_cores(),
        "numa_nodes": numa_nodes(),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(RECORDED_ENV_PREFIXES)},
        "memory_policy": memory_policy(),
        "memory_nodes_allowed": allowed_memory_nodes(),
    }
    found = gpus()
    if found:
        record["gpus"] = [g.name for g in found]
        record["gpu_driver"] = found[0].driver
        record["gpu_memory_mib"] = found[0].memory_mib
    return record


# --- the OpenMP runtime: which one a framework ships, which one a process loaded --------------

#: Library file prefixes of the OpenMP runtimes a framework wheel may ship or load.
OPENMP_LIBRARIES = {"intel": "libiomp5", "llvm": "libomp", "gnu": "libgomp"}


def _runtime_in(names: Sequence[str]) -> str | None:
    for runtime, prefix in OPENMP_LIBRARIES.items():
        if any(Path(n).name.startswith(prefix) for n in names):
            return runtime
    return None


def openmp_runtime_of(framework: str) -> str:
    """The OpenMP runtime a framework's installed package ships ("intel", "llvm", "gnu", "unknown").

    Looks at the package's files (and the ``<package>.libs`` folder auditwheel
    makes) without importing it, so the parent can choose settings before the child starts.
    """
    module = INSTALL_HINTS[framework][0]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return "unknown"
    package = Path(next(iter(spec.submodule_search_locations)))
    folders = [package, package / "lib", package.parent / f"{module}.libs"]
    names = [p.name for folder in folders if folder.is_dir() for p in folder.iterdir()]
    return _runtime_in(names) or "unknown"


def loaded_openmp_runtime() -> str:
    """The OpenMP runtime mapped into this process right now (Linux), for the result's record."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            names = [line.split()[-1] for line in fh if ".so" in line]
    except OSError:
        return "unknown"
    return _runtime_in(names) or "none loaded"
