"""Ranks on other hosts (ssh, MPI, Slurm): checked before the job, cleaned up after it.

Before: every host's interpreter must import the entry point, and the ports come from the host
that binds them (:class:`RemotePorts`, or :class:`HostsNotReady` naming each host that is not
ready). After: :func:`reap_remote` kills whatever carries the job's marker there and removes its
scratch folder. :func:`unreachable` tells a lost host from a failed rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Mapping, Sequence

from pytest_dlperf.processes.distributed.job import ENTRY_POINTS, PACKAGE_ROOT, Job, Rank, host_python
from pytest_dlperf.processes.distributed.launchers import REMOTE_SCRATCH
from pytest_dlperf.processes.groups import kill_groups
from pytest_dlperf.protocol import JOB_MARKER

#: How long the up-front check and the clean-up on each remote host may take.
REMOTE_CALL_TIMEOUT = 60.0

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


def _remote_env(job_id: str | None = None) -> dict[str, str]:
    """What a remote call runs with; ``job_id`` marks it as the job's (an mpirun then gets its own session
    folder under the job's scratch, so the probes of two hosts starting at once do not race on
    Open MPI's shared one). The reaper goes unmarked: it kills what carries the marker."""
    marker = {JOB_MARKER: job_id} if job_id else {}
    return dict(os.environ, **marker,
                PYTHONPATH=os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")) if p))


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
            kill_groups([proc], grace=1.0)
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
        argvs = {host: job.launcher.argv(slot, [host_python(job, slot), "-c", PROBE, entry, str(count)], env)
                 for host, slot in slots.items()}
        self._free: dict[str, list[int]] = {}
        problems = []
        for host, (code, text) in _remote_calls(job, argvs, env).items():
            python = host_python(job, slots[host])
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


def unreachable(job: Job, ranks: Sequence[Rank]) -> set[str]:
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
    env = _remote_env()
    scratch = str(Path(REMOTE_SCRATCH) / job_id)
    argvs = {host: job.launcher.argv(slot, [host_python(job, slot), "-c", REAPER, job_id, scratch], env)
             for host, slot in slots.items()}
    return [*(f"host {host} (it no longer answered)" for host in skip),
            *(f"host {host} ({text.strip()[-200:]})"
              for host, (code, text) in _remote_calls(job, argvs, env, timeout=REAP_TIMEOUT).items()
              if code != 0 or "[dlperf] reaped" not in text)]
