"""Run one distributed job: N ranks through a launcher, watched, and always cleaned up.

The parent side (:func:`run_job`) gives every process of the job

* its framework's own rendezvous environment: for torch, ``torchrun`` (one agent per host, c10d
  rendezvous; it gives each rank ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``), or those variables from us (``start="env"``), or, under ``mpirun``,
  ``MASTER_ADDR``/``MASTER_PORT`` from us and the rest from Open MPI (``start="mpi"``);
  ``TF_CONFIG`` for ``MultiWorkerMirroredStrategy``, or the ps-lite variables
  (``DMLC_ROLE``, ``DMLC_PS_ROOT_URI``, ``DMLC_PS_ROOT_PORT``, ``DMLC_NUM_WORKER``,
  ``DMLC_NUM_SERVER``) for an MXNet scheduler, its servers and its workers;
* ports that are free on the job's own addresses and reserved against every other
  job on this machine (an ``flock`` per port held for the job's lifetime);
* a marker ``DLPERF_JOB=<id>`` in its environment, its own log, its own process group.

Where one launch process carries several ranks (a host's torchrun, the world's mpirun), its
output is split into one log per rank by the tag each line carries (torchrun's
``--log-line-prefix-template``, mpirun's ``--tag-output``), and a failure is blamed on the rank
the launcher's own report names (torchrun's "Root Cause", mpirun's "Process name").

It then watches the ranks: the first rank to exit non-zero, or, at the timeout, the
rank with the least progress, fails the job with :class:`JobFailed` naming that rank
and its last output. Whatever happens every process group of the job is killed, and
``/proc`` is scanned for the marker to kill anything that left its group.

The rank side (``load_rank``, ``heartbeat``, ``write_rank_result``, the data helpers)
is imported by the per-framework entry points in ``cores/*_dist``/``*_ddp``/``*_mwms``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator, Mapping, Sequence

from ..devicelock import device_lock, visible_gpus
from .launchers import (MPI_TAG_PATTERN, REMOTE_SCRATCH, TORCHRUN_TAG_PATTERN, Launcher, LocalLauncher,
                        torchrun_command)
from ..runner import tail

ENTRY_POINTS = {
    "torch": "pytest_dlperf.cores.torch_ddp",
    "tensorflow": "pytest_dlperf.cores.tf_mwms",
    "mxnet": "pytest_dlperf.cores.mxnet_dist",
}
JOB_MARKER = "DLPERF_JOB"
HEARTBEAT = "[dlperf] step "
#: The rank's payload comes back through the launcher's output on this line (no shared filesystem).
RESULT_LINE = "[dlperf] result "
#: The job's config goes to the ranks in this variable (``python -m ENTRY - RESULT``).
CONFIG_ENV = "DLPERF_JOB_CONFIG"

#: How long the up-front check and the clean-up on each remote host may take.
REMOTE_CALL_TIMEOUT = 60.0
#: How long the scheduler/servers of a ps-lite job may take to exit after the workers finished.
SERVER_EXIT_GRACE = 10.0
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
PORT_LOCK_DIR = Path(tempfile.gettempdir()) / f"dlperf-ports-{os.getuid() if hasattr(os, 'getuid') else 0}"


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


# ---------------------------------------------------------------- ports


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


# ---------------------------------------------------------------- environment


def _interface(launcher: Launcher) -> str | None:
    return getattr(launcher, "interface", None) or {"local": "lo", "netns": "eth0"}.get(launcher.name)


_SET_BY_STARTER = {"torchrun": ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"),
                   "mpi": ("RANK", "WORLD_SIZE", "LOCAL_RANK")}


def rank_environments(job: Job, job_id: str, ports: PortReservation) -> dict[Rank, dict[str, str]]:
    """Each rank's full environment: ours, the job marker, the framework's rendezvous variables."""
    launcher = job.launcher
    package_root = str(Path(__file__).resolve().parents[2])
    base = dict(os.environ)
    base.update(job.env)
    base.update(
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(p for p in (package_root, base.get("PYTHONPATH", "")) if p),
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


# ---------------------------------------------------------------- processes


def job_processes(job_id: str) -> list[int]:
    """Pids of every live process whose environment carries this job's marker."""
    marker = f"{JOB_MARKER}={job_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def _kill_groups(procs: Sequence[subprocess.Popen[bytes]], grace: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        if all(p.poll() is not None for p in procs):
            break


def _kill_marked(job_id: str) -> list[int]:
    survivors = job_processes(job_id)
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return survivors


