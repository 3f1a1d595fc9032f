"""What each process of a job is told: its framework's rendezvous environment, on reserved ports.

* for torch, ``torchrun``'s rendezvous (one agent per host, c10d; it gives each rank ``MASTER_ADDR``,
  ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), or those variables from us
  (``start="env"``), or, under ``mpirun``, ``MASTER_ADDR``/``MASTER_PORT`` from us and the rest
  from Open MPI (``start="mpi"``); ``TF_CONFIG`` for ``MultiWorkerMirroredStrategy``, or the
  ps-lite variables (``DMLC_ROLE``, ``DMLC_PS_ROOT_URI``, ``DMLC_PS_ROOT_PORT``,
  ``DMLC_NUM_WORKER``, ``DMLC_NUM_SERVER``) for an MXNet scheduler, its servers and its workers;
* ports that are free on the job's own addresses and reserved against every other job on this
  machine (an ``flock`` per port held for the job's lifetime; remote hosts choose their own:
  :class:`~pytest_dlperf.processes.distributed.remote.RemotePorts`);
* the job marker ``DLPERF_JOB=<id>``.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, Mapping

from pytest_dlperf.processes.distributed.job import PACKAGE_ROOT, Job, Rank

if TYPE_CHECKING:  # remote imports this module
    from pytest_dlperf.processes.distributed.remote import RemotePorts
from pytest_dlperf.processes.distributed.launchers import Launcher
from pytest_dlperf.protocol import JOB_MARKER

PORT_LOCK_DIR = Path(tempfile.gettempdir()) / f"dlperf-ports-{os.getuid() if hasattr(os, 'getuid') else 0}"


class PortReservation:
    """Free TCP ports on given addresses, each locked against other jobs until ``release``."""

    def __init__(self) -> None:
        self._locks: list[IO[str]] = []
        PORT_LOCK_DIR.mkdir(parents=True, exist_ok=True)

    def take(self, address: str, attempts: int = 50) -> int:
        for _ in range(attempts):
            port = _bindable_port(address)
            if port is None:
                continue
            lock = open(PORT_LOCK_DIR / f"{port}.lock", "w")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lock.close()  # another job holds it
                continue
            self._locks.append(lock)
            return port
        raise RuntimeError(f"no free TCP port could be reserved on {address} after {attempts} attempts")

    def release(self) -> None:
        for lock in self._locks:
            lock.close()
        self._locks.clear()


def _bindable_port(address: str) -> int | None:
    """A port the kernel says is free on ``address`` (and on the wildcard, where gRPC listens)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError:
            # the address lives in another network namespace: any port is free there
            sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return None
    return port


def _interface(launcher: Launcher) -> str | None:
    return getattr(launcher, "interface", None) or {"local": "lo", "netns": "eth0"}.get(launcher.name)


_SET_BY_STARTER = {"torchrun": ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"),
                   "mpi": ("RANK", "WORLD_SIZE", "LOCAL_RANK")}


def rank_environments(job: Job, job_id: str, ports: PortReservation | RemotePorts) -> dict[Rank, dict[str, str]]:
    """Each rank's full environment: ours, the job marker, the framework's rendezvous variables."""
    launcher = job.launcher
    base = dict(os.environ)
    base.update(job.env)
    base.update(
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(p for p in (PACKAGE_ROOT, base.get("PYTHONPATH", "")) if p),
        **{JOB_MARKER: job_id},
    )
    iface = _interface(launcher)
    ranks = job.ranks()
    out: dict[Rank, dict[str, str]] = {}
    if job.framework == "torch":
        master = launcher.address(0)
        port = str(ports.take(master))
        seen: dict[str, int] = {}
        on_host = {launcher.address(r.slot): ",".join(str(q.index) for q in ranks
                                                      if launcher.address(q.slot) == launcher.address(r.slot))
                   for r in ranks}
        for r in ranks:
            addr = launcher.address(r.slot)
            local_rank = seen.get(addr, 0)
            seen[addr] = local_rank + 1
            if job.start == "torchrun":  # torchrun sets the rest; launch index: INDEXES[LOCAL_RANK]
                env = dict(base, DLPERF_PROCESS_INDEXES=on_host[addr], DLPERF_RENDEZVOUS=f"{master}:{port}")
            elif job.start == "mpi":  # Open MPI sets OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK
                env = dict(base, MASTER_ADDR=master, MASTER_PORT=port)
            else:
                env = dict(base, MASTER_ADDR=master, MASTER_PORT=port, RANK=str(r.index),
                           WORLD_SIZE=str(job.workers), LOCAL_RANK=str(local_rank))
            for name in _SET_BY_STARTER.get(job.start or "", ()):
                env.pop(name, None)  # torchrun or Open MPI sets it: never a stale value from the caller's
            if iface:
                env["GLOO_SOCKET_IFNAME"] = iface
            out[r] = env
    elif job.framework == "tensorflow":
        workers = [f"{launcher.address(r.slot)}:{ports.take(launcher.address(r.slot))}" for r in ranks]
        for r in ranks:
            config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": r.index}}
            out[r] = dict(base, TF_CONFIG=json.dumps(config))
    else:
        dist = len(ranks) > job.workers
        root = launcher.address(0)
        root_port = str(ports.take(root)) if dist else "0"
        for r in ranks:
            env = dict(base)
            if dist:
                env.update(DMLC_ROLE=r.role, DMLC_PS_ROOT_URI=root, DMLC_PS_ROOT_PORT=root_port,
                           DMLC_NUM_WORKER=str(job.workers), DMLC_NUM_SERVER=str(job.servers))
                if job.start == "mpi":  # one mpirun's processes share one environment: ps-lite finds its address
                    env["DMLC_JOB_CLUSTER"] = "mpi"  # as dmlc_tracker/mpi.py sets it
                else:
                    env["DMLC_NODE_HOST"] = launcher.address(r.slot)
                if iface:
                    env["DMLC_INTERFACE"] = iface
            out[r] = env
    for r, env in out.items():
        if job.start in ("torchrun", "mpi"):
            continue  # one process starts several ranks: each finds its launch index (launch_index)
        env["DLPERF_RANK_NAME"] = r.name
        env["DLPERF_PROCESS_INDEX"] = str(r.index)  # the launch index the parent names failures by
    return out


def rendezvous_of(envs: Mapping[Rank, Mapping[str, str]]) -> list[str]:
    """Where the job met (``JobResult.rendezvous``), read back from the environments it was given."""
    env = next(iter(envs.values()))
    if "DLPERF_RENDEZVOUS" in env:
        return [env["DLPERF_RENDEZVOUS"]]
    if "MASTER_PORT" in env:
        return [f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"]
    if "TF_CONFIG" in env:
        return list(json.loads(env["TF_CONFIG"])["cluster"]["worker"])
    if "DMLC_PS_ROOT_PORT" in env:
        return [f"{env['DMLC_PS_ROOT_URI']}:{env['DMLC_PS_ROOT_PORT']}"]
    return []
