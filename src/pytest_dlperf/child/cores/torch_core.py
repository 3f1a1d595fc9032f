"""PyTorch training core: a torchvision model, SGD with momentum, cross-entropy.

Written the way NVIDIA's DeepLearningExamples and the PyTorch AMP recipe write it:
``torch.autocast`` + ``GradScaler`` for fp16, channels_last and cudnn.benchmark on
CUDA, synthetic batches already on the device. The static loss scale reproduces the
Apex ``FP16_Optimizer(static_loss_scale=...)`` procedure of seed 001.

With ``scenario.data`` other than synthetic, each step takes its batch from the
scenario's ``DataLoader`` (so the timed step includes waiting for data: the effective
throughput), and after the timed rounds the model is evaluated on the held-out split
(``accuracy_top1``/``accuracy_top5``), outside any timing.

With ``scenario.compile`` the model is wrapped in ``torch.compile`` (the PyTorch 2
tutorial's way: the loss and the optimizer step stay eager, AOTAutograd compiles the
backward), CUDA graphs through inductor's cudagraph trees (``cudagraph_mark_step_begin``
each step). FLOPs are counted and the evaluation runs on the eager module (same
parameters), so neither triggers a compile of its own.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import torch
import torchvision

from pytest_dlperf.scenario import Scenario, ScenarioError
from pytest_dlperf.child.synthetic import batches as synthetic_batches
from pytest_dlperf.child.measure import measure
from pytest_dlperf.child import usercode
from pytest_dlperf.child.cores.torch_base import (  # noqa: F401  # CudaStepTimer: also imported from here
    CompileReport, CudaStepTimer, apply_threads, base_environment, check_device)
from pytest_dlperf.child.loaders import accuracy_metrics, evaluate_real_data, torch_loader

#: Distinct synthetic batches cycled through (enough to defeat caching, small on the device).
SYNTHETIC_POOL = 4


def configure_precision(scenario: Scenario) -> None:
    """fp32 is strict (TF32 off); tf32 allows TF32 tensor-core math in matmul and cuDNN."""
    allow_tf32 = scenario.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32
    torch.backends.cudnn.benchmark = scenario.cudnn_benchmark and scenario.device == "cuda"
    if scenario.precision == "tf32" and scenario.device == "cuda":
        major, _ = torch.cuda.get_device_capability()
        if major < 8:
            raise ScenarioError("precision='tf32' needs an Ampere or newer GPU (compute capability >= 8.0)")


def build_model(scenario: Scenario) -> torch.nn.Module:
    if scenario.model_factory:
        model = _user_model(scenario)
    else:
        try:
            model = torchvision.models.get_model(scenario.model, weights=None, num_classes=scenario.num_classes)
        except ValueError:
            known = ", ".join(sorted(torchvision.models.list_models(module=torchvision.models))[:12])
            raise ScenarioError(f"torchvision has no model {scenario.model!r}; e.g. {known}, ...") from None
    model = model.to(scenario.device)
    if scenario.uses_channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model.train()


def _user_model(scenario: Scenario) -> torch.nn.Module:
    """Your ``model_factory(scenario)``: an nn.Module taking (batch, 3, H, W) images, giving class logits."""
    factory = usercode.load("model_factory", scenario.model_factory or "", scenario.import_path)
    model = usercode.call(f"{scenario.model_factory}(scenario)", factory, scenario)
    if not isinstance(model, torch.nn.Module):
        raise usercode.UserCodeError(f"{scenario.model_factory}(scenario) returned {type(model).__name__}, not a "
                                     "torch.nn.Module", "")
    return model


class TorchTrainingLoop(CompileReport):
    """One training step: autocast, the scenario's loss scaling, SGD.

    ``model`` and ``criterion`` (``criterion(logits, labels) -> scalar``) can be given instead
    of the scenario's torchvision model and cross-entropy: the loss-scaling tests train a
    small model through this same step (perf_tests/test_loss_scaling_torch.py).
    """

    def __init__(self, scenario: Scenario, data: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None, *,
                 model: torch.nn.Module | None = None, criterion: Any = None):
        self.scenario = scenario
        self.device = torch.device(scenario.device)
        self.synchronous = self.device.type == "cpu"
        self.samples_per_step = scenario.batch_size
        self.model = build_model(scenario) if model is None else model.to(self.device).train()
        #: What ``step()`` calls: the model itself, or its torch.compile wrapper (compiled at the first step).
        self.step_model: Any = self.model
        self.compiles = scenario.compile != "off"
        if self.compiles:
            self.step_model = torch.compile(self.model, mode=scenario.torch_compile_mode)
        self.criterion = criterion or torch.nn.CrossEntropyLoss()
        self.optimizer: torch.optim.Optimizer = torch.optim.SGD(
            self.model.parameters(), lr=scenario.lr, momentum=scenario.momentum, weight_decay=scenario.weight_decay
        )
        self.autocast_dtype = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}.get(scenario.precision)
        fp16 = scenario.precision == "amp_fp16"
        dynamic = fp16 and scenario.loss_scale == "dynamic"
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=dynamic) if dynamic else None
        self.static_scale = float(scenario.loss_scale) if fp16 and not dynamic else None
        # Steps skipped by loss scaling = steps tried - optimizer steps taken; counted by a
        # post-step hook rather than reading the scale each step, which would sync the device.
        self._attempted = 0
        self._applied = 0
        self.optimizer.register_step_post_hook(self._count_applied)
        self.memory_format = torch.channels_last if scenario.uses_channels_last else torch.contiguous_format
        #: Real data: batches from the scenario's DataLoader, fetched inside ``step()`` and so timed with it.
        self.loader: Iterator[tuple[torch.Tensor, torch.Tensor]] | None = None
        if data is not None:
            self.data = list(data)
        elif scenario.data == "synthetic":
            self.data = self._synthetic()
        else:
            self.loader = torch_loader.endless(scenario)
            self.data = [self._to_device(next(self.loader))]  # one batch to count FLOPs on
        self._i = 0
        self.step_timer = CudaStepTimer() if self.device.type == "cuda" else None
        self.flops_per_step = self._count_flops()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def _to_device(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        x = x.to(self.device, non_blocking=True).contiguous(memory_format=self.memory_format)
        return x, y.to(self.device, non_blocking=True)

    def _synthetic(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        s = self.scenario
        return [self._to_device((torch.from_numpy(images), torch.from_numpy(labels)))
                for images, labels in synthetic_batches(SYNTHETIC_POOL, s.batch_size, s.image_size, s.num_classes,
                                                        s.seed)]

    def _count_flops(self) -> float | None:
        """FLOPs of one forward+backward at the real shapes, counted by PyTorch itself."""
        from torch.utils.flop_counter import FlopCounterMode

        x, y = self.data[0]
        counter = FlopCounterMode(display=False)
        with counter:
            with torch.autocast(self.device.type, dtype=self.autocast_dtype or torch.float32,
                                enabled=self.autocast_dtype is not None):
                loss = self.criterion(self.model(x), y)
            loss.backward()
        self.optimizer.zero_grad(set_to_none=True)
        total = counter.get_total_flops()
        return float(total) if total else None

    def _count_applied(self, *_: Any) -> None:
        self._applied += 1

    def step(self) -> torch.Tensor:
        self._attempted += 1
        if self.loader is not None:
            x, y = self._to_device(next(self.loader))
        else:
            x, y = self.data[self._i % len(self.data)]
        self._i += 1
        if self.scenario.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()  # a new iteration: earlier replays' outputs may be reused
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(self.device.type, dtype=self.autocast_dtype or torch.float32,
                            enabled=self.autocast_dtype is not None):
            loss = self.criterion(self.step_model(x), y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)  # skips optimizer.step() when a gradient overflowed
            self.scaler.update()
        elif self.static_scale is not None:
            (loss * self.static_scale).backward()
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            torch._foreach_mul_(grads, 1.0 / self.static_scale)
            if bool(torch.isfinite(torch.stack(torch._foreach_norm(grads))).all()):
                self.optimizer.step()
        else:
            loss.backward()
            self.optimizer.step()
        return loss.detach()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def losses_to_floats(self, handles: Sequence[torch.Tensor]) -> list[float]:
        return torch.stack(list(handles)).float().cpu().tolist()

    def loss_scale(self) -> float | None:
        if self.scaler is not None:
            return float(self.scaler.get_scale())
        return self.static_scale

    def skipped_steps(self) -> int:
        return self._attempted - self._applied

    def peak_device_memory(self) -> int | None:
        return int(torch.cuda.max_memory_allocated()) if self.device.type == "cuda" else None

    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Top-1/top-5 accuracy on the held-out split, in eval mode, after (never inside) the timed rounds."""
        self.model.eval()
        try:
            def logits_and_labels() -> Iterator[tuple[Any, Any]]:
                for batch in torch_loader.eval_batches(self.scenario):
                    x, y = self._to_device(batch)
                    with torch.autocast(self.device.type, dtype=self.autocast_dtype or torch.float32,
                                        enabled=self.autocast_dtype is not None):
                        logits = self.model(x)
                    yield logits.float().cpu().numpy(), y.cpu().numpy()

            return accuracy_metrics(logits_and_labels(), self.scenario.num_classes)
        finally:
            self.model.train()


def environment(scenario: Scenario) -> dict[str, Any]:
    env = base_environment(scenario)
    env["torchvision_version"] = torchvision.__version__
    env["channels_last"] = scenario.uses_channels_last
    return env


def prepare(scenario: Scenario) -> None:
    """What every torch training child sets before it builds: threads, seed, device, precision."""
    apply_threads(scenario)
    torch.manual_seed(scenario.seed)
    check_device(scenario)
    configure_precision(scenario)


def train(scenario: Scenario, progress: Any = None) -> tuple[Any, list[float], dict[str, Any], dict[str, Any]]:
    """Entry point used by the worker: build, measure, describe the environment."""
    prepare(scenario)
    loop = TorchTrainingLoop(scenario)
    metrics, losses, details = measure(loop, scenario, progress)
    evaluate_real_data(loop, scenario, metrics, details, progress)
    return metrics, losses, details, environment(scenario)
