"""A job's processes on this machine, found (and killed) by the job marker in ``/proc``."""

from __future__ import annotations

import os
import signal
from pathlib import Path

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