def last_step(path: Path) -> int:
    """The last step a rank logged entering (-1: none yet)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return -1
    steps = [line[len(HEARTBEAT):].split()[0] for line in text.splitlines() if line.startswith(HEARTBEAT)]
    return int(steps[-1]) if steps and steps[-1].isdigit() else -1


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"crashed (exit status {code})"


def run_job(job: Job, workdir: Path | None = None) -> JobResult:
    """Start every rank, wait for the workers, return their payloads; raise JobFailed otherwise.

    The job holds this machine's device lock (its CPUs; the GPUs it sees when it uses them) like
    any measured scenario, so another run's scenario never shares its cores or GPUs. Ranks on
    other hosts (ssh, MPI, Slurm) are not locked there: those hosts are the job's own.
    """
    devices = visible_gpus() if job.config.get("device") == "cuda" else ["cpu"]
    with device_lock(devices or ["cpu"], timeout=job.timeout, owner=f"distributed job {job.label}"):
        return _run_job(job, workdir)


def _run_job(job: Job, workdir: Path | None) -> JobResult:
    job_id = f"{job.label}-{secrets.token_hex(4)}"
    logdir = Path(workdir or tempfile.mkdtemp(prefix="dlperf-job-")) / job_id
    logdir.mkdir(parents=True, exist_ok=True)
    missing = job.launcher.missing()
    if missing:
        raise RuntimeError(missing)
    remote = bool(getattr(job.launcher, "remote", False))
    (logdir / "config.json").write_text(json.dumps(job.config), encoding="utf-8")  # the record; ranks get the env
    ports: PortReservation | RemotePorts = RemotePorts(job, job_id) if remote else PortReservation()
    procs: dict[Rank, Any] = {}  # a Popen, or a TaggedLaunch several ranks share
    logs: dict[Rank, Path] = {}
    results: dict[Rank, Path] = {}
    entry = ENTRY_POINTS[job.framework]
    start = time.perf_counter()
    envs: dict[Rank, dict[str, str]] = {}
    unreached: list[str] | None = None  # None: the remote hosts were not cleaned up yet
    try:
        envs = rank_environments(job, job_id, ports)
        scratch = Path(REMOTE_SCRATCH) / job_id if remote else logdir
        for rank, env in envs.items():
            logs[rank] = logdir / f"{rank.file_stem}.log"
            results[rank] = scratch / f"{rank.file_stem}.json"
            env[CONFIG_ENV] = json.dumps(job.config)
        if job.start in ("torchrun", "mpi"):
            tagged = _start_tagged(job, job_id, envs, logs, scratch, logdir)
            procs.update((r, tagged[r]) for r in envs)  # rank order, whatever the hosts' order
        for rank, env in envs.items():
            if rank in procs:
                continue
            command = [_python(job, rank.slot), "-m", entry, "-", str(results[rank])]
            argv = job.launcher.argv(rank.slot, command, env)
            with open(logs[rank], "wb") as log:
                procs[rank] = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, start_new_session=True)
        _watch(job, job_id, procs, logs, start)
        wall = time.perf_counter() - start
    except JobFailed as exc:
        if remote:  # the ranks' process groups here are gone; now whatever runs on the hosts
            unreached = exc.unreached = reap_remote(job, job_id, skip=exc.lost_hosts)
        raise
    finally:
        _kill_groups(list(procs.values()))
        if remote and unreached is None and procs:
            unreached = reap_remote(job, job_id)
        if remote:  # what the launcher kept here (mpirun's session folder)
            shutil.rmtree(Path(REMOTE_SCRATCH) / job_id, ignore_errors=True)
        leftovers = _kill_marked(job_id)
        ports.release()
    payloads = []
    for rank in [r for r in procs if r.role == "worker"]:
        payload = read_rank_result(logs[rank], None if remote else results[rank])
        if payload is None:
            raise JobFailed(job_id, rank.name, "exited 0 but wrote no result", _output(procs, logs, rank), leftovers,
                            _host(job, rank), unreached or ())
        if remote:
            payload["params"] = None  # it lived in the host's scratch folder, removed with the job
        payloads.append(payload)
    return JobResult(job_id, job.label, payloads, wall, logdir, rendezvous_of(envs))


# ---------------------------------------------------------------- one process, several ranks

#: How many of a launch process's own last lines a failure report shows.
LAUNCHER_LINES = 16
#: How long a launch process's output may still be read after it exited, before the exit counts.
OUTPUT_DRAIN = 3.0
#: The first failure as torchrun reports it ("rank: 1 (local_rank: 0)" ... "exitcode: 17") and as
#: mpirun does ("Process name: [[5138,1],1]" ... "Exit code: 17"): which of the launch's ranks, what status.
_CULPRITS = {"torchrun": (re.compile(rb"local_rank:\s*(\d+)\)"), re.compile(rb"exitcode\s*:\s*(-?\d+)")),
             "mpi": (re.compile(rb"Process name:\s*\[\[\d+,\d+\],(\d+)\]"), re.compile(rb"Exit code:\s*(-?\d+)"))}
#: Where torchrun names the first failure. With several ranks on a host it lists the others first
#: ("Failures:": the ranks it SIGTERMed after the first one died), so the search starts here.
_ROOT_CAUSE = b"Root Cause (first observed failure):"


class TaggedLaunch:
    """One launch process (a host's torchrun, the world's mpirun) that carries several ranks.

    Its output is read line by line: a line tagged by the launcher (``kind``'s pattern, the tag's
    number indexing ``ranks``) goes, untagged, to that rank's log; the launcher's own lines (its
    messages, its failure report) are kept apart, the last few in ``untagged`` for a failure report
    (so a rank's log shows its own last lines, not the agent's traceback). The whole output is kept
    in ``log``. ``poll`` reports the
    exit only once the output is read (a result line must not be missed), at most
    :data:`OUTPUT_DRAIN` seconds later. Quacks like the ``Popen`` the watcher and clean-up use.
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], kind: str, ranks: Sequence[Rank],
                 logs: Sequence[Path], log: Path):
        self.kind, self.ranks, self.log = kind, list(ranks), log
        # a tag may start a line or, from mpirun, follow another rank's unfinished chunk
        self._tag = re.compile((TORCHRUN_TAG_PATTERN if kind == "torchrun" else MPI_TAG_PATTERN).lstrip("^").encode())
        #: The launcher's own lines (untagged), the last few: what it says about a failure.
        self.untagged: deque[str] = deque(maxlen=LAUNCHER_LINES)
        self._files = [open(path, "wb") for path in logs]
        self._own = open(log, "wb")
        self._proc = subprocess.Popen(list(argv), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self._proc.pid
        self._exited_at: float | None = None
        self._reader = threading.Thread(target=self._read, name=f"dlperf-{kind}-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Split the output by tag. A rank's chunk may end mid-line and another rank's follow on the
        same line (mpirun tags each chunk it forwards: ``[1,0]<stdout>:step 4[1,1]<stdout>:...``):
        every piece but a line's last is partial and waits in its rank's buffer for the rest."""
        assert self._proc.stdout is not None
        partial: dict[int, bytes] = {}
        try:
            for raw in iter(self._proc.stdout.readline, b""):
                self._own.write(raw)
                self._own.flush()
                pieces = self._tag.split(raw.rstrip(b"\r\n"))  # ssh -tt's terminal ends lines with CR LF
                if pieces[0] or len(pieces) == 1:
                    self.untagged.append(pieces[0].decode(errors="replace"))  # the launcher's own line
                tagged = list(zip(pieces[1::2], pieces[2::2]))
                for at, (number, text) in enumerate(tagged):
                    index = int(number)
                    if index >= len(self._files):
                        continue
                    partial[index] = partial.get(index, b"") + text
                    if at == len(tagged) - 1:
                        self._files[index].write(partial.pop(index) + b"\n")
                        self._files[index].flush()
            for index, text in partial.items():
                self._files[index].write(text + b"\n")
        finally:
            for out in [*self._files, self._own]:
                out.close()

    def report(self, rank_log: Path) -> str:
        """A rank's last output, then its launcher's own last lines (torchrun's or mpirun's failure report)."""
        own = "\n".join(self.untagged).strip()
        return tail(rank_log) + (f"\n--- last lines of {self.kind} ---\n{own}" if own else "")

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def poll(self) -> int | None:
        code = self._proc.poll()
        if code is None or not self._reader.is_alive():
            return code
        self._exited_at = self._exited_at or time.monotonic()
        return code if time.monotonic() - self._exited_at > OUTPUT_DRAIN else None

    def wait(self, timeout: float | None = None) -> int:
        code = self._proc.wait(timeout)
        self._reader.join(OUTPUT_DRAIN)
        return code

    def blame(self, rank: Rank, code: int) -> tuple[Rank, int]:
        """The rank the launcher's own failure report names, and its exit status (else ``rank``, ``code``)."""
        try:
            text = self.log.read_bytes()
        except OSError:
            return rank, code
        if self.kind == "torchrun" and _ROOT_CAUSE in text:
            text = text[text.rindex(_ROOT_CAUSE):]
        who, status = (pattern.search(text) for pattern in _CULPRITS[self.kind])
        if who and int(who.group(1)) < len(self.ranks):
            rank = self.ranks[int(who.group(1))]
        return rank, (int(status.group(1)) or code) if status else code


def launch_groups(job: Job, ranks: Sequence[Rank]) -> list[list[Rank]]:
    """The ranks each launch process starts: a torchrun per host (in order of the hosts' first
    rank), or one mpirun for the torch world, or one mpirun per ps-lite role."""
    if job.start == "mpi":  # torch: the world; MXNet: one mpirun per role (scheduler, servers, workers)
        roles: dict[str, list[Rank]] = {}
        for rank in ranks:
            roles.setdefault(rank.role, []).append(rank)
        return list(roles.values())
    groups: dict[str, list[Rank]] = {}
    for rank in ranks:
        groups.setdefault(job.launcher.address(rank.slot), []).append(rank)
    return list(groups.values())


def _start_tagged(job: Job, job_id: str, envs: Mapping[Rank, dict[str, str]], logs: Mapping[Rank, Path],
                  scratch: Path, logdir: Path) -> dict[Rank, TaggedLaunch]:
    """Start the job's torchrun agents (or its mpirun); each rank finds its result path by its launch index."""
    entry = ENTRY_POINTS[job.framework]
    result = str(scratch / "worker{index}.json")  # filled in by load_rank
    groups = launch_groups(job, list(envs))
    out: dict[Rank, TaggedLaunch] = {}
    for number, ranks in enumerate(groups):
        env, python = envs[ranks[0]], _python(job, ranks[0].slot)
        if job.start == "mpi":
            argv = job.launcher.world_argv([r.slot for r in ranks], [python, "-m", entry, "-", result],  # type: ignore[attr-defined]
                                           env, session=f"ompi-world{number}")
        else:
            address, port = env["DLPERF_RENDEZVOUS"].rsplit(":", 1)
            command = torchrun_command(python, [entry, "-", result], nnodes=len(groups), nproc=len(ranks),
                                       address=address, port=int(port), job_id=job_id, is_host=number == 0,
                                       local_address=job.launcher.address(ranks[0].slot),
                                       log_dir=str(scratch / f"torchrun{number}"))
            argv = job.launcher.argv(ranks[0].slot, command, env)
        launch = TaggedLaunch(argv, env, job.start or "", ranks, [logs[r] for r in ranks],
                              logdir / f"launch{number}.log")
        out.update((r, launch) for r in ranks)
    return out


def _result_file(log: Path) -> Path:
    """The result file of a local rank, beside its log (remote ranks' files stay on their hosts)."""
    return log.with_suffix(".json")


def _python(job: Job, slot: int) -> str:
    """The interpreter of ``slot``'s host: the hostfile's ``python=``, else the job's."""
    python = getattr(job.launcher, "python", None)
    return (python(slot) if callable(python) else None) or job.python


def _host(job: Job, rank: Rank) -> str | None:
    return None if job.launcher.name == "local" else job.launcher.address(rank.slot)


def read_rank_result(log: Path, path: Path | None) -> dict[str, Any] | None:
    """The rank's payload: its last result line in the output the launcher brought back, else its file."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith(RESULT_LINE):
            try:
                return json.loads(line[len(RESULT_LINE):])
            except ValueError:
                break
    if path is None:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- remote hosts

#: Run on every remote host before the job: can its interpreter import the entry point, and which
#: ports are free *there* (bound on the wildcard by the host itself, then released for the ranks).
PROBE = """
import importlib.util, json, socket, sys
entry, count = sys.argv[1], int(sys.argv[2])
try:
    found = importlib.util.find_spec(entry) is not None
except ImportError:
    found = False
socks = [socket.socket() for _ in range(count)]
for s in socks:
    s.bind(("0.0.0.0", 0))
print("[dlperf] probe " + json.dumps({"host": socket.gethostname(), "python": sys.executable, "entry": found,
                                      "ports": [s.getsockname()[1] for s in socks]}), flush=True)
"""
#: Run on every remote host after the job: SIGKILL whatever carries the job's marker, remove its scratch folder.
REAPER = """
import os, shutil, signal, sys
marker = ("%s=" + sys.argv[1]).encode()
for pid in filter(str.isdigit, os.listdir("/proc")):
    if pid == str(os.getpid()):
        continue
    try:
        if marker in open(f"/proc/{pid}/environ", "rb").read().split(b"\\0"):
            os.kill(int(pid), signal.SIGKILL)
    except OSError:
        pass
shutil.rmtree(sys.argv[2], ignore_errors=True)
print("[dlperf] reaped", flush=True)
""" % JOB_MARKER


def _host_slots(job: Job) -> dict[str, int]:
    """One slot per distinct host address the job's ranks use."""
    slots: dict[str, int] = {}
    for rank in job.ranks():
        slots.setdefault(job.launcher.address(rank.slot), rank.slot)
    return slots


def _remote_env(job_id: str) -> dict[str, str]:
    package_root = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p))


