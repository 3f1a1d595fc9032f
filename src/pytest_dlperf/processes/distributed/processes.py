"""A job's processes on this machine: found by the job marker in ``/proc``, killed by process group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Sequence

from pytest_dlperf.protocol import JOB_MARKER


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


def kill_groups(procs: Sequence[subprocess.Popen[bytes]], grace: float = 3.0) -> None:
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


def kill_marked(job_id: str) -> list[int]:
    survivors = job_processes(job_id)
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return survivors


def exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"crashed (exit status {code})"
