"""A Son of Grid Engine cell of this run's own: sge_qmaster on the head namespace, an sge_execd per host.

Debian's ``gridengine-master``/``-exec``/``-client`` install the binaries and a cell of their own
(``/var/lib/gridengine/default``), which is left alone: each run makes its own ``SGE_ROOT`` under
its temporary folder (``bin``, ``lib``, ``utilbin``, ``util`` linked to the installed ones, a
``default`` cell with its own bootstrap and Berkeley DB spool), so nothing outlives the run.

Grid Engine names every host and checks that a client's address resolves back to the name it
gives itself ("client IP resolved to host name localhost. This is not identical to clients host
name vm"). Each namespace therefore gets its own name (``unshare --uts``: ``head``, ``h0``,
``h1``...) and its own ``/etc/hosts`` (``/etc/netns/NS/hosts``, which ``ip netns exec``
bind-mounts over ``/etc/hosts`` for what it starts) mapping every name to its address; the
clients (``qconf``, ``qrsh``) run on the head under the head's name. The cell's configuration
cuts the defaults that assume a real site: root may run jobs (``min_uid 0``), an execd silent for
10 s is lost (``max_unheard``, 5 min by default), loads are reported every 2 s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Sequence

SGE_LIB = Path("/usr/lib/gridengine")
SGE_INSTALLED_ROOT = Path("/var/lib/gridengine")
DEFAULT_CONFIGURATION = Path("/usr/share/gridengine/default-configuration")
#: The parallel environment the queue offers (one slot per host, as the hostfile's slots=1).
PE_NAME = "dlperf"
#: How long qmaster and every execd may take until both queue instances take jobs.
SGE_READY_TIMEOUT = 30.0
_CONFIGURATION = {
    "min_uid": "0", "min_gid": "0",  # the run is root's; Debian's default refuses uids below 1000
    "max_unheard": "00:00:10", "load_report_time": "00:00:02",
    "mailer": "/bin/true", "administrator_mail": "none",
    "reporting_params": "accounting=false reporting=false flush_time=00:00:15 joblog=false sharelog=00:00:00",
}
_QUEUE = """qname all.q
hostlist {hosts}
seq_no 0
load_thresholds NONE
suspend_thresholds NONE
nsuspend 1
suspend_interval 00:05:00
priority 0
min_cpu_interval 00:05:00
processors UNDEFINED
qtype BATCH INTERACTIVE
ckpt_list NONE
pe_list {pe}
rerun FALSE
slots 8
tmpdir /tmp
shell /bin/sh
prolog NONE
epilog NONE
shell_start_mode unix_behavior
starter_method NONE
suspend_method NONE
resume_method NONE
terminate_method NONE
notify 00:00:01
owner_list NONE
user_lists NONE
xuser_lists NONE
subordinate_list NONE
complex_values NONE
projects NONE
xprojects NONE
calendar NONE
initial_state default
s_rt INFINITY
h_rt INFINITY
s_cpu INFINITY
h_cpu INFINITY
s_fsize INFINITY
h_fsize INFINITY
s_data INFINITY
h_data INFINITY
s_stack INFINITY
h_stack INFINITY
s_core INFINITY
h_core INFINITY
s_rss INFINITY
h_rss INFINITY
s_vmem INFINITY
h_vmem INFINITY
"""
_PE = f"""pe_name {PE_NAME}
slots 999
user_lists NONE
xuser_lists NONE
start_proc_args NONE
stop_proc_args NONE
allocation_rule 1
control_slaves TRUE
job_is_first_task FALSE
urgency_slots min
accounting_summary FALSE
qsort_args NONE
"""


class CellError(RuntimeError):
    """A step of the cell's bring-up failed; the message holds the command and its output."""


def named(namespace: str, name: str) -> list[str]:
    """The argv prefix that runs a command in ``namespace`` under the hostname ``name``."""
    return ["ip", "netns", "exec", namespace, "unshare", "--uts", "--", "sh", "-c",
            f'hostname {name} && exec "$@"', "sh"]