def _remote_calls(job: Job, argvs: Mapping[str, list[str]], env: Mapping[str, str],
                  timeout: float = REMOTE_CALL_TIMEOUT) -> dict[str, tuple[int, str]]:
    """Run one short command per host at once; (exit status, output) per host, 124 on a timeout."""
    procs = {host: subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
             for host, argv in argvs.items()}
    out: dict[str, tuple[int, str]] = {}
    deadline = time.monotonic() + timeout
    for host, proc in procs.items():
        try:
            text, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            out[host] = (proc.returncode, text.decode(errors="replace"))
        except subprocess.TimeoutExpired:
            _kill_groups([proc], grace=1.0)
            out[host] = (124, f"no answer within {timeout:g} s")
    return out


class HostsNotReady(RuntimeError):
    """A remote host cannot run the job's ranks (unreachable, no interpreter, no package); names each."""


class RemotePorts:
    """Ports chosen on the remote host that binds them (its own kernel said they were free)."""

    def __init__(self, job: Job, job_id: str):
        slots = _host_slots(job)
        entry = ENTRY_POINTS[job.framework]
        env = _remote_env(job_id)
        count = len(job.ranks())
        argvs = {host: job.launcher.argv(slot, [_python(job, slot), "-c", PROBE, entry, str(count)], env)
                 for host, slot in slots.items()}
        self._free: dict[str, list[int]] = {}
        problems = []
        for host, (code, text) in _remote_calls(job, argvs, env).items():
            python = _python(job, slots[host])
            line = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith("[dlperf] probe ")), None)
            if code != 0 or line is None:
                problems.append(f"host {host}: {job.launcher.name} could not run {python} there (exit {code}): "
                                f"{text.strip()[-400:] or '(no output)'}")
                continue
            probe = json.loads(line[len("[dlperf] probe "):])
            if not probe["entry"]:
                problems.append(f"host {host}: {python} cannot import {entry}; install pytest-dlperf there "
                                "or give the host's interpreter with python=/abs/path in the hostfile")
                continue
            self._free[host] = list(probe["ports"])
        if problems:
            raise HostsNotReady("the job's hosts are not ready:\n  " + "\n  ".join(problems))

    def take(self, address: str) -> int:
        return self._free[address].pop(0)

    def release(self) -> None:
        self._free.clear()


