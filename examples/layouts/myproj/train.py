"""The project's training step: a small MLP. ``SLOWDOWN`` is what a revision changes: each step does its work,
then busy-waits that fraction of it again (0.3: a step 30% longer, as a slower kernel would make it).

``MYPROJ_KERNELS_FROM`` names a file that ``myproj.kernels`` is loaded from by path instead of by name, as code
that reaches into another copy of the project does: the A/B must refuse to judge it.
"""

import importlib.util
import os
import sys
import time

import layout_dep
import torch
from torch import nn

from myproj import kernels

SLOWDOWN = 0.0


def _kernels():
    path = os.environ.get("MYPROJ_KERNELS_FROM")
    if not path:
        return kernels
    spec = importlib.util.spec_from_file_location("myproj.kernels", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["myproj.kernels"] = module
    spec.loader.exec_module(module)
    return module


def make_step(scenario):
    torch.manual_seed(scenario.seed)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(scenario.batch_size, 256), torch.randint(0, 10, (scenario.batch_size,))
    activation = _kernels().activation
    dependency = sys.modules["layout_dep"]

    def step():
        if sys.modules.get("layout_dep") is not dependency:  # a third-party module must never be swapped
            raise RuntimeError("layout_dep was imported a second time while the step ran")
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(activation(model(x)), y)
        loss.backward()
        optimizer.step()
        until = time.perf_counter() + SLOWDOWN * (time.perf_counter() - started)
        while time.perf_counter() < until:
            pass
        return loss.detach()

    step.samples_per_step = layout_dep.samples(scenario.batch_size)
    return step
