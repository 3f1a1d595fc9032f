"""What every torch core shares and what your own torch code runs on: no torchvision, no settings of its own.

The built-in image core (:mod:`.torch_core`) adds torchvision and its precision switches on top;
your ``step=`` or ``loop=`` runs with only this (threads only where the scenario names them).
"""

from __future__ import annotations

from typing import Any

import torch

from pytest_dlperf.child.environment import loaded_openmp_runtime
from pytest_dlperf.scenario import Scenario, ScenarioError


class CudaStepTimer:
    """Per-step device time from CUDA events, read once per round (no per-step sync)."""

    def __init__(self) -> None:
        self._events: list[torch.cuda.Event] = []

    def start_round(self) -> None:
        self._events = [torch.cuda.Event(enable_timing=True)]
        self._events[0].record()

    def mark(self) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._events.append(event)

    def step_seconds(self) -> list[float]:
        return [a.elapsed_time(b) / 1000.0 for a, b in zip(self._events, self._events[1:])]


def apply_threads(scenario: Scenario) -> None:
    """The thread counts the scenario names; torch's own defaults otherwise."""
    if scenario.intra_op_threads:
        torch.set_num_threads(scenario.intra_op_threads)
    if scenario.inter_op_threads:
        torch.set_num_interop_threads(scenario.inter_op_threads)


def check_device(scenario: Scenario) -> None:
    if scenario.device == "cuda" and not torch.cuda.is_available():
        raise ScenarioError("device='cuda' but torch sees no CUDA device (check the driver and CUDA_VISIBLE_DEVICES)")


def base_environment(scenario: Scenario) -> dict[str, Any]:
    """The software and the backend switches as the run found them (read, never set, here)."""
    env: dict[str, Any] = {
        "framework": "torch",
        "framework_version": torch.__version__,
        "intra_op_threads": torch.get_num_threads(),
        "inter_op_threads": torch.get_num_interop_threads(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "torch_compile_mode": scenario.torch_compile_mode,
        "openmp_runtime": loaded_openmp_runtime(),
    }
    if scenario.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(
            cuda_version=torch.version.cuda,
            cudnn_version=torch.backends.cudnn.version(),
            gpu_name=props.name,
            gpu_capability=f"{props.major}.{props.minor}",
            gpu_memory_bytes=props.total_memory,
            gpu_count=torch.cuda.device_count(),
        )
    return env


class CompileReport:
    """torch.compile's process-wide counters, read for a loop with ``compiles`` and ``scenario``."""

    compiles: bool
    scenario: Scenario

    def compile_events(self) -> dict[str, list[str]] | None:
        """Graph breaks and recompilations torch.compile reported in this process, each with its reason.

        Graph breaks: ``torch._dynamo.utils.counters["graph_break"]`` (reason -> times hit while
        compiling); recompilations: the compilation metrics that carry a ``recompile_reason``
        (a guard failed, e.g. a new shape). None when eager.
        """
        if not self.compiles:
            return None
        from torch._dynamo.utils import counters, get_compilation_metrics

        breaks = [reason.splitlines()[0] if reason else "graph break"
                  for reason, times in counters["graph_break"].items() for _ in range(times)]
        recompiles = [f"{m.co_name}: {m.recompile_reason}" for m in get_compilation_metrics() if m.recompile_reason]
        return {"graph_breaks": breaks, "recompilations": recompiles}

    def compile_cache(self) -> str | None:
        """'cold' when inductor compiled everything (no FX-graph or AOTAutograd cache hit), else 'warm'."""
        if not self.compiles:
            return None
        from torch._dynamo.utils import counters

        hits = counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]
        return "warm" if hits else "cold"

    def compile_notes(self) -> dict[str, Any]:
        """Why CUDA graphs were skipped, if they were (inductor falls back to plain kernels silently)."""
        if not self.compiles:
            return {}
        from torch._dynamo.utils import get_compilation_metrics

        skips = sorted({m.cudagraph_skip_reason for m in get_compilation_metrics() if m.cudagraph_skip_reason})
        return {"torch_compile_mode": self.scenario.torch_compile_mode, "cudagraph_skip_reasons": skips}