def _unreachable(job: Job, ranks: Sequence[Rank]) -> set[str]:
    """The addresses among ``ranks``' hosts where the launcher cannot run ``true`` any more."""
    slots = {job.launcher.address(r.slot): r.slot for r in ranks}
    argvs = {host: job.launcher.argv(slot, ["true"], {}) for host, slot in slots.items()}
    return {host for host, (code, _) in _remote_calls(job, argvs, dict(os.environ), timeout=15.0).items() if code != 0}


#: How long the clean-up waits for a host (a lost one would otherwise hold the failure report back).
REAP_TIMEOUT = 20.0


def reap_remote(job: Job, job_id: str, skip: Sequence[str] = ()) -> list[str]:
    """Kill the job's processes on every remote host through the launcher; the hosts it could not reach
    (``skip``: hosts already found gone, not waited for again)."""
    slots = {host: slot for host, slot in _host_slots(job).items() if host not in skip}
    env = _remote_env(job_id)
    scratch = str(Path(REMOTE_SCRATCH) / job_id)
    argvs = {host: job.launcher.argv(slot, [_python(job, slot), "-c", REAPER, job_id, scratch], env)
             for host, slot in slots.items()}
    return [*(f"host {host} (it no longer answered)" for host in skip),
            *(f"host {host} ({text.strip()[-200:]})"
              for host, (code, text) in _remote_calls(job, argvs, env, timeout=REAP_TIMEOUT).items()
              if code != 0 or "[dlperf] reaped" not in text)]


