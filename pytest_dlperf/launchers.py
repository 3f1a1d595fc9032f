"""Where the ranks of a distributed job run: argv lists for local, ssh, mpirun, srun and netns.

A launcher turns (host slot, command, environment) into the argv of one process on
this machine that starts the rank where it belongs. Every launcher builds a list,
never a shell string: a host name from a hostfile reaches ``ssh``/``mpirun``/``srun``
as one argument after validation, and the only shell involved (the remote login
shell ``ssh`` hands its command to) receives every word through ``shlex.quote``.

Hostfile format (the one of MXNet's ``launch.py`` and Open MPI): one host per line,
optionally ``user@host`` and ``slots=N``; ``#`` starts a comment.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, Sequence

LAUNCHERS = ("local", "ssh", "mpi", "slurm", "netns")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Variables a rank needs from the caller's environment when it starts elsewhere.
FORWARDED_PREFIXES = ("DLPERF_", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TF_", "DMLC_", "PS_", "GLOO_",
                      "OMP_", "MKL_", "KMP_", "PYTHONPATH", "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES", "NCCL_")


class HostfileError(ValueError):
    """A hostfile line is not a valid host; the message names the file, the line and the rule."""


@dataclass(frozen=True)
class Host:
    """One validated host: a DNS name or an IP address, an optional user, its slots."""

    address: str
    user: str | None = None
    slots: int = 1

    @property
    def target(self) -> str:
        """What ssh connects to: ``user@address`` or ``address``."""
        return f"{self.user}@{self.address}" if self.user else self.address


def validate_host(text: str, where: str = "host") -> Host:
    """Parse ``[user@]address[ slots=N]``; reject anything a shell or ssh could misread."""
    parts = text.split()
    if not parts:
        raise HostfileError(f"{where}: empty host entry")
    slots = 1
    for extra in parts[1:]:
        key, _, value = extra.partition("=")
        if key not in ("slots", "max_slots") or not value.isdigit() or int(value) < 1:
            raise HostfileError(f"{where}: {extra!r} is not understood; only 'slots=N' (N >= 1) may follow the host")
        if key == "slots":
            slots = int(value)
    user, _, address = parts[0].rpartition("@")
    if user and not _USER.match(user):
        raise HostfileError(f"{where}: user {user!r} is not a valid login name (letters, digits, _ . -)")
    if address.startswith("-"):
        raise HostfileError(f"{where}: host {address!r} starts with '-', which ssh would read as an option")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        if not _HOSTNAME.match(address):
            raise HostfileError(
                f"{where}: {address!r} is neither an IP address nor a DNS host name "
                "(letters, digits, '-' and '.', no spaces or shell characters)"
            ) from None
    return Host(address=address, user=user or None, slots=slots)


def read_hostfile(path: str | Path) -> list[Host]:
    """Every host of ``path``, validated; a bad line fails with its line number."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise HostfileError(f"cannot read hostfile {path}: {exc.strerror}") from None
    hosts = []
    for number, line in enumerate(lines, 1):
        content = line.split("#", 1)[0].strip()
        if content:
            hosts.append(validate_host(content, f"{path}:{number}"))
    if not hosts:
        raise HostfileError(f"hostfile {path} lists no hosts; write one host name or address per line")
    return hosts


def slot_hosts(hosts: Sequence[Host], count: int) -> list[Host]:
    """``count`` placements filling each host's slots in order, wrapping round (as mpirun does)."""
    expanded = [h for h in hosts for _ in range(h.slots)]
    if not expanded:
        raise HostfileError("no hosts to place ranks on")
    return [expanded[i % len(expanded)] for i in range(count)]


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
        from .netns import unavailable_reason

        return unavailable_reason()


@dataclass
class SshLauncher:
    """``ssh -tt host -- 'cd DIR && env K=V ... python ...'`` with every word shlex-quoted.

    ``-tt`` gives the remote command a terminal, so killing the local ssh client (the
    job's process group) hangs up the remote rank too. ``BatchMode`` never prompts.
    """

    hosts: Sequence[Host]
    workdir: str | None = None
    ssh_options: Sequence[str] = ("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new")
    name: str = "ssh"

    def address(self, slot: int) -> str:
        return slot_hosts(self.hosts, slot + 1)[slot].address

    def argv(self, slot: int, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
        host = slot_hosts(self.hosts, slot + 1)[slot]
        remote = shlex.join(["env", *_env_words(forwarded(env)), *command])
        if self.workdir:
            remote = f"cd {shlex.quote(self.workdir)} && {remote}"
        return ["ssh", "-tt", *self.ssh_options, host.target, "--", remote]

    def missing(self) -> str | None:
        return None if shutil.which("ssh") else "the ssh launcher needs an ssh client (apt-get install openssh-client)"


@dataclass
class MpiLauncher:
    """One ``mpirun -np 1 --host H`` per rank (Open MPI); env set by ``env`` on the far side, no shell."""

    hosts: Sequence[Host]
    mpirun: str = "mpirun"
    name: str = "mpi"

    def address(self, slot: int) -> str:
        return slot_hosts(self.hosts, slot + 1)[slot].address

    def argv(self, slot: int, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
        host = slot_hosts(self.hosts, slot + 1)[slot]
        return [self.mpirun, "-np", "1", "--host", host.address, "env", *_env_words(forwarded(env)), *command]

    def missing(self) -> str | None:
        return None if shutil.which(self.mpirun) else f"the mpi launcher needs {self.mpirun!r} (apt-get install openmpi-bin)"


@dataclass
class SlurmLauncher:
    """One ``srun --nodes=1 --ntasks=1 --nodelist=H`` job step per rank, inside an allocation."""

    hosts: Sequence[Host]
    srun: str = "srun"
    name: str = "slurm"

    def address(self, slot: int) -> str:
        return slot_hosts(self.hosts, slot + 1)[slot].address

    def argv(self, slot: int, command: Sequence[str], env: Mapping[str, str]) -> list[str]:
        host = slot_hosts(self.hosts, slot + 1)[slot]
        return [self.srun, "--nodes=1", "--ntasks=1", f"--nodelist={host.address}", "--kill-on-bad-exit=1",
                "env", *_env_words(forwarded(env)), *command]

    def missing(self) -> str | None:
        return None if shutil.which(self.srun) else f"the slurm launcher needs {self.srun!r} inside a Slurm allocation"


def make_launcher(name: str, hostfile: str | Path | None = None, **options: object) -> Launcher:
    """The launcher called ``name``; ssh/mpi/slurm need a hostfile, netns needs namespaces=/addresses=."""
    if name not in LAUNCHERS:
        raise ValueError(f"launcher {name!r} is not known; use one of: {', '.join(LAUNCHERS)}")
    if name == "local":
        return LocalLauncher(**options)  # type: ignore[arg-type]
    if name == "netns":
        return NetnsLauncher(**options)  # type: ignore[arg-type]
    if hostfile is None:
        raise ValueError(f"the {name} launcher needs a hostfile (--dlperf-hostfile PATH): one host per line")
    hosts = read_hostfile(hostfile)
    cls = {"ssh": SshLauncher, "mpi": MpiLauncher, "slurm": SlurmLauncher}[name]
    return cls(hosts=hosts, **options)  # type: ignore[arg-type]
