"""Your own MXNet training step, measured like the built-in cores' (``Scenario.step``).

``make_step(scenario)`` returns a callable that runs one training step (``autograd.record``,
``backward``, ``trainer.step``) and returns its loss: a one-element NDArray, or a float; attributes
``samples_per_step``, ``flops_per_step`` and ``unit`` as for torch
(:class:`pytest_dlperf.child.usercode.UserStep`). Before ``make_step`` runs, the core sets the thread and
cuDNN environment as for its own models and seeds ``mx.random``. MXNet runs asynchronously, so the
engine is drained (``mx.nd.waitall``) at every timing boundary.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

from pytest_dlperf.scenario import Scenario, ScenarioError
from pytest_dlperf.child.usercode import UserStep
from pytest_dlperf.child.cores.mxnet_core import apply_environment, environment
from pytest_dlperf.child.measure import measure


class MXNetUserStepLoop:
    """A :class:`~pytest_dlperf.child.measure.TrainingLoop` around the callable your ``make_step`` returned."""

    def __init__(self, scenario: Scenario):
        import mxnet as mx

        self.mx = mx
        self.scenario = scenario
        self.user_step = UserStep(scenario)
        self.samples_per_step = self.user_step.samples_per_step
        self.flops_per_step = self.user_step.flops_per_step

    def step(self) -> Any:
        loss = self.user_step()
        if isinstance(loss, self.mx.nd.NDArray):
            if loss.size != 1:
                raise self.user_step.not_a_loss(loss, loss.shape)
            return loss
        if isinstance(loss, numbers.Real) and not isinstance(loss, bool):
            return float(loss)
        raise self.user_step.not_a_loss(loss)

    def sync(self) -> None:
        self.mx.nd.waitall()

    def losses_to_floats(self, handles: Sequence[Any]) -> list[float]:
        return [float(h.asnumpy().reshape(-1)[0]) if isinstance(h, self.mx.nd.NDArray) else float(h)
                for h in handles]

    def describe(self) -> dict[str, Any]:
        """How this loop trains: recorded in the result's environment."""
        return {"user_step": self.scenario.step}


def build(scenario: Scenario) -> MXNetUserStepLoop:
    """The configured process's loop around your step (also one side of an alternation in one process)."""
    apply_environment(scenario)
    import mxnet as mx

    if scenario.device == "cuda" and mx.context.num_gpus() == 0:
        raise ScenarioError("device='cuda' but mxnet sees no GPU: install mxnet-cu112 and check CUDA_VISIBLE_DEVICES")
    mx.random.seed(scenario.seed)
    return MXNetUserStepLoop(scenario)


def describe(scenario: Scenario, loop: MXNetUserStepLoop) -> dict[str, Any]:
    return environment(scenario, loop)


def train(scenario: Scenario, progress: Any = None) -> tuple[Any, list[float], dict[str, Any], dict[str, Any]]:
    """Entry point used by the worker for ``framework='mxnet'`` with ``step=``."""
    loop = build(scenario)
    metrics, losses, details = measure(loop, scenario, progress)
    loop.user_step.throughput_unit(metrics)
    details["user_step"] = {"step": scenario.step, "samples_per_step": loop.samples_per_step}
    return metrics, losses, details, describe(scenario, loop)