def rendezvous_of(envs: Mapping[Rank, Mapping[str, str]]) -> list[str]:
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


#: What a rank's output says when a peer's process or host went away (gloo, ps-lite): a consequence.
PEER_LOST = ("closed by peer", "reset by peer", "Broken pipe", "Connection refused")
#: How long a failure that only says it lost a peer waits for the peer's own failure to be reported.
PEER_GRACE = 2.0


def _output(procs: Mapping[Rank, Any], logs: Mapping[Rank, Path], rank: Rank) -> str:
    """What a failure report shows of ``rank``: its last output (and its launcher's, if it has one)."""
    report = getattr(procs.get(rank), "report", None)
    return report(logs[rank]) if report is not None else tail(logs[rank])


def _lost_a_peer(log: Path) -> bool:
    text = tail(log)
    return any(marker in text for marker in PEER_LOST)


def _cause(procs: Mapping[Rank, Any], failed: Sequence[Rank], logs: Mapping[Rank, Path]) -> tuple[Rank, int]:
    """The failed rank to blame and its exit status: the first, each launch of several ranks read
    through its own failure report (``blame``), preferring a rank that did not just lose a peer."""
    candidates: list[tuple[Rank, int]] = []
    for r in failed:
        blame = getattr(procs[r], "blame", None)
        found = blame(r, procs[r].returncode) if blame is not None else (r, procs[r].returncode)
        if found not in candidates:
            candidates.append(found)
    return next((c for c in candidates if not _lost_a_peer(logs[c[0]])), candidates[0])


