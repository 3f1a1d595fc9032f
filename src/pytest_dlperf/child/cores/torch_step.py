"""Your own PyTorch training step, measured like the built-in cores' (``Scenario.step``).

``make_step(scenario)`` builds whatever it needs (model, optimizer, data) and returns a callable;
each call runs one training step and returns its loss: a float, or a scalar tensor (better: it
does not wait for the device, so steps queue up as in real training). The callable may carry
``samples_per_step``, ``flops_per_step`` and ``unit`` (:class:`pytest_dlperf.child.usercode.UserStep`).

The step goes through :func:`pytest_dlperf.child.measure.measure` as a :class:`TrainingLoop`: warm-up
excluded, ``torch.cuda.synchronize`` at every timing boundary on CUDA, timed rounds, every loss
checked for NaN/inf, peak memory. The core does no autocast, compile or seeding of the model for
you beyond ``torch.manual_seed(scenario.seed)``: read ``scenario.precision``/``compile`` yourself.
It sets nothing your training would not: torch's TF32, cuDNN and thread defaults stay as they are,
except the thread counts the scenario names and TF32 for ``precision="tf32"`` (:func:`prepare`), and
it imports no torchvision.
A scenario with ``compile`` other than "off" has its first step timed as the compile time.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import torch

from pytest_dlperf.scenario import Scenario
from pytest_dlperf.child.usercode import UserStep
from pytest_dlperf.child.cores.torch_base import (CompileReport, CudaStepTimer, apply_threads, base_environment,
                                                  check_device)
from pytest_dlperf.child.measure import measure


class UserStepLoop(CompileReport):
    """A :class:`~pytest_dlperf.child.measure.TrainingLoop` around the callable your ``make_step`` returned."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.device = torch.device(scenario.device)
        self.synchronous = self.device.type == "cpu"
        self.compiles = scenario.compile != "off"
        self.user_step = UserStep(scenario)
        self.samples_per_step = self.user_step.samples_per_step
        self.flops_per_step = self.user_step.flops_per_step
        self.step_timer = CudaStepTimer() if self.device.type == "cuda" else None
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def step(self) -> Any:
        loss = self.user_step()
        if isinstance(loss, torch.Tensor):
            if loss.numel() != 1:
                raise self.user_step.not_a_loss(loss, loss.shape)
            return loss.detach()
        if isinstance(loss, numbers.Real) and not isinstance(loss, bool):
            return float(loss)
        raise self.user_step.not_a_loss(loss)

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



def prepare(scenario: Scenario) -> None:
    """Only what the scenario asks for: its thread counts, its seed, TF32 where precision is "tf32".

    The built-in cores' switches (TF32 off for fp32, ``cudnn.benchmark`` on) are not applied: your
    code runs with torch's defaults, or whatever it sets itself, as in your own training.
    """
    apply_threads(scenario)
    torch.manual_seed(scenario.seed)
    check_device(scenario)
    if scenario.precision == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def build(scenario: Scenario) -> UserStepLoop:
    """The prepared process's loop around your step (also one side of an alternation in one process)."""
    prepare(scenario)
    return UserStepLoop(scenario)


def describe(scenario: Scenario, loop: UserStepLoop) -> dict[str, Any]:
    env = base_environment(scenario)
    env["channels_last"] = None  # the core does not choose your memory format
    return env


def train(scenario: Scenario, progress: Any = None) -> tuple[Any, list[float], dict[str, Any], dict[str, Any]]:
    """Entry point used by the worker for ``framework='torch'`` with ``step=``."""
    loop = build(scenario)
    metrics, losses, details = measure(loop, scenario, progress)
    loop.user_step.throughput_unit(metrics)
    details["user_step"] = {"step": scenario.step, "samples_per_step": loop.samples_per_step}
    return metrics, losses, details, describe(scenario, loop)
