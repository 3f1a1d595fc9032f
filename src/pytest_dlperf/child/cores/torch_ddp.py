"""One rank of a PyTorch DistributedDataParallel job: ``python -m pytest_dlperf.child.cores.torch_ddp CONFIG RESULT``.

Started by ``torchrun`` (one agent per host, as :func:`pytest_dlperf.processes.distributed.run_job` does by
default) or directly with torchrun's environment (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``), or by ``mpirun`` with only ``MASTER_ADDR``/``MASTER_PORT``: then
RANK, WORLD_SIZE and LOCAL_RANK come from Open MPI's ``OMPI_COMM_WORLD_*`` (:func:`env_from_mpi`,
what DDP users do under mpirun). It does
what the PyTorch DDP tutorial does: ``init_process_group`` (gloo on CPU, NCCL on
CUDA), the model wrapped in ``DistributedDataParallel`` (which broadcasts rank 0's
weights and averages gradients in its backward hooks), then SGD on this rank's shard
of every global batch. With ``WORLD_SIZE=1`` it is the plain single-process model,
no DDP: the reference the equivalence test compares with.

Throughput per worker comes from the shared ``measure`` harness; the rank writes its
final parameters (``.npz``) and rank 0 reports validation top-1/top-5 on held-out
synthetic data. A paced job (config ``"paced": true``, :mod:`pytest_dlperf.processes.distributed.paced_job`)
takes each timed round when the parent says so: rank 0 waits for its ``go``, then every
rank meets in ``torch.distributed.barrier()`` before starting its clock.

Models: ``resnet18`` (``torchvision.models.get_model``) for scaling and
accuracy; ``tiny_cnn`` (two convolutions, no BatchNorm) for the equivalence check,
because BatchNorm normalises each rank's batch with its own statistics, so DDP with
BN is *not* the large-batch computation and could never match it.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from typing import Any, Sequence

import numpy as np
import torch

from pytest_dlperf.child import rank as dist_util
from pytest_dlperf.protocol import PROGRESS_PREFIX
from pytest_dlperf.child.measure import measure


def tiny_cnn(num_classes: int, image_size: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(16 * (image_size // 4) ** 2, num_classes),
    )


class DDPLoop:
    """The TrainingLoop ``measure`` times: one SGD step on this rank's shard of the next global batch."""

    def __init__(self, model: torch.nn.Module, config: dict[str, Any], rank: int, world: int, device: torch.device):
        self.model, self.rank, self.world, self.device = model, rank, world, device
        self.config = config
        self.batch = int(config["batch_size"])
        self.samples_per_step = self.batch
        self.synchronous = device.type == "cpu"
        self.optimizer = torch.optim.SGD(model.parameters(), lr=float(config["lr"]),
                                         momentum=float(config["momentum"]),
                                         weight_decay=float(config.get("weight_decay", 0.0)))
        self.criterion = torch.nn.CrossEntropyLoss()
        images, labels = dist_util.dataset(int(config["train_samples"]), int(config["image_size"]),
                                           int(config["num_classes"]), int(config["seed"]),
                                           float(config.get("noise", 0.5)))
        self.images = torch.from_numpy(images).to(device)
        self.labels = torch.from_numpy(labels).to(device)
        self.steps = 0

    def step(self) -> torch.Tensor:
        dist_util.maybe_fault(self.config, self.rank, self.steps)
        dist_util.heartbeat(self.steps + 1)  # entering this step, before its collective
        x, y = dist_util.shard(self.images, self.labels, self.steps, self.rank, self.world, self.batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.criterion(self.model(x), y)
        loss.backward()  # DDP all-reduces (averages) the gradients here
        self.optimizer.step()
        self.steps += 1
        return loss.detach()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def losses_to_floats(self, handles: Sequence[torch.Tensor]) -> list[float]:
        return torch.stack(list(handles)).float().cpu().tolist()


def evaluate(model: torch.nn.Module, config: dict[str, Any], device: torch.device) -> dict[str, float]:
    images, labels = dist_util.dataset(int(config.get("val_samples", 256)), int(config["image_size"]),
                                       int(config["num_classes"]), int(config["seed"]),
                                       float(config.get("noise", 0.5)), split="val")
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(torch.from_numpy(images[i:i + 128]).to(device)).float().cpu()
                            for i in range(0, len(labels), 128)])
    model.train()
    return dist_util.topk_accuracy(logits.numpy(), labels)


#: torchrun's variables and where Open MPI keeps the same facts.
MPI_ENV = {"RANK": "OMPI_COMM_WORLD_RANK", "WORLD_SIZE": "OMPI_COMM_WORLD_SIZE",
           "LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_RANK"}


def env_from_mpi(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Under ``mpirun`` (no RANK, but ``OMPI_COMM_WORLD_RANK``): set RANK, WORLD_SIZE and LOCAL_RANK
    from Open MPI's, so ``init_process_group``'s ``env://`` finds them. True if it did."""
    if "RANK" in environ or "OMPI_COMM_WORLD_RANK" not in environ:
        return False
    for name, mpi_name in MPI_ENV.items():
        environ[name] = environ[mpi_name]
    return True


def main(argv: list[str]) -> int:

    # who started this rank: torchrun's agent sets TORCHELASTIC_RUN_ID, mpirun's orted OMPI_COMM_WORLD_*
    started_by = ("mpirun" if env_from_mpi() else "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ
                  else "launcher")
    config, result_path = dist_util.load_rank(argv)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    dist_util.take_own_core(config)  # before torch starts its thread pool
    torch.set_num_threads(int(config.get("threads", 1)))
    device = torch.device(config.get("device", "cpu"))
    if world > 1:
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            local = int(os.environ.get("LOCAL_RANK", 0))
            device = torch.device("cuda", local % torch.cuda.device_count())
            torch.cuda.set_device(device)
        # collectives may wait longer than the job: the parent's timeout is what ends a hang
        torch.distributed.init_process_group(backend, timeout=datetime.timedelta(hours=1))
    total = dist_util.total_steps_of(config, world)
    scenario = dist_util.scenario_of(config, total, "torch")
    torch.manual_seed(scenario.seed)
    if config["model"] == "tiny_cnn":
        model: torch.nn.Module = tiny_cnn(scenario.num_classes, scenario.image_size).to(device)
    else:
        import torchvision

        model = torchvision.models.get_model(config["model"], weights=None, num_classes=scenario.num_classes).to(device)
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    loop = DDPLoop(net, config, rank, world, device)
    start = time.perf_counter()
    pacer = dist_util.rank_pacer(config, rank, torch.distributed.barrier if world > 1 else None)
    metrics, losses, details = measure(loop, scenario, lambda text: print(PROGRESS_PREFIX + text, flush=True),
                                       pacer=pacer)
    train_seconds = time.perf_counter() - start
    params = {name: p.detach().cpu().numpy() for name, p in model.state_dict().items()}
    params_path = result_path.with_suffix(".params.npz")
    np.savez(params_path, **params)
    payload = {
        "rank": rank, "world": world, "backend": torch.distributed.get_backend() if world > 1 else "none",
        "throughput": list(metrics["throughput"].samples), "losses": losses, "steps": loop.steps,
        "train_seconds": train_seconds, "params": str(params_path), "details": details,
        "accuracy": evaluate(model, config, device) if rank == 0 else None,
        "framework_version": torch.__version__, "started_by": started_by,
    }
    if world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    dist_util.write_rank_result(result_path, payload)
    return 0


if __name__ == "__main__":
    dist_util.exit_after_result(main(sys.argv[1:]))