def _watch(job: Job, job_id: str, procs: Mapping[Rank, Any], logs: Mapping[Rank, Path],
           start: float) -> None:
    workers = [r for r in procs if r.role == "worker"]
    deadline = start + job.timeout
    workers_done_at: float | None = None
    resultless: dict[Rank, bool] = {}  # workers that exited 0: did they leave no result line?
    while True:
        for r in workers:
            if r not in resultless and procs[r].poll() == 0:
                resultless[r] = read_rank_result(logs[r], None) is None and not _result_file(logs[r]).exists()
        def failures() -> list[Rank]:
            return [r for r, p in procs.items() if p.poll() not in (None, 0) or resultless.get(r)]

        failed = failures()
        if failed:
            # the first to fail is the cause; peers that lose their connection follow it. A rank that
            # says it lost a peer is not the cause: give the peer's launch a moment to report (torchrun's
            # agents each notice their own rank's exit within 0.1 s, so they may fail in either order)
            rank, code = _cause(procs, failed, logs)
            settle = time.monotonic() + PEER_GRACE
            while (_lost_a_peer(logs[rank]) and time.monotonic() < settle
                   and any(p.poll() is None for p in procs.values())):
                time.sleep(0.1)
                rank, code = _cause(procs, failures(), logs)
            reason = _exit_reason(code) if code else "exited 0 but wrote no result"
            lost: set[str] = set()
            if job.launcher.name == "ssh" and code == 255:
                reason = "lost its host: ssh exited 255 (the host stopped answering, or its sshd died)"
            elif getattr(job.launcher, "remote", False):
                # a launcher that lost a host may exit with any status, even 0 (srun); and a rank
                # that failed because a peer's host vanished is not the cause: that host is
                lost = _unreachable(job, [r for r in procs if r == rank or procs[r].poll() is None])
                here = job.launcher.address(rank.slot)
                lost_ranks = [r for r in procs if job.launcher.address(r.slot) in lost and r != rank]
                if here in lost:
                    reason = f"lost its host: {here} no longer answers {job.launcher.name} (the rank {reason})"
                elif lost_ranks:
                    cause = lost_ranks[0]
                    reason = (f"lost its host: {job.launcher.address(cause.slot)} no longer answers "
                              f"{job.launcher.name} ({rank.name} {reason} after losing its peer)")
                    rank = cause
            _kill_groups(list(procs.values()))
            exc = JobFailed(job_id, rank.name, reason, _output(procs, logs, rank), _kill_marked(job_id),
                            _host(job, rank))
            exc.lost_hosts = sorted(lost)
            raise exc
        if all(procs[r].poll() == 0 for r in workers):
            if all(p.poll() == 0 for p in procs.values()):
                return
            workers_done_at = workers_done_at or time.monotonic()
            if time.monotonic() - workers_done_at > SERVER_EXIT_GRACE:
                return  # the workers have their results; servers are killed in the cleanup
        now = time.perf_counter()
        if now > deadline:
            running = [r for r, p in procs.items() if p.poll() is None and r.role == "worker"] or \
                      [r for r, p in procs.items() if p.poll() is None]
            steps = {r: last_step(logs[r]) for r in running}
            lost = _unreachable(job, running) if getattr(job.launcher, "remote", False) else set()
            # a rank whose host stopped answering is the cause, whatever step its peers wait at
            laggard = min(running, key=lambda r: (job.launcher.address(r.slot) not in lost, steps[r], r.index))
            others = ", ".join(f"{r.name} at step {steps[r]}" for r in running if r != laggard)
            if len(running) > 1 and len(set(steps.values())) == 1:
                others += "; no rank is behind the others, so the hang is inside that step's collective"
            _kill_groups(list(procs.values()))
            reason = (f"hung: no result after the job's timeout of {job.timeout:g} s; its last step was "
                      f"{steps[laggard]}" + (f" (still running: {others})" if others else ""))
            if lost:
                reason += f"; host(s) {', '.join(sorted(lost))} did not answer {job.launcher.name}"
            exc = JobFailed(job_id, laggard.name, reason, _output(procs, logs, laggard), _kill_marked(job_id),
                            _host(job, laggard))
            exc.lost_hosts = sorted(lost)
            raise exc
        time.sleep(0.05)


# ---------------------------------------------------------------- rank side


def load_rank(argv: Sequence[str]) -> tuple[dict[str, Any], Path]:
    """The job's config and this rank's result path, from ``python -m entry CONFIG RESULT``.

    ``CONFIG`` ``-`` reads the config from ``$DLPERF_JOB_CONFIG`` (how the parent sends it: no file
    needs to exist on the rank's host). The result path's folder is made if missing.
    """
    config_path, result_path = argv
    text = os.environ[CONFIG_ENV] if config_path == "-" else Path(config_path).read_text(encoding="utf-8")
    result_path = result_path.replace("{index}", str(launch_index()))  # one command, several ranks
    Path(result_path).parent.mkdir(parents=True, exist_ok=True)
    return json.loads(text), Path(result_path)