class GridEngineCell:
    """``cell.start(head_ns, namespaces, addresses, cores)``; ``cell.env``, ``cell.client``, ``cell.close()``."""

    def __init__(self, folder: Path, head_address: str):
        self.dir = folder
        self.root = folder / "root"
        self.head_address = head_address
        self.env = {"SGE_ROOT": str(self.root), "SGE_CELL": "default"}
        self.qmaster: subprocess.Popen[bytes] | None = None
        self.execd: list[subprocess.Popen[bytes]] = []
        self._etc: list[Path] = []
        self.head_ns = ""

    @property
    def client(self) -> list[str]:
        """The argv prefix of a Grid Engine client on the head (``qconf``, ``qrsh``), with the cell's env."""
        return [*named(self.head_ns, "head"), "env", *(f"{k}={v}" for k, v in self.env.items())]

    def _run(self, argv: Sequence[str], timeout: float = 30) -> str:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, **self.env))
        if proc.returncode != 0:
            raise CellError(f"{' '.join(argv)} failed ({proc.returncode}): "
                            f"{(proc.stdout + proc.stderr).strip()[-400:]}")
        return proc.stdout

    def _make_cell(self) -> None:
        common = self.root / "default" / "common"
        common.mkdir(parents=True)
        for sub in ("bin", "lib", "utilbin", "util"):
            os.symlink(SGE_INSTALLED_ROOT / sub, self.root / sub)
        for sub in ("spooldb", "qmaster", "execd"):
            (self.dir / sub).mkdir()
        (common / "bootstrap").write_text(
            "admin_user none\ndefault_domain none\nignore_fqdn true\nspooling_method berkeleydb\n"
            f"spooling_lib libspoolb\nspooling_params {self.dir / 'spooldb'}\nbinary_path /usr/sbin\n"
            f"qmaster_spool_dir {self.dir / 'qmaster'}\nsecurity_mode none\nlistener_threads 2\n"
            "worker_threads 2\nscheduler_threads 1\n", encoding="utf-8")
        (common / "act_qmaster").write_text("head\n", encoding="utf-8")
        conf = DEFAULT_CONFIGURATION.read_text(encoding="utf-8")
        for key, value in {**_CONFIGURATION, "execd_spool_dir": str(self.dir / "execd")}.items():
            conf = re.sub(rf"^{key}\s.*$", f"{key} {value}", conf, flags=re.M)
        (self.dir / "configuration").write_text(conf, encoding="utf-8")
        resources = SGE_INSTALLED_ROOT / "util" / "resources"
        # what Debian's init_cluster does for its own cell, for this one
        self._run([str(SGE_LIB / "spoolinit"), "berkeleydb", "libspoolb", str(self.dir / "spooldb"), "init"])
        self._run([str(SGE_LIB / "spooldefaults"), "configuration", str(self.dir / "configuration")])
        self._run([str(SGE_LIB / "spooldefaults"), "complexes", str(resources / "centry")])
        self._run([str(SGE_LIB / "spooldefaults"), "usersets", str(resources / "usersets")])
        self._run([str(SGE_LIB / "spooldefaults"), "managers", "root"])

    def _name_hosts(self, namespaces: Sequence[str], addresses: Sequence[str]) -> None:
        hosts = "127.0.0.1 localhost\n" + f"{self.head_address} head\n" + "".join(
            f"{a} h{i}\n" for i, a in enumerate(addresses))
        for ns in [self.head_ns, *namespaces]:
            folder = Path("/etc/netns") / ns
            folder.mkdir(parents=True, exist_ok=True)
            self._etc.append(folder)
            (folder / "hosts").write_text(hosts, encoding="utf-8")

    def _daemon(self, argv: Sequence[str], log: str) -> subprocess.Popen[bytes]:
        with open(self.dir / log, "wb") as out:
            # SGE_ND: stay in the foreground, so the pid is the daemon's and close() can wait for it
            return subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=dict(os.environ, **self.env, SGE_ND="1"))

    def start(self, head_ns: str, namespaces: Sequence[str], addresses: Sequence[str], cores: Sequence[int]) -> None:
        self.head_ns = head_ns
        self._make_cell()
        self._name_hosts(namespaces, addresses)
        self.qmaster = self._daemon([*named(head_ns, "head"), "/usr/sbin/sge_qmaster"], "qmaster.out")
        deadline = time.monotonic() + SGE_READY_TIMEOUT
        while True:  # qmaster answers once its spool is read (~1 s)
            probe = subprocess.run([*self.client, "qconf", "-sh"], capture_output=True, text=True, timeout=30)
            if probe.returncode == 0:
                break
            self._check_alive(deadline, f"qmaster did not answer: {probe.stderr.strip()[-300:]}")
            time.sleep(0.2)
        names = ",".join(f"h{i}" for i in range(len(namespaces)))
        self._run([*self.client, "qconf", "-ah", names])  # an execd on an admin host joins as an exec host
        self._run([*self.client, "qconf", "-as", "head"])  # the head submits (qrsh)
        (self.dir / "pe").write_text(_PE, encoding="utf-8")
        (self.dir / "queue").write_text(_QUEUE.format(hosts=" ".join(f"h{i}" for i in range(len(namespaces))),
                                                      pe=PE_NAME), encoding="utf-8")
        self._run([*self.client, "qconf", "-Ap", str(self.dir / "pe")])
        self._run([*self.client, "qconf", "-Aq", str(self.dir / "queue")])
        for i, ns in enumerate(namespaces):
            # taskset: the execd's shepherds and so the ranks inherit the host's core
            self.execd.append(self._daemon([*named(ns, f"h{i}")[:4], "taskset", "-c", str(cores[i]),
                                            *named(ns, f"h{i}")[4:], "/usr/sbin/sge_execd"], f"execd{i}.out"))
        while True:
            ready = self.ready_hosts()
            if len(ready) == len(namespaces):
                return
            self._check_alive(deadline, f"the execds did not report in (queue instances ready: {ready})")
            time.sleep(0.2)

    def ready_hosts(self) -> list[str]:
        """The hosts whose queue instance takes jobs (has reported its load, no alarm or error state)."""
        out = subprocess.run([*self.client, "qstat", "-f", "-q", "all.q"], capture_output=True, text=True,
                             timeout=30).stdout
        ready = []
        for line in out.splitlines():
            words = line.split()
            # all.q@h0  BIP  0/0/8  0.01  lx-amd64  [states]
            if words and words[0].startswith("all.q@") and len(words) == 5 and words[3] != "-NA-":
                ready.append(words[0].split("@", 1)[1])
        return ready

    def _check_alive(self, deadline: float, what: str) -> None:
        dead = [p for p in [self.qmaster, *self.execd] if p is not None and p.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = {p.name: p.read_text(errors="replace")[-300:] for p in self.dir.glob("*.out")}
            raise CellError(f"the Grid Engine cell did not come up ({what}): {logs}")

    @property
    def daemons(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in [*self.execd, self.qmaster] if p is not None]

    def close(self) -> None:
        """Stop the execds and qmaster, then remove the hosts files. qmaster takes ~9 s to exit on SIGTERM;
        its spool is this run's and is deleted after, so after a short wait it is killed."""
        try:
            for proc in self.daemons:
                if proc.poll() is None:
                    proc.terminate()
            for proc in self.daemons:
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        finally:
            for folder in self._etc:
                shutil.rmtree(folder, ignore_errors=True)
            if self._etc:
                try:
                    self._etc[0].parent.rmdir()  # /etc/netns, if nothing else uses it
                except OSError:
                    pass
            self._etc.clear()
