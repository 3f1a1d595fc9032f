"""Real launch engines across network-namespace hosts: an sshd per host, Open MPI over it, Slurm, Grid Engine.

``EngineHosts(n)`` makes ``n`` namespace hosts (:class:`~pytest_dlperf.processes.distributed.netns.NetnsCluster`)
plus a "head" namespace, the login node the launch clients (``ssh``, ``mpirun``) run in, so
every host is remote to them. Each host gets

* its own ``sshd`` (OpenSSH from Debian's ``openssh-server``), listening on the host's
  address only, with a host key and a client key made for this run (``authorized_keys``
  holds only that key); its own hostname (``unshare --uts``);
* its own CPU core: the sshd runs under ``taskset -c CORE`` and everything it starts
  inherits the mask, so one worker and two workers get the same resources per worker.
  Open MPI re-binds by default, hence ``--bind-to none`` in :meth:`launcher`.

With ``slurm=True`` a Slurm cluster (slurmctld on the head, a slurmd per host), with ``sge=True`` a Son
of Grid Engine cell (:mod:`.gridengine`: sge_qmaster on the head, an sge_execd per host) start the
ranks instead of ssh.

Hosts are addressed by IP, never by name (a name would go to the machine's resolver).
Everything is torn down on exit, on an error half-way, and at interpreter exit:
the daemons are killed and waited for, then the veths and namespaces deleted.
:func:`unavailable_reason` says why an engine cannot run here (not root, no package),
for tests to skip with.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Sequence

from pytest_dlperf.processes.distributed.gridengine import CellError, GridEngineCell
from pytest_dlperf.processes.distributed.hosts import Host
from pytest_dlperf.processes.distributed.launchers import GridEngineLauncher, MpiLauncher, SlurmLauncher, SshLauncher
from pytest_dlperf.processes.distributed.netns import HEAD_ADDRESS, PREFIX_LEN, SUBNET_PREFIX, NetnsCluster
from pytest_dlperf.processes.distributed.netns import unavailable_reason as netns_unavailable

ENGINES = ("ssh", "mpi", "slurm", "sge")
#: Debian packages per engine (``.ci/run`` installs them; ``apt-get install --no-install-recommends``).
PACKAGES = {"ssh": "openssh-server openssh-client", "mpi": "openssh-server openssh-client openmpi-bin",
            "slurm": "openssh-server openssh-client slurm-wlm munge",
            "sge": "openssh-server openssh-client gridengine-master gridengine-exec gridengine-client"}
#: Grid Engine's packages ask for the master host and cell: answered before the install (.ci/run does it).
SGE_PRESEED = ("printf '%s\\n' 'gridengine-common shared/gridenginemaster string head' "
               "'gridengine-common shared/gridenginecell string default' "
               "'gridengine-common shared/gridengineconfig boolean true' | debconf-set-selections && ")
_SSH_TOOLS = ("/usr/sbin/sshd", "ssh", "ssh-keygen", "taskset", "unshare")
TOOLS = {"ssh": _SSH_TOOLS, "mpi": (*_SSH_TOOLS, "mpirun"),
         "slurm": (*_SSH_TOOLS, "nsenter", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged",
                   "mungekey", "srun", "scontrol"),
         "sge": (*_SSH_TOOLS, "/usr/sbin/sge_qmaster", "/usr/sbin/sge_execd", "/usr/lib/gridengine/spoolinit",
                 "/usr/lib/gridengine/spooldefaults", "qconf", "qrsh", "qstat")}
#: How long slurmctld and every slurmd may take to report the nodes idle.
SLURM_READY_TIMEOUT = 30.0
#: How long a host's sshd may take to answer after it is started.
SSHD_READY_TIMEOUT = 20.0
_LIVE: set["EngineHosts"] = set()


class EngineUnavailable(RuntimeError):
    """The engine cannot be brought up here; the message is the reason (for a skip)."""


def unavailable_reason(engine: str) -> str | None:
    """Why ``engine`` (one of :data:`ENGINES`) cannot run across namespace hosts here, or None."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: use one of {', '.join(ENGINES)}")
    reason = netns_unavailable()
    if reason:
        return reason
    for tool in TOOLS[engine]:
        if shutil.which(tool) is None:
            preseed = SGE_PRESEED if engine == "sge" else ""
            return (f"the {engine} engine needs {tool!r}: {preseed}apt-get install --no-install-recommends "
                    f"{PACKAGES[engine]} (.ci/run installs it)")
    return None