def launch_index(default: int = 0) -> int:
    """This rank's launch index (``worker N`` in the parent's messages): given by the parent, or,
    where one process started several ranks, ``DLPERF_PROCESS_INDEXES[LOCAL_RANK]`` (torchrun)
    or ``OMPI_COMM_WORLD_RANK`` (one mpirun for the world)."""
    env = os.environ
    if "DLPERF_PROCESS_INDEX" in env:
        return int(env["DLPERF_PROCESS_INDEX"])
    if "DLPERF_PROCESS_INDEXES" in env:
        return int(env["DLPERF_PROCESS_INDEXES"].split(",")[int(env.get("LOCAL_RANK", 0))])
    if "OMPI_COMM_WORLD_RANK" in env:
        return int(env["OMPI_COMM_WORLD_RANK"])
    return default


def heartbeat(step: int) -> None:
    """"Entering step N", printed before the step's collective: the parent names the laggard
    of a hung job from these (its peers have entered the next step and wait in its collective)."""
    print(f"{HEARTBEAT}{step}", flush=True)


def write_rank_result(path: Path, payload: Mapping[str, Any]) -> None:
    """The payload to ``path`` (atomically) and, as one line, to stdout: the launcher brings it back.

    Where it ran goes with it: the host's name and the CPUs the rank was allowed (its pinning).
    """
    text = json.dumps(dict(payload, hostname=socket.gethostname(),
                           cpus=sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    print(f"{RESULT_LINE}{text}", flush=True)


def maybe_fault(config: Mapping[str, Any], rank: int, step: int) -> None:
    """Fault injection for the reliability tests: ``fault={"rank": r, "step": s, "kind": "crash"|"hang"}``.

    ``r`` is the launch index (``worker r`` in the parent's messages); ps-lite assigns its own
    ranks in connection order, so the framework's rank is only the fallback.
    """
    fault = config.get("fault")
    index = launch_index(rank)
    if not fault or fault["rank"] != index or fault["step"] != step:
        return
    print(f"[dlperf] injected fault: {fault['kind']} at step {step}", flush=True)
    if fault["kind"] == "crash":
        os._exit(17)
    while True:  # a hang: the peers block in their next collective
        time.sleep(3600)


def dataset(samples: int, image_size: int, num_classes: int, seed: int, noise: float,
            split: str = "train") -> tuple[Any, Any]:
    """A fixed synthetic set (images NCHW float32, labels int64) from ``synthetic``'s class templates.

    ``split="val"`` draws different samples (different noise and labels) around the same
    class templates: a held-out set for top-1/top-5.
    """
    import numpy as np

    from ..synthetic import class_templates

    templates = class_templates(num_classes, image_size, seed)
    rng = np.random.default_rng([seed, 0 if split == "train" else 1])
    labels = rng.integers(0, num_classes, size=samples, dtype=np.int64)
    images = templates[labels] + noise * rng.standard_normal((samples, *templates.shape[1:]), dtype=np.float32)
    return images.astype(np.float32), labels


def shard(images: Any, labels: Any, step: int, rank: int, world: int, batch: int) -> tuple[Any, Any]:
    """Rank ``rank``'s slice of global batch ``step``: rows ``[g*W*b + r*b, +b)`` cycling the set.

    The union over ranks of one step is exactly the single-process batch of size ``W*b``.
    """
    per_step = world * batch
    steps_per_epoch = len(labels) // per_step
    if steps_per_epoch < 1:
        raise ValueError(f"{len(labels)} samples cannot fill one global batch of {per_step}")
    begin = (step % steps_per_epoch) * per_step + rank * batch
    return images[begin:begin + batch], labels[begin:begin + batch]


def scenario_of(config: Mapping[str, Any], total_steps: int, framework: str) -> Any:
    """The measure() schedule (a Scenario): warm-up, then rounds of equal steps, all of ``total_steps`` training."""
    from ..scenario import Scenario

    rounds = max(1, min(int(config.get("rounds", 4)), total_steps))
    warmup = min(int(config.get("warmup_steps", 2)), total_steps - rounds)
    per_round = (total_steps - warmup) // rounds
    warmup = total_steps - rounds * per_round
    return Scenario(framework=framework, model=config["model"], device=config.get("device", "cpu"),
                    batch_size=int(config["batch_size"]), image_size=int(config["image_size"]),
                    num_classes=int(config["num_classes"]), warmup_steps=warmup, rounds=rounds,
                    steps_per_round=per_round, lr=float(config["lr"]), momentum=float(config["momentum"]),
                    weight_decay=float(config.get("weight_decay", 0.0)), seed=int(config["seed"]),
                    label=config.get("label", "ddp"))


def total_steps_of(config: Mapping[str, Any], world: int) -> int:
    """``steps`` if given, else ``epochs`` passes over the training set at the global batch."""
    if config.get("steps"):
        return int(config["steps"])
    return int(config["epochs"]) * (int(config["train_samples"]) // (world * int(config["batch_size"])))


def topk_accuracy(logits: Any, labels: Any, ks: Sequence[int] = (1, 5)) -> dict[str, float]:
    """top-k accuracy (fraction) of numpy ``logits`` (N, C) against ``labels`` (N,)."""
    import numpy as np

    order = np.argsort(-logits, axis=1)
    out = {}
    for k in ks:
        hits = (order[:, :min(k, logits.shape[1])] == labels[:, None]).any(axis=1)
        out[f"top{k}"] = float(hits.mean())
    return out


def scaling_efficiency(single_worker_throughput: float, per_worker_throughputs: Sequence[float]) -> float:
    """Weak scaling: the N workers' total throughput over N times one worker's."""
    n = len(per_worker_throughputs)
    return sum(per_worker_throughputs) / (n * single_worker_throughput)


# ---------------------------------------------------------------- parent side: networks and reporting

#: Where the workers of a test run: this host's loopback, or separate netns hosts (optionally rate-limited).
NETWORKS = ("loopback", "netns", "netns_limited")


class NetworkUnavailable(RuntimeError):
    """The network asked for cannot be built here; the message is the reason to skip."""


@contextmanager
def network(kind: str, hosts: int, rate: str = "1gbit", launcher: Launcher | None = None) -> Iterator[Launcher]:
    """A launcher for ``kind``; netns namespaces exist only inside the ``with`` block.

    ``loopback`` means the user's launcher (``--dlperf-launcher``: local by default).
    """
    if kind == "loopback":
        yield launcher or LocalLauncher()
        return
    if kind not in NETWORKS:
        raise ValueError(f"network {kind!r}: use one of {', '.join(NETWORKS)}")
    from .launchers import NetnsLauncher
    from .netns import NetnsCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise NetworkUnavailable(reason)
    with NetnsCluster(hosts, rate=rate if kind == "netns_limited" else None) as cluster:
        yield NetnsLauncher(cluster.namespaces, cluster.addresses)


def param_bytes(params_path: str) -> int:
    """Bytes of the float parameters a worker saved: what one all-reduce/push must move."""
    import numpy as np

    with np.load(params_path) as arrays:
        return int(sum(arrays[k].nbytes for k in arrays.files if arrays[k].dtype.kind == "f"))


def max_param_difference(path_a: str, path_b: str) -> tuple[str, float]:
    """The parameter array that differs most, and its largest ``|a-b| / max(|b|, 1e-3)``."""
    import numpy as np

    worst, name = -1.0, ""
    with np.load(path_a) as a, np.load(path_b) as b:
        if sorted(a.files) != sorted(b.files):
            raise ValueError(f"different parameter sets: {sorted(a.files)} vs {sorted(b.files)}")
        for key in a.files:
            if a[key].dtype.kind != "f":
                continue
            scale = np.maximum(np.abs(b[key]), 1e-3)
            excess = float((np.abs(a[key] - b[key]) / scale).max())
            if excess > worst:
                worst, name = excess, key
    return name, worst


def as_training_result(job: Job, result: JobResult, label: str) -> Any:
    """The job as a :class:`TrainingResult` for ``dlperf.check``: throughput *per worker*
    (every worker's per-round samples), rank 0's top-1/top-5, the job's wall time, and
    this machine's hardware key so the figures meet their baselines."""
    from ..environment import hardware_key, host_record
    from ..result import HIGHER, TrainingResult, metric_from

    first = next((w for w in result.workers if w.get("accuracy")), result.workers[0])
    total = total_steps_of(job.config, job.workers)
    scenario = scenario_of(job.config, total, job.framework).replace(
        label=label, kvstore=job.config.get("kvstore"), launch_prefix=(job.launcher.name,))
    per_worker = [x for w in result.workers for x in w["throughput"]]
    metrics = {"throughput": metric_from("throughput", per_worker, "samples/s/worker", HIGHER),
               "job_wall_time": metric_from("job_wall_time", [result.wall_seconds], "s", "lower")}
    if first.get("accuracy"):
        for k, v in first["accuracy"].items():
            metrics[f"accuracy_{k}"] = metric_from(f"accuracy_{k}", [v], "fraction", HIGHER)
    environment = host_record()
    environment.update(framework=job.framework, framework_version=first.get("framework_version"),
                       hardware_key=hardware_key(str(job.config.get("device", "cpu"))),
                       workers=job.workers, launcher=job.launcher.name, job_id=result.job_id)
    details = {"wall_seconds": result.wall_seconds, "workers": result.workers}
    return TrainingResult(scenario, metrics, list(first["losses"]), environment, details)
