"""Your own PyTorch training step, measured like the built-in cores' (``Scenario.step``).

``make_step(scenario)`` builds whatever it needs (model, optimizer, data) and returns a callable;
each call runs one training step and returns its loss: a float, or a scalar tensor (better: it
does not wait for the device, so steps queue up as in real training). The callable may carry

- ``samples_per_step``: what one step processes (tokens, say), when it is not ``scenario.batch_size``;
- ``flops_per_step``: the FLOPs of one step, for the ``achieved_tflops`` figure;
- ``unit``: what a sample is ("tokens"), so throughput reads "tokens/s" instead of "samples/s".

The step goes through :func:`pytest_dlperf.measure.measure` as a :class:`TrainingLoop`: warm-up
excluded, ``torch.cuda.synchronize`` at every timing boundary on CUDA, timed rounds, every loss
checked for NaN/inf, peak memory. The core does no autocast, compile or seeding of the model for
you beyond ``torch.manual_seed(scenario.seed)``: read ``scenario.precision``/``compile`` yourself.
A scenario with ``compile`` other than "off" has its first step timed as the compile time.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Sequence

import torch

from .. import usercode
from ..scenario import Scenario, ScenarioError
from .torch_core import CudaStepTimer, TorchTrainingLoop, apply_threads, configure_precision, environment


def _count(name: str, value: Any, step: str, *, integer: bool) -> Any:
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        need = "a positive integer" if integer else "a positive number"
        raise usercode.UserCodeError(f"step={step!r}: the step's {name}={value!r} must be {need}", "")
    return int(value) if integer else float(value)


class UserStepLoop:
    """A :class:`~pytest_dlperf.measure.TrainingLoop` around the callable your ``make_step`` returned."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.device = torch.device(scenario.device)
        self.synchronous = self.device.type == "cpu"
        self.compiles = scenario.compile != "off"
        make_step = usercode.load("step", scenario.step or "", scenario.import_path)
        self.user_step = usercode.call(f"{scenario.step}(scenario)", make_step, scenario)
        if not callable(self.user_step):
            raise usercode.UserCodeError(
                f"{scenario.step}(scenario) returned {type(self.user_step).__name__} {self.user_step!r}, not a "
                "callable: return the function that runs one training step and returns its loss", "")
        self.samples_per_step = _count("samples_per_step", getattr(self.user_step, "samples_per_step",
                                                                    scenario.batch_size), scenario.step, integer=True)
        flops = getattr(self.user_step, "flops_per_step", None)
        self.flops_per_step = None if flops is None else _count("flops_per_step", flops, scenario.step, integer=False)
        unit = getattr(self.user_step, "unit", None)
        if unit is not None and (not isinstance(unit, str) or not unit.strip() or "/" in unit):
            raise usercode.UserCodeError(f"step={scenario.step!r}: the step's unit={unit!r} must name what a "
                                         "sample is, e.g. 'tokens'", "")
        self.unit = unit.strip() if unit is not None else None
        self._what = f"step {scenario.step}"
        self.step_timer = CudaStepTimer() if self.device.type == "cuda" else None
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def step(self) -> Any:
        loss = usercode.call(self._what, self.user_step)
        if isinstance(loss, torch.Tensor):
            if loss.numel() != 1:
                raise usercode.UserCodeError(
                    f"{self._what} returned a tensor of shape {tuple(loss.shape)}; return the loss, a scalar "
                    "(e.g. loss.detach(), or loss.mean() of per-sample losses)", "")
            return loss.detach()
        if isinstance(loss, numbers.Real) and not isinstance(loss, bool):
            return float(loss)
        raise usercode.UserCodeError(
            f"{self._what} returned {type(loss).__name__} {loss!r:.80}; return the step's loss, a float or a "
            "scalar tensor (what it processed goes in the step's samples_per_step attribute)", "")

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def losses_to_floats(self, handles: Sequence[Any]) -> list[float]:
        tensors = [h for h in handles if isinstance(h, torch.Tensor)]
        if not tensors:
            return [float(h) for h in handles]
        values = iter(torch.stack([t.reshape(()).float() for t in tensors]).cpu().tolist())
        return [next(values) if isinstance(h, torch.Tensor) else float(h) for h in handles]

    def peak_device_memory(self) -> int | None:
        return int(torch.cuda.max_memory_allocated()) if self.device.type == "cuda" else None

    # torch.compile's events are process-wide counters: they say the same for your compiled step.
    compile_events = TorchTrainingLoop.compile_events
    compile_cache = TorchTrainingLoop.compile_cache
    compile_notes = TorchTrainingLoop.compile_notes


def train(scenario: Scenario, progress: Any = None) -> tuple[Any, list[float], dict[str, Any], dict[str, Any]]:
    """Entry point used by the worker for ``framework='torch'`` with ``step=``."""
    from ..measure import measure

    apply_threads(scenario)
    torch.manual_seed(scenario.seed)
    if scenario.device == "cuda" and not torch.cuda.is_available():
        raise ScenarioError("device='cuda' but torch sees no CUDA device (check the driver and CUDA_VISIBLE_DEVICES)")
    configure_precision(scenario)
    loop = UserStepLoop(scenario)
    metrics, losses, details = measure(loop, scenario, progress)
    if loop.unit is not None:
        metrics["throughput"] = dataclasses.replace(metrics["throughput"], unit=f"{loop.unit}/s")
    details["user_step"] = {"step": scenario.step, "samples_per_step": loop.samples_per_step}
    env = environment(scenario)
    env["channels_last"] = None  # the core does not choose your memory format
    return metrics, losses, details, env
