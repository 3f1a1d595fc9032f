"""What a distributed job is: ``workers`` ranks of a framework's entry point (:class:`Job`,
:class:`Rank`), what it gives back (:class:`JobResult`) and how it fails (:class:`JobFailed`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_dlperf.processes.distributed.launchers import Launcher, LocalLauncher

#: The folder that holds ``pytest_dlperf``: on every rank's PYTHONPATH (here and on remote hosts).
PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])  # the folder that holds the package (src/)
ENTRY_POINTS = {
    "torch": "pytest_dlperf.child.cores.torch_ddp",
    "tensorflow": "pytest_dlperf.child.cores.tf_mwms",
    "mxnet": "pytest_dlperf.child.cores.mxnet_dist",
}
#: How torch ranks start. ``torchrun`` (under every launcher): one torchrun agent per host, the
#: way PyTorch documents multi-node jobs. ``env``: one process per rank, given the torchrun
#: variables by the parent (no agent). ``mpi`` (only
#: under the mpi launcher): one ``mpirun -np N`` for the whole world, each rank taking RANK,
#: WORLD_SIZE and LOCAL_RANK from ``OMPI_COMM_WORLD_*`` (how DDP runs on MPI clusters without
#: torchrun), MASTER_ADDR/PORT from the parent. Under mpirun both are offered because both are
#: what users run: torchrun gives the same agent, rendezvous and failure report as on the other
#: launchers (mpirun then only places one agent per host); the MPI environment gives MPI's own
#: placement and its fail-fast (mpirun ends the world when one rank fails) with no agent.
TORCH_STARTS = ("torchrun", "env", "mpi")
#: A torch job's ``start`` when none is given: ``torchrun``, the way PyTorch documents it; real
#: jobs through it pass on the local launcher and across hosts through ssh, mpirun and srun
#: (``perf_tests/test_engines.py``, ``tests/test_engines.py``).
DEFAULT_TORCH_START = "torchrun"
#: How MXNet ps-lite processes start. None: one launcher process each (a scheduler, servers, workers,
#: each told its DMLC_ROLE). ``mpi`` (the mpi launcher): as MXNet's ``tools/launch.py --launcher mpi``
#: (dmlc-core's ``dmlc_tracker/mpi.py``) does: one ``mpirun -np NWORKER`` with DMLC_ROLE=worker and
#: one ``mpirun -np NSERVER`` with DMLC_ROLE=server, the same DMLC_* for every process of an mpirun
#: (no DMLC_NODE_HOST: ps-lite takes the address of DMLC_INTERFACE). launch.py runs the scheduler
#: on the submitting machine; here it is a one-process mpirun on the first host, since a launcher
#: has no way to start a process on the machine pytest's launch clients run from.
MXNET_STARTS = ("mpi",)


class JobFailed(RuntimeError):
    """A rank crashed or hung; ``rank`` names it, ``output_tail`` is its last output."""

    def __init__(self, job: str, rank: str, reason: str, output_tail: str, survivors: Sequence[int] = (),
                 host: str | None = None, unreached: Sequence[str] = ()):
        self.job, self.rank, self.reason, self.output_tail = job, rank, reason, output_tail
        self.survivors = list(survivors)
        #: The address of the host the rank ran on (None: this machine's loopback).
        self.host = host
        #: Remote hosts the clean-up could not reach (their processes may live on).
        self.unreached = list(unreached)
        #: Hosts found no longer answering the launcher when the job failed.
        self.lost_hosts: list[str] = []
        super().__init__(f"job {job}: {self.where} {reason}")

    @property
    def where(self) -> str:
        return f"{self.rank} on host {self.host}" if self.host else self.rank

    def report(self) -> str:
        text = (f"distributed job {self.job!r}: {self.where} {self.reason}\n--- last output of {self.rank} ---\n"
                f"{self.output_tail}")
        if self.survivors:
            text += f"\n(processes {self.survivors} outlived the kill and were SIGKILLed by marker)"
        if self.unreached:
            text += "\n(clean-up could not reach: " + "; ".join(self.unreached) + ")"
        return text


@dataclass(frozen=True)
class Rank:
    role: str  # "worker", "server" or "scheduler"
    index: int
    slot: int  # which launcher slot (host) it runs on

    @property
    def name(self) -> str:
        return "scheduler" if self.role == "scheduler" else f"{self.role} {self.index}"

    @property
    def file_stem(self) -> str:
        return f"{self.role}{self.index}"


@dataclass
class Job:
    """What to run: ``workers`` ranks of ``framework``'s entry point, each given ``config``."""

    framework: str
    workers: int
    config: Mapping[str, Any]
    launcher: Launcher = field(default_factory=LocalLauncher)
    servers: int = 1  # MXNet ps-lite only
    timeout: float = 180.0
    env: Mapping[str, str] = field(default_factory=dict)
    label: str = "job"
    python: str = sys.executable
    #: How ranks start: torch :data:`TORCH_STARTS` (None: :data:`DEFAULT_TORCH_START`); MXNet None or ``mpi``.
    start: str | None = None

    def __post_init__(self) -> None:
        if self.framework not in ENTRY_POINTS:
            raise ValueError(f"framework {self.framework!r}: use one of {', '.join(ENTRY_POINTS)}")
        if self.framework == "mxnet" and self.start is not None:
            if self.start not in MXNET_STARTS or self.launcher.name != "mpi":
                raise ValueError(f"start={self.start!r}: an MXNet job starts one process per rank, or, under the mpi "
                                 "launcher, start='mpi' (one mpirun per role, as MXNet's launch.py --launcher mpi)")
            if len(self.ranks()) == self.workers:
                raise ValueError("start='mpi' starts a ps-lite cluster: it needs a dist_* kvstore in the config")
        elif self.start is not None and self.framework != "torch":
            raise ValueError(f"start={self.start!r} is for torch and MXNet jobs; {self.framework} ranks start "
                             "their own way (leave start unset)")
        if self.framework == "torch":
            self.start = self.start or DEFAULT_TORCH_START
            if self.start not in TORCH_STARTS:
                raise ValueError(f"start={self.start!r}: use one of {', '.join(TORCH_STARTS)}")
            if self.start == "mpi" and self.launcher.name != "mpi":
                raise ValueError(f"start='mpi' reads the ranks from mpirun's environment; it needs the mpi launcher "
                                 f"(--dlperf-launcher mpi), not {self.launcher.name!r}; use start='torchrun' there")
        if self.workers < 1:
            raise ValueError(f"workers={self.workers} must be >= 1")
        if self.framework == "mxnet" and self.servers < 1:
            raise ValueError("an MXNet dist_* job needs servers >= 1")

    def ranks(self) -> list[Rank]:
        workers = [Rank("worker", i, i) for i in range(self.workers)]
        if self.framework != "mxnet" or not str(self.config.get("kvstore", "")).startswith("dist"):
            return workers
        servers = [Rank("server", i, i % self.workers) for i in range(self.servers)]
        return [Rank("scheduler", 0, 0), *servers, *workers]


@dataclass
class JobResult:
    job_id: str
    label: str
    workers: list[dict[str, Any]]  # one payload per worker rank, in rank order
    wall_seconds: float
    logdir: Path
    #: Where the job met: MASTER_ADDR:MASTER_PORT, the TF_CONFIG worker list, or the ps-lite root.
    rendezvous: list[str] = field(default_factory=list)


def host_python(job: Job, slot: int) -> str:
    """The interpreter of ``slot``'s host: the hostfile's ``python=``, else the job's."""
    python = getattr(job.launcher, "python", None)
    return (python(slot) if callable(python) else None) or job.python


def rank_host(job: Job, rank: Rank) -> str | None:
    """The address of the host ``rank`` runs on, for failure reports (None: this machine's loopback)."""
    return None if job.launcher.name == "local" else job.launcher.address(rank.slot)