def _run(argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise EngineUnavailable(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return proc


class EngineHosts:
    """``with EngineHosts(2) as e: e.launcher("ssh")``; ``e.addresses``, ``e.cores``, ``e.cluster``."""

    def __init__(self, hosts: int = 2, rate: str | None = None, cores: Sequence[int] | None = None,
                 slurm: bool = False, sge: bool = False):
        count = os.cpu_count() or 1
        self.cores = list(cores) if cores is not None else [i % count for i in range(hosts)]
        if len(self.cores) != hosts:
            raise ValueError(f"cores={self.cores} must name one core per host ({hosts})")
        self.cluster = NetnsCluster(hosts, rate=rate, head=True)
        self.addresses = self.cluster.addresses
        self.dir = Path(tempfile.mkdtemp(prefix="dlperf-engines-"))
        self.key = self.dir / "id_ed25519"
        self.sshd: list[subprocess.Popen[bytes]] = []
        #: With ``slurm=True``: munged, slurmctld (on the head node) and one slurmd per host.
        self.slurm = slurm
        self.daemons: list[subprocess.Popen[bytes]] = []
        self.slurmd: list[subprocess.Popen[bytes]] = []
        #: With ``sge=True``: a Grid Engine cell, qmaster on the head, an execd per host.
        self.sge = GridEngineCell(self.dir / "sge", HEAD_ADDRESS) if sge else None
        #: Seconds each engine's bring-up took (after the namespaces and sshds), for the reports.
        self.bring_up: dict[str, float] = {}

    # ---------------------------------------------------------------- bring-up

    def __enter__(self) -> "EngineHosts":
        _exit_on_sigterm()
        _LIVE.add(self)
        try:
            self.cluster.__enter__()
            self._keys()
            for i in range(self.cluster.hosts):
                self._start_sshd(i)
            start = time.monotonic()
            self._wait_ready()
            self.bring_up["ssh"] = time.monotonic() - start
            if self.slurm:
                start = time.monotonic()
                self._start_slurm()
                self.bring_up["slurm"] = time.monotonic() - start
            if self.sge:
                start = time.monotonic()
                self._start_sge()
                self.bring_up["sge"] = time.monotonic() - start
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _keys(self) -> None:
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dlperf-run", "-f", str(self.key)])
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dlperf-host", "-f", str(self.dir / "host_ed25519")])
        shutil.copy(f"{self.key}.pub", self.dir / "authorized_keys")
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)  # sshd's privilege-separation dir

    def _start_sshd(self, i: int) -> None:
        config = self.dir / f"sshd{i}.conf"
        config.write_text("\n".join([
            "Port 22", f"ListenAddress {self.addresses[i]}", f"HostKey {self.dir / 'host_ed25519'}",
            f"PidFile {self.dir / f'sshd{i}.pid'}", f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
            "StrictModes no", "UsePAM no", "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PrintMotd no", "UseDNS no", "MaxStartups 64", "MaxSessions 64",
            # a client that vanished (its link down) ends its session, and so its rank, within ~6 s
            "ClientAliveInterval 2", "ClientAliveCountMax 3", "LogLevel ERROR", "",
        ]), encoding="utf-8")
        log = open(self.dir / f"sshd{i}.log", "wb")
        # ip netns exec, taskset, unshare (no fork) and sh all exec: the pid is sshd's
        self.sshd.append(subprocess.Popen(
            ["ip", "netns", "exec", self.cluster.namespaces[i], "taskset", "-c", str(self.cores[i]),
             "unshare", "--uts", "--", "sh", "-c", f"hostname h{i} && exec /usr/sbin/sshd -D -e -f {config}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        log.close()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + SSHD_READY_TIMEOUT
        for i, address in enumerate(self.addresses):
            while True:
                if self.sshd[i].poll() is not None:
                    raise EngineUnavailable(f"sshd of host {address} exited ({self.sshd[i].returncode}): "
                                            f"{(self.dir / f'sshd{i}.log').read_text(errors='replace')[-400:]}")
                probe = subprocess.run([*self.head_prefix, "ssh", *self.ssh_options(), address, "true"],
                                       capture_output=True, text=True, timeout=30)
                if probe.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise EngineUnavailable(f"sshd of host {address} did not answer in {SSHD_READY_TIMEOUT:g} s: "
                                            f"{probe.stderr.strip()[-400:]}")
                time.sleep(0.1)

    def _daemon(self, argv: Sequence[str], log: str) -> subprocess.Popen[bytes]:
        with open(self.dir / log, "wb") as out:
            proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.daemons.append(proc)
        return proc

    @property
    def slurm_env(self) -> dict[str, str]:
        """What srun/scontrol need to find this cluster (its own slurm.conf)."""
        return {"SLURM_CONF": str(self.dir / "slurm.conf")}

    def _start_slurm(self) -> None:
        """One munged for all hosts (its socket on the shared /tmp), slurmctld on the head, a slurmd per host."""
        d = self.dir
        for sub in ("munge", "state", "spool", "tmp"):
            (d / sub).mkdir(mode=0o755)
        _run(["mungekey", "--create", f"--keyfile={d / 'munge' / 'munge.key'}"])
        os.chmod(d / "munge" / "munge.key", 0o600)
        socket_path = d / "munge" / "munge.socket"
        self._daemon(["/usr/sbin/munged", "--foreground", "--force", f"--socket={socket_path}",
                      f"--key-file={d / 'munge' / 'munge.key'}", f"--pid-file={d / 'munge' / 'munged.pid'}",
                      f"--log-file={d / 'munge' / 'munged.log'}", f"--seed-file={d / 'munge' / 'munged.seed'}"],
                     "munged.out")
        nodes = "\n".join(f"NodeName=h{i} NodeAddr={a} CPUs=1 State=UNKNOWN" for i, a in enumerate(self.addresses))
        (d / "slurm.conf").write_text(f"""ClusterName=dlperf
SlurmctldHost=head({self.cluster_head_address})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket_path}
CredType=cred/munge
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}/%n
TmpFS={d / 'tmp'}/%n
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d / 'slurmd-%n.pid'}
SlurmctldLogFile={d / 'slurmctld.log'}
SlurmdLogFile={d / 'slurmd-%n.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
SlurmdTimeout=10
MessageTimeout=5
KillWait=2
InactiveLimit=0
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
""", encoding="utf-8")
        for i in range(self.cluster.hosts):
            (d / "spool" / f"h{i}").mkdir()
            (d / "tmp" / f"h{i}").mkdir()
        env = dict(os.environ, **self.slurm_env)
        self._daemon([*self.head_prefix, "unshare", "--uts", "--", "sh", "-c",
                      f"hostname head && exec /usr/sbin/slurmctld -D -i -f {d / 'slurm.conf'}"], "slurmctld.out")
        for i, ns in enumerate(self.cluster.namespaces):
            # nsenter, not ip netns exec: that remounts /sys and slurmd then fails on cgroups
            self.slurmd.append(self._daemon(["nsenter", f"--net=/run/netns/{ns}", "taskset", "-c", str(self.cores[i]),
                          "unshare", "--uts", "--", "sh", "-c",
                          f"hostname h{i} && exec /usr/sbin/slurmd -D -N h{i} -f {d / 'slurm.conf'}"],
                                           f"slurmd{i}.out"))
        deadline = time.monotonic() + SLURM_READY_TIMEOUT
        while True:
            out = subprocess.run([*self.head_prefix, "sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True,
                                 text=True, env=env, timeout=30)
            states = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)
            if len(states) == self.cluster.hosts and all(s.startswith("idle") for s in states.values()):
                return
            dead = [p for p in self.daemons if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = {p.name: p.read_text(errors="replace")[-300:] for p in d.glob("*.out")}
                raise EngineUnavailable(f"the Slurm cluster did not come up (nodes: {states or out.stderr.strip()}): "
                                        f"{logs}")
            time.sleep(0.2)

    def _start_sge(self) -> None:
        assert self.sge is not None and self.cluster.head is not None
        self.sge.dir.mkdir()
        try:
            self.sge.start(self.cluster.head, self.cluster.namespaces, self.addresses, self.cores)
        except CellError as exc:
            raise EngineUnavailable(str(exc)) from exc

    @property
    def cluster_head_address(self) -> str:
        return HEAD_ADDRESS

    # ---------------------------------------------------------------- what tests use

    @property
    def head_prefix(self) -> list[str]:
        """The argv prefix that runs a command on the head (login) node."""
        return ["ip", "netns", "exec", str(self.cluster.head)]

    def ssh_options(self) -> list[str]:
        """Key of this run, no prompts, no known_hosts file; a dead host is noticed within ~6 s."""
        return ["-i", str(self.key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5",
                "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3", "-o", "IdentitiesOnly=yes"]

    def hosts(self, python: str | None = None) -> list[Host]:
        return [Host(address=a, python=python) for a in self.addresses]

    def hostfile(self, python: str | None = None) -> Path:
        """The hosts as a hostfile (``--dlperf-hostfile``), by IP."""
        path = self.dir / "hostfile"
        suffix = f" python={python}" if python else ""
        path.write_text("".join(f"{a} slots=1{suffix}\n" for a in self.addresses), encoding="utf-8")
        return path

    def launcher(self, engine: str, hosts: Sequence[Host] | None = None
                 ) -> SshLauncher | MpiLauncher | SlurmLauncher | GridEngineLauncher:
        """The ``ssh``, ``mpi``, ``slurm`` or ``sge`` launcher for these hosts, its clients on the head node."""
        hosts = list(hosts or self.hosts())
        if engine == "sge":
            if self.sge is None:
                raise ValueError("the sge launcher needs EngineHosts(..., sge=True)")
            return GridEngineLauncher(hosts=hosts, prefix=tuple(self.sge.client),
                                      nodes={a: f"h{i}" for i, a in enumerate(self.addresses)}, interface="eth0")
        if engine == "slurm":
            if not self.slurm:
                raise ValueError("the slurm launcher needs EngineHosts(..., slurm=True)")
            # --immediate: a step on a host that is gone fails in seconds instead of queueing; the
            # partition's OverSubscribe lets a liveness probe or the clean-up share a busy node
            return SlurmLauncher(hosts=hosts,
                                 prefix=(*self.head_prefix, "env", f"SLURM_CONF={self.dir / 'slurm.conf'}"),
                                 srun_options=("--immediate=10",),
                                 nodes={a: f"h{i}" for i, a in enumerate(self.addresses)}, interface="eth0")
        if engine == "ssh":
            return SshLauncher(hosts=hosts, ssh_options=tuple(self.ssh_options()), prefix=tuple(self.head_prefix),
                                interface="eth0")
        if engine == "mpi":
            agent = "ssh " + " ".join(self.ssh_options())
            subnet = f"{SUBNET_PREFIX}0/{PREFIX_LEN}"
            options = ("--allow-run-as-root", "--bind-to", "none", "--mca", "plm_rsh_agent", agent,
                       "--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet,
                       "--mca", "btl", "self,tcp")
            return MpiLauncher(hosts=hosts, mpirun_options=options, prefix=tuple(self.head_prefix), interface="eth0")
        raise ValueError(f"engine {engine!r}: use one of {', '.join(ENGINES)}")

    def _host_daemons(self, host: int) -> list[int]:
        execd = self.sge.execd[host:host + 1] if self.sge else []
        return [p.pid for p in (self.sshd[host:host + 1] + self.slurmd[host:host + 1] + execd)]

    def host_pids(self, host: int) -> list[int]:
        """Processes on host ``host`` other than its daemons (sshd, slurmd, sge_execd)."""
        out = subprocess.run(["ip", "netns", "pids", self.cluster.namespaces[host]], capture_output=True, text=True)
        daemons = self._host_daemons(host)
        return [int(p) for p in out.stdout.split() if p.isdigit() and int(p) not in daemons]

    def crash(self, host: int) -> None:
        """Host ``host`` dies: every process on it (its daemons and what they started) is SIGKILLed."""
        for pid in [*self._host_daemons(host), *self.host_pids(host)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # ---------------------------------------------------------------- teardown

    def close(self) -> None:
        """Stop every daemon and wait for it, then the namespaces (veth first), then the keys."""
        try:
            if self.sge:
                self.sge.close()
            for proc in [*reversed(self.daemons), *self.sshd]:
                if proc.poll() is None:
                    proc.terminate()
            for proc in [*reversed(self.daemons), *self.sshd]:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        finally:
            self.cluster.close()  # kills anything left inside, deletes veths then namespaces
            shutil.rmtree(self.dir, ignore_errors=True)
            _LIVE.discard(self)


def _exit_on_sigterm() -> None:
    """A SIGTERM (a CI timeout, ``timeout``) ends the interpreter without atexit handlers or ``finally``;
    where nobody handles it, make it a SystemExit so the hosts' daemons and namespaces are removed."""
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def _raise(signum: int, frame: object) -> None:
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, _raise)


@atexit.register
def _cleanup_leftovers() -> None:
    for hosts in list(_LIVE):
        hosts.close()
