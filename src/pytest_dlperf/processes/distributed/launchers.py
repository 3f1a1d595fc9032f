"""Where the ranks of a distributed job run: argv lists for local, ssh, mpirun, srun, qrsh and netns.

A launcher turns (host slot, command, environment) into the argv of one process on
this machine that starts the rank where it belongs. Every launcher builds a list,
never a shell string: a host name from a hostfile reaches ``ssh``/``mpirun``/``srun``
as one argument after validation, and the only shell involved (the remote login
shell ``ssh`` hands its command to) receives every word through ``shlex.quote``.

The hosts come from a hostfile (:mod:`.hosts`); only the ssh launcher honours a host's port
(``ssh -p``), mpi, slurm and sge refuse one.

Torch ranks start through ``torchrun`` (:func:`torchrun_command`): every launcher starts one
torchrun agent per host, the agents meet at a c10d rendezvous on the first host's address and
each starts that host's ranks. Under ``mpirun`` a job may instead start the whole world with one
``mpirun -np N`` (:meth:`MpiLauncher.world_argv`), the ranks reading ``OMPI_COMM_WORLD_*``.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, Sequence

from pytest_dlperf.processes.distributed.hosts import Host, HostfileError, read_hostfile, slot_hosts
from pytest_dlperf.processes.distributed.netns import unavailable_reason

LAUNCHERS = ("local", "ssh", "mpi", "slurm", "sge", "netns")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SAFE = re.compile(r"^[A-Za-z0-9_=.-]+$")  # a word no shell on the far side could misread
#: Where ranks on remote hosts keep their files, one folder per job (removed by the job's clean-up).
REMOTE_SCRATCH = "/tmp/dlperf-ranks"
#: Variables a rank needs from the caller's environment when it starts elsewhere.
FORWARDED_PREFIXES = ("DLPERF_", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TF_", "DMLC_", "PS_", "GLOO_",
                      "OMP_", "MKL_", "KMP_", "PYTHONPATH", "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES", "NCCL_")


#: What torchrun puts before every line of a rank's output (``--tee 3``): the parent splits a host's
#: output into one log per rank by it. ``${local_rank}`` is torchrun's macro, not a shell's.
TORCHRUN_TAG = "[dlperf-rank ${local_rank}] "
#: ``TORCHRUN_TAG`` as the parent reads it back: the group's number of the rank that wrote the line.
TORCHRUN_TAG_PATTERN = r"^\[dlperf-rank (\d+)\] ?"
#: ``mpirun --tag-output``: ``[JOBID,RANK]<stdout>:`` before every line of a rank's output.
MPI_TAG_PATTERN = r"^\[\d+,(\d+)\]<std(?:out|err)>: ?"


def _refuse_ssh_ports(launcher: str, hosts: Sequence[Host], why: str, fix: str) -> None:
    """Fail when a host names an ssh port ``launcher`` would silently ignore.

    ``fix`` may name ``{address}`` and ``{port}``: those of the first such host.
    """
    ported = [h for h in hosts if h.port is not None]
    if ported:
        named = ", ".join(repr(h.entry) for h in ported)
        fix = fix.format(address=ported[0].address, port=ported[0].port)
        raise HostfileError(f"the {launcher} launcher cannot use the ssh port of {named}: {why}; {fix}")


def _endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def torchrun_command(python: str, entry_args: Sequence[str], *, nnodes: int, nproc: int, address: str,
                     port: int, job_id: str, is_host: bool, local_address: str, log_dir: str) -> list[str]:
    """One host's ``torchrun`` (``python -m torch.distributed.run``: the host's interpreter, no PATH).

    * ``--rdzv-backend c10d --rdzv-endpoint ADDRESS:PORT --rdzv-id JOB``: the agents meet in a store
      on the first host, at a port chosen on that host; ``is_host`` tells the agent there to serve
      it (otherwise torchrun decides by resolving its own hostname: a name lookup);
    * ``--local-addr``: the address this host's ranks are reached at (torchrun would otherwise
      publish its FQDN, a name, as ``MASTER_ADDR``);
    * ``--max-restarts 0``: a failing rank fails the job (the parent reports it), no elastic retry;
    * ``--tee 3`` with :data:`TORCHRUN_TAG`: every rank's stdout and stderr reach this agent's
      output, each line tagged with the rank's local rank, so the parent keeps one log per rank;
      the tee files go under ``log_dir`` (the job's scratch folder, removed by its clean-up).
    """
    for name, value in (("nnodes", nnodes), ("nproc", nproc), ("port", port)):
        if value < 1:
            raise ValueError(f"torchrun {name}={value} must be >= 1")
    return [python, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={_endpoint(address, port)}", f"--rdzv-id={job_id}",
            f"--rdzv-conf=is_host={'1' if is_host else '0'}", f"--local-addr={local_address}",
            "--max-restarts=0", f"--log-dir={log_dir}", "--tee=3", f"--log-line-prefix-template={TORCHRUN_TAG}",
            "-m", *entry_args]


def _env_words(env: Mapping[str, str]) -> list[str]:
    for name in env:
        if not _ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not valid")
    return [f"{k}={v}" for k, v in env.items()]


def forwarded(env: Mapping[str, str]) -> dict[str, str]:
    """The part of a rank's environment a remote launcher must set explicitly."""
    return {k: v for k, v in env.items() if k.startswith(FORWARDED_PREFIXES)}


class Launcher(Protocol):
    name: str

    def address(self, slot: int) -> str:
        """The address the process in ``slot`` binds and its peers reach it at."""

    def argv(self, slot: int, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """The local argv that starts ``command`` in ``slot`` with ``env``."""

    def missing(self) -> str | None:
        """Why this launcher cannot run here (a tool not installed), or None."""

    # Remote launchers (ssh, mpi, slurm) also have ``remote = True``, ``python(slot)``: the
    # interpreter on that slot's host (None: the caller's), and ``hosts``.


@dataclass
class LocalLauncher:
    """Every rank on this host, on the loopback address; env goes through ``Popen``."""

    bind_address: str = "127.0.0.1"
    name: str = "local"

    def address(self, slot: int) -> str:
        return self.bind_address

    def argv(self, slot: int, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
        return list(command)

    def missing(self) -> str | None:
        return None


@dataclass
class NetnsLauncher:
    """Rank slot i runs in namespace i via ``ip netns exec`` (which execs: the pid is the rank's)."""

    namespaces: Sequence[str]
    addresses: Sequence[str]
    name: str = "netns"

    def address(self, slot: int) -> str:
        return self.addresses[slot % len(self.addresses)]

    def argv(self, slot: int, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[slot % len(self.namespaces)], *command]

    def missing(self) -> str | None:
        return unavailable_reason()


class _HostfileSlots:
    """Slot ``i`` of a remote launcher is the ``i``-th slot of its hostfile's hosts (``slots=N`` each)."""

    hosts: Sequence[Host]

    def address(self, slot: int) -> str:
        return slot_hosts(self.hosts, slot + 1)[slot].address

    def python(self, slot: int) -> str | None:
        return slot_hosts(self.hosts, slot + 1)[slot].python


@dataclass
class SshLauncher(_HostfileSlots):
    """``ssh -tt host -- 'cd DIR && env K=V ... python ...'`` with every word shlex-quoted.

    ``-tt`` gives the remote command a terminal, so killing the local ssh client (the
    job's process group) hangs up the remote rank too. ``BatchMode`` never prompts.
    A host's port becomes ``-p PORT`` for that host's ssh only (a command-line option,
    so it wins over ``~/.ssh/config``); the address stays a word of its own.
    """

    hosts: Sequence[Host]
    workdir: str | None = None
    ssh_options: Sequence[str] = ("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new")
    #: argv the ssh client runs under (e.g. ``ip netns exec HEAD``: the login node of a test cluster).
    prefix: Sequence[str] = ()
    #: The hosts' network interface the ranks talk over (GLOO_SOCKET_IFNAME, DMLC_INTERFACE); None: their own choice.
    interface: str | None = None
    name: str = "ssh"
    remote = True

    def argv(self, slot: int, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
        host = slot_hosts(self.hosts, slot + 1)[slot]
        remote = shlex.join(["env", *_env_words(forwarded(env)), *command])
        if self.workdir:
            remote = f"cd {shlex.quote(self.workdir)} && {remote}"
        port = ["-p", str(host.port)] if host.port is not None else []
        return [*self.prefix, "ssh", "-tt", *self.ssh_options, *port, host.target, "--", remote]

    def missing(self) -> str | None:
        return None if shutil.which("ssh") else "the ssh launcher needs an ssh client (apt-get install openssh-client)"


@dataclass
class MpiLauncher(_HostfileSlots):
    """One ``mpirun -np 1 --host H`` per rank (Open MPI); env set by ``env`` on the far side, no shell.

    A host with an ssh port is refused when the launcher is made: ``--host`` and
    Open MPI's hostfile have no per-host port, and the only way to hand ssh a port is
    the launch agent's extra arguments, whose name depends on the version
    (``plm_rsh_args`` in Open MPI 4, PRRTE's ``plm_ssh_args`` in 5) and which a
    wrong guess turns into a silent no-op: ssh would log in at its default port.
    ``~/.ssh/config`` works with every version, so the error points there.
    """

    hosts: Sequence[Host]
    mpirun: str = "mpirun"
    #: Extra mpirun options (``--mca plm_rsh_agent ...``, ``--bind-to none``), and argv it runs under.
    mpirun_options: Sequence[str] = ()
    prefix: Sequence[str] = ()
    #: The hosts' network interface the ranks talk over (GLOO_SOCKET_IFNAME, DMLC_INTERFACE); None: their own choice.
    interface: str | None = None
    name: str = "mpi"
    remote = True

    def __post_init__(self) -> None:
        _refuse_ssh_ports(
            self.name, self.hosts, "mpirun's --host and hostfile have no per-host ssh port",
            "remove the ':PORT' and give the port to ssh itself: 'Host {address}' with 'Port {port}' in "
            "~/.ssh/config, or, if every host listens on that port, export OMPI_MCA_plm_rsh_args='-p {port}' "
            "(Open MPI 4) or PRTE_MCA_plm_ssh_args='-p {port}' (Open MPI 5) before running pytest",
        )

    def _agent(self, env: Mapping[str, str], session: str) -> list[str]:
        # the job's marker on the remote Open MPI daemon too, so a clean-up by marker finds it
        # (an orted whose mpirun became unreachable would otherwise live on)
        marker = [f"{k}={v}" for k, v in env.items() if k == "DLPERF_JOB"]
        if not (marker and _SAFE.match(marker[0])):
            return []
        # its own session folder per mpirun: two mpiruns of a job starting at once on one machine
        # race on the shared /tmp/ompi.HOST.UID (one removes it while the other makes its own)
        return ["--mca", "orte_launch_agent", f"env {marker[0]} orted",
                "--mca", "orte_tmpdir_base", f"{REMOTE_SCRATCH}/{env['DLPERF_JOB']}/{session}"]

    def argv(self, slot: int, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
        host = slot_hosts(self.hosts, slot + 1)[slot]
        return [*self.prefix, self.mpirun, *self.mpirun_options, *self._agent(env, f"ompi{slot}"),
                "-np", "1", "--host", host.address, "env", *_env_words(forwarded(env)), *command]

    def world_argv(self, slots: Sequence[int], command: Sequence[str], env: Mapping[str, str],
                   session: str = "ompi-world") -> list[str]:
        """One ``mpirun -np N --host A:n,B:m --tag-output`` for ranks in ``slots`` (in rank order).

        Open MPI places ranks by slot: the first ``n`` on A, the next ``m`` on B. A placement that
        order cannot give (a host's ranks not consecutive, as when ranks wrap round the hostfile)
        is refused rather than started with ranks on other hosts than the job records. ``session``
        names this mpirun's Open MPI session folder (mpiruns of one job starting at once need their own).
        """
        hosts = [slot_hosts(self.hosts, s + 1)[s].address for s in slots]
        counts: dict[str, int] = {}
        for i, address in enumerate(hosts):
            if address in counts and hosts[i - 1] != address:
                raise ValueError(f"one mpirun cannot place ranks {hosts} in that order (Open MPI fills each host's "
                                 "slots before the next host's); give each host as many slots= as ranks it runs")
            counts[address] = counts.get(address, 0) + 1
        spec = ",".join(f"{a}:{n}" for a, n in counts.items())
        return [*self.prefix, self.mpirun, *self.mpirun_options, *self._agent(env, session),
                "-np", str(len(hosts)), "--host", spec, "--tag-output",
                "env", *_env_words(forwarded(env)), *command]

    def missing(self) -> str | None:
        if shutil.which(self.mpirun):
            return None
        return f"the mpi launcher needs {self.mpirun!r} (apt-get install openmpi-bin)"


@dataclass
class SlurmLauncher(_HostfileSlots):
    """One ``srun --nodes=1 --ntasks=1 --nodelist=H`` job step per rank, inside an allocation.

    ``srun`` starts ranks through the nodes' ``slurmd``, never ssh, so a port in the
    hostfile means nothing here; it is refused when the launcher is made rather than
    dropped, since the user who wrote it expected it to matter.
    """

    hosts: Sequence[Host]
    srun: str = "srun"
    srun_options: Sequence[str] = ()
    prefix: Sequence[str] = ()
    #: Slurm node name per host address, where they differ (NodeName=h0 NodeAddr=10.0.0.1).
    nodes: Mapping[str, str] | None = None
    #: The hosts' network interface the ranks talk over (GLOO_SOCKET_IFNAME, DMLC_INTERFACE); None: their own choice.
    interface: str | None = None
    name: str = "slurm"
    remote = True

    def __post_init__(self) -> None:
        _refuse_ssh_ports(self.name, self.hosts, "srun starts ranks through slurmd, not ssh",
                          "remove the ':PORT' from the hostfile (Slurm's node names are enough)")

    def argv(self, slot: int, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
        host = slot_hosts(self.hosts, slot + 1)[slot]
        node = (self.nodes or {}).get(host.address, host.address)
        return [*self.prefix, self.srun, *self.srun_options, "--nodes=1", "--ntasks=1", f"--nodelist={node}",
                "--kill-on-bad-exit=1",
                "env", *_env_words(forwarded(env)), *command]

    def missing(self) -> str | None:
        return None if shutil.which(self.srun) else f"the slurm launcher needs {self.srun!r} inside a Slurm allocation"


#: The last line the remote shell prints under qrsh: the command's own exit status. qrsh itself exits 0
#: when its connection to the host breaks (the host died: "commlib error: got read error"), and a
#: qrsh to a lost host may exit 0 without running anything, so its status alone cannot be trusted.
QRSH_EXIT = "[dlperf-qrsh] exit "
#: Runs here around qrsh, in the job's process group: forwards qrsh's output line by line, keeps the
#: status line back, exits with that status, or 255 (as ssh does on a lost connection) without it.
QRSH_STATUS = f"""
import subprocess, sys
mark = {QRSH_EXIT.encode()!r}
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
status = None
for line in iter(proc.stdout.readline, b""):
    head, found, tail = line.rpartition(mark)  # after the command's last line, or after its unended one
    if found and tail.strip().isdigit():
        status, line = int(tail), head
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
code = proc.wait()
if status is None:
    sys.stderr.write(f"qrsh ended (exit {{code}}) without the command's exit status: the host was lost\\n")
    sys.exit(255)
sys.exit(status)
"""


@dataclass
class GridEngineLauncher(_HostfileSlots):
    """One ``qrsh -now yes -l hostname=H 'env K=V ... python ...'`` per launch: a Grid Engine job of its own.

    ``qrsh`` has the host's ``sge_execd`` start the command (its shepherd, never ssh) and streams the
    command's output back to this side, where the plugin reads the ranks' results: there is no shared
    filesystem to collect a ``qsub`` job's output files from. ``-now yes``: a job that cannot start at
    once (its host lost) fails instead of queueing. qrsh joins its words and hands them to the remote
    shell, so the command is one ``shlex``-quoted string, as for ssh. Killing the local qrsh (the
    job's process group) ends the remote job. qrsh's own exit status is not the command's when the
    host is lost (it exits 0), so the remote shell prints the command's status last and a small
    wrapper here (:data:`QRSH_STATUS`) exits with it, or with 255 where it never came.
    """

    hosts: Sequence[Host]
    qrsh: str = "qrsh"
    qrsh_options: Sequence[str] = ()
    prefix: Sequence[str] = ()
    #: Grid Engine host name per host address, where they differ.
    nodes: Mapping[str, str] | None = None
    #: The hosts' network interface the ranks talk over (GLOO_SOCKET_IFNAME, DMLC_INTERFACE); None: their own choice.
    interface: str | None = None
    name: str = "sge"
    remote = True

    def __post_init__(self) -> None:
        _refuse_ssh_ports(self.name, self.hosts, "qrsh starts ranks through sge_execd, not ssh",
                          "remove the ':PORT' from the hostfile (Grid Engine's host names are enough)")

    def argv(self, slot: int, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
        host = slot_hosts(self.hosts, slot + 1)[slot]
        node = (self.nodes or {}).get(host.address, host.address)
        remote = f"{shlex.join(['env', *_env_words(forwarded(env)), *command])}; echo \"{QRSH_EXIT}$?\""
        return [sys.executable, "-c", QRSH_STATUS, *self.prefix, self.qrsh, *self.qrsh_options,
                "-now", "yes", "-l", f"hostname={node}", remote]

    def missing(self) -> str | None:
        if shutil.which(self.qrsh):
            return None
        return f"the sge launcher needs {self.qrsh!r} (apt-get install gridengine-client)"


def make_launcher(name: str, hostfile: str | Path | None = None, **options: object) -> Launcher:
    """The launcher called ``name``; ssh/mpi/slurm need a hostfile, netns needs namespaces=/addresses=.

    A hostfile port that the launcher cannot honour (mpi, slurm) fails here, with the fix.
    """
    if name not in LAUNCHERS:
        raise ValueError(f"launcher {name!r} is not known; use one of: {', '.join(LAUNCHERS)}")
    if name == "local":
        return LocalLauncher(**options)  # type: ignore[arg-type]
    if name == "netns":
        return NetnsLauncher(**options)  # type: ignore[arg-type]
    if hostfile is None:
        raise ValueError(f"the {name} launcher needs a hostfile (--dlperf-hostfile PATH): one host per line")
    hosts = read_hostfile(hostfile)
    cls = {"ssh": SshLauncher, "mpi": MpiLauncher, "slurm": SlurmLauncher, "sge": GridEngineLauncher}[name]
    return cls(hosts=hosts, **options)
