"""PyTorch input pipeline: ``DataLoader`` over ``torchvision.datasets.ImageFolder``.

As the torchvision ImageNet reference does it: PIL decode in ``loader_workers``
worker processes (0 = in the training process itself), ``pin_memory`` on CUDA,
persistent workers so an epoch boundary does not restart them, a seeded shuffle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms

from pytest_dlperf.scenario import Scenario, ScenarioError
from pytest_dlperf.child.loaders import MEAN, STD, check_data

Batch = tuple[torch.Tensor, torch.Tensor]


def transform(scenario: Scenario) -> transforms.Compose:
    size = scenario.image_size
    return transforms.Compose([transforms.Resize((size, size)), transforms.ToTensor(), transforms.Normalize(MEAN, STD)])


def data_loader(scenario: Scenario, split: str = "train") -> DataLoader[Any]:
    check_data(scenario, split)
    dataset = torchvision.datasets.ImageFolder(str(Path(scenario.data_dir or "") / split),
                                               transform=transform(scenario))
    training = split == "train"
    generator = torch.Generator()
    generator.manual_seed(scenario.seed)
    workers = scenario.loader_workers
    loader = DataLoader(
        dataset,
        batch_size=scenario.batch_size,
        shuffle=training,
        drop_last=training,
        num_workers=workers,
        pin_memory=scenario.device == "cuda",
        persistent_workers=training and workers > 0,
        prefetch_factor=2 if workers > 0 else None,
        generator=generator,
    )
    if len(loader) == 0:
        raise ScenarioError(
            f"batch_size={scenario.batch_size} is larger than the {len(dataset)} images of {split}: "
            "lower batch_size or make a larger data set"
        )
    return loader


def endless(scenario: Scenario) -> Iterator[Batch]:
    """Training batches, epoch after epoch (reshuffled each epoch)."""
    loader = data_loader(scenario, "train")
    while True:
        yield from loader


def eval_batches(scenario: Scenario) -> Iterator[Batch]:
    """The whole validation split once, in order."""
    yield from data_loader(scenario, "val")


def wait(batch: Batch) -> None:
    """CPU tensors from a DataLoader are complete when returned."""


def environment() -> dict[str, Any]:
    return {"framework": "torch", "framework_version": torch.__version__,
            "torchvision_version": torchvision.__version__}
