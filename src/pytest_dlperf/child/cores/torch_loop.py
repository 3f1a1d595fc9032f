"""Your own PyTorch training loop (``Scenario.loop``), timed at the steps it marks (:mod:`pytest_dlperf.child.loop`).

Run as a ``step=`` is (:mod:`.torch_step`): the same settings (only what the scenario asks for, no
torchvision), the same harness and figures; the loop's marks are the harness's steps.
"""

from __future__ import annotations

from typing import Any

import torch

from pytest_dlperf.child import loop as marked
from pytest_dlperf.child.cores.torch_base import base_environment
from pytest_dlperf.child.cores.torch_step import prepare
from pytest_dlperf.scenario import Scenario


def build(scenario: Scenario, alternating: bool = False) -> marked.MarkedLoop:
    prepare(scenario)
    cuda = scenario.device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    return marked.MarkedLoop(
        marked.Steps(scenario, alternating),
        sync=torch.cuda.synchronize if cuda else (lambda: None),
        synchronous=not cuda,
        peak_device_memory=(lambda: int(torch.cuda.max_memory_allocated())) if cuda else (lambda: None),
    )


def train(scenario: Scenario, progress: Any = None) -> tuple[Any, list[float], dict[str, Any], dict[str, Any]]:
    """Entry point used by the worker for ``framework='torch'`` with ``loop=``."""
    metrics, losses, details = marked.train(scenario, build(scenario), progress)
    return metrics, losses, details, describe(scenario)


def describe(scenario: Scenario, loop: Any = None) -> dict[str, Any]:
    env = base_environment(scenario)
    env["channels_last"] = None  # the core does not choose your memory format
    return env
