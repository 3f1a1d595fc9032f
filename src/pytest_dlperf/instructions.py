"""Counting the instructions of training steps under Valgrind: a figure that does not drift.

A scenario with ``measure="instructions"`` (or a run with ``--dlperf-measure=instructions``) runs its
child under ``valgrind --tool=callgrind --instr-atstart=no``: importing the framework, building the
model and warming up run uninstrumented; around each timed round the child switches instrumentation
on, zeroes callgrind's counters, runs the round's steps, dumps the count and switches it off again,
through Valgrind's client requests in a small C shim built here once per machine. The figure is
``instructions_per_step``: user-space instructions of one step, on Valgrind's CPU model (x86-64 up to
AVX2, whatever the host has) with the math libraries' kernels held below FMA, one compute thread and a
fixed hash seed so that the same code counts the same work (docs/instructions.md).

The parent side (:func:`unavailable`, :func:`build_shim`, :func:`command_prefix`,
:func:`child_environment`) and the child side (:class:`Counter`) share this module because they share
the shim's contract: the functions it exports and the environment variables that name it.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

METRIC = "instructions_per_step"
UNIT = "instructions"
#: Where the child finds the shim and the folder callgrind dumps into.
SHIM_VARIABLE = "DLPERF_CALLGRIND_SHIM"
OUT_VARIABLE = "DLPERF_CALLGRIND_OUT"

SHIM_SOURCE = """\
#include <valgrind/callgrind.h>
void dlperf_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void dlperf_stop(const char *label) { CALLGRIND_DUMP_STATS_AT(label); CALLGRIND_STOP_INSTRUMENTATION; }
int dlperf_on_valgrind(void) { return RUNNING_ON_VALGRIND; }
"""
INSTALL_HINT = "install Valgrind and a C compiler (Debian/Ubuntu: apt-get install valgrind gcc)"
#: Every framework's compute pools at one thread: thread scheduling must not change what is counted.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": "1",
              "PYTHONHASHSEED": "0"}
#: The math libraries' kernels held below FMA: Valgrind emulates every lane of a fused multiply-add in a
#: helper call, which makes an AVX2 step of MKL, oneDNN or OpenBLAS many times slower to count
#: (docs/instructions.md). MKL has no AVX-only path, so it runs at SSE4.2.
WITHOUT_FMA = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "AVX", "DNNL_MAX_CPU_ISA": "AVX",
               "OPENBLAS_CORETYPE": "Sandybridge"}


#: Names the lane's settings (:data:`ONE_THREAD`, :data:`WITHOUT_FMA`) in the counting key: rename it when
#: they change, since counts made under other caps are other figures.
LANE = "nofma"
#: What the counting key and the file's description say of the counting model where Valgrind is missing.
NO_VALGRIND = "none"


@functools.lru_cache(maxsize=None)
def valgrind_version() -> str:
    """Valgrind's major.minor version (``3.19``), or :data:`NO_VALGRIND` where it cannot be run."""
    try:
        done = subprocess.run(["valgrind", "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return NO_VALGRIND
    version = done.stdout.strip().removeprefix("valgrind-")
    return ".".join(version.split(".")[:2]) if done.returncode == 0 and version else NO_VALGRIND


def counting_key() -> str:
    """The baseline file of counted figures: what decides a count, not the host that counted it.

    A count is a property of the code, the software stack and Valgrind's CPU model (x86-64 up to AVX2
    whatever the host has, and the lane's caps), so counts recorded on one x86-64 host judge the first
    counted run on any other. The host is kept beside each recorded run (``runs[].host``) as evidence, and
    the software stack beside each figure, shown where it differs: an upgrade that adds work is a change
    to catch, not another figure."""
    return f"counted-{platform.machine().lower()}-valgrind{valgrind_version()}-{LANE}"


def counting_model() -> dict[str, str]:
    """What a counted baseline file records of its counting model, in place of a host's hardware."""
    return {"counter": "valgrind callgrind", "valgrind": valgrind_version(), "machine": platform.machine(),
            "lane": LANE, "lane_environment": " ".join(f"{k}={v}" for k, v in sorted({**ONE_THREAD,
                                                                                       **WITHOUT_FMA}.items()))}


def measure_of(metric: str) -> str:
    """Which measure writes ``metric``: "instructions" (a counted run) or "time" (every other figure)."""
    return "instructions" if metric == METRIC else "time"


class InstructionsUnavailable(RuntimeError):
    """This machine cannot count instructions; the message says why and how to fix it."""


def unavailable() -> str | None:
    """Why instructions cannot be counted here (a skip reason with the fix), or None when they can."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64", "aarch64"):
        return f"counting instructions needs Valgrind on Linux x86-64 or arm64, not {sys.platform} {platform.machine()}"
    missing = [tool for tool in ("valgrind", "cc") if shutil.which(tool) is None]
    if missing:
        return f"counting instructions needs {' and '.join(missing)} on PATH: {INSTALL_HINT}"
    return None


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "pytest-dlperf"


def build_shim(cache_dir: Path | None = None) -> Path:
    """The client-request shim, compiled once per source and machine and then reused."""
    reason = unavailable()
    if reason:
        raise InstructionsUnavailable(reason)
    folder = cache_dir or _cache_dir()
    digest = hashlib.sha256((SHIM_SOURCE + platform.machine()).encode()).hexdigest()[:16]
    target = folder / f"callgrind-shim-{digest}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        source = Path(scratch) / "shim.c"
        source.write_text(SHIM_SOURCE, encoding="utf-8")
        built = Path(scratch) / "shim.so"
        done = subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(built), str(source)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise InstructionsUnavailable(
                f"could not build the Valgrind client-request shim ({done.stderr.strip().splitlines()[-1:]}): "
                f"{INSTALL_HINT}; the valgrind package provides <valgrind/callgrind.h>")
        os.replace(built, target)  # atomic: a concurrent build leaves one whole file
    return target


def command_prefix(out_dir: Path) -> list[str]:
    """Valgrind's command line before the child's own: counting off until the child's first round."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-line=no", "--dump-instr=no",
            "--quiet", f"--callgrind-out-file={out_dir / 'callgrind.%p.out'}"]


def child_environment(shim: Path, out_dir: Path) -> dict[str, str]:
    return {**ONE_THREAD, **WITHOUT_FMA, SHIM_VARIABLE: str(shim), OUT_VARIABLE: str(out_dir)}


def read_total(text: str) -> int:
    """The instruction count of one callgrind dump (its ``totals:`` line, else ``summary:``)."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in ("totals", "summary") and value.strip():
            found[name] = int(value.split()[0])
    if not found:
        raise ValueError("the callgrind dump has no totals: or summary: line")
    return found.get("totals", found.get("summary", 0))


class Counter:
    """The child's side: start and stop counting around the steps of one round."""

    def __init__(self, shim: str, out_dir: str):
        self._lib = ctypes.CDLL(shim)
        self._lib.dlperf_stop.argtypes = [ctypes.c_char_p]
        self._out = Path(out_dir)
        if not self._lib.dlperf_on_valgrind():
            raise InstructionsUnavailable("this process is not running under Valgrind: instructions are counted "
                                          "only in a child the plugin starts (dlperf.run)")

    @classmethod
    def from_environment(cls) -> "Counter":
        shim, out_dir = os.environ.get(SHIM_VARIABLE), os.environ.get(OUT_VARIABLE)
        if not shim or not out_dir:
            raise InstructionsUnavailable(
                f"measure='instructions' needs the child started by the plugin's runner ({SHIM_VARIABLE} and "
                f"{OUT_VARIABLE} are not set): dlperf.run counts instructions, paired and distributed runs do not")
        return cls(shim, out_dir)

    def start(self) -> None:
        self._lib.dlperf_start()

    def stop(self) -> int:
        """Instructions since :meth:`start`, read from the dump this call makes (then deleted)."""
        label = f"dlperf-{uuid.uuid4().hex}"
        self._lib.dlperf_stop(label.encode())
        trigger = f"desc: Trigger: Client Request: {label}"
        for path in self._out.glob("callgrind.*.out*"):
            text = path.read_text(encoding="utf-8", errors="replace")
            if trigger in text:
                path.unlink()
                return read_total(text)
        raise InstructionsUnavailable(f"callgrind wrote no dump for {label} in {self._out}")
