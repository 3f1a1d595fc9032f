"""Ending a child and everything it started, by its process group.

Every child starts in its own session (``start_new_session=True``), so its pid names a process
group that holds its loader workers, ranks and servers too; :func:`kill_groups` ends all of them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any, Iterable

#: How long a group gets to exit on SIGTERM before what is left of it is SIGKILLed.
KILL_GRACE_SECONDS = 5.0
#: How long to wait for SIGKILLed processes to be gone (a GPU process may take seconds to release
#: its device); past that, a process stuck in the kernel is left behind rather than hanging the caller.
REAP_SECONDS = 5.0
POLL_SECONDS = 0.05


def kill_groups(procs: Iterable[subprocess.Popen[Any]], grace: float = KILL_GRACE_SECONDS) -> None:
    """SIGTERM the group each of ``procs`` leads, wait up to ``grace`` s for every process in them to
    be gone, SIGKILL whatever is left and reap the leaders. A group already gone is skipped."""
    terminated = [p for p in procs if _signal_group(p, signal.SIGTERM)]
    left = _wait_gone(terminated, grace)
    killed = [p for p in left if _signal_group(p, signal.SIGKILL)]
    _wait_gone(killed, REAP_SECONDS)


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> bool:
    """Send ``sig`` (0: only ask) to the group ``proc`` leads; False when it has nobody we may signal."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _wait_gone(procs: list[subprocess.Popen[Any]], timeout: float) -> list[subprocess.Popen[Any]]:
    """Those of ``procs`` whose group still has a live process after ``timeout`` s (none: at once)."""
    deadline = time.monotonic() + timeout
    while True:
        procs = [p for p in procs if _group_alive(p)]
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(POLL_SECONDS)


def _group_alive(proc: subprocess.Popen[Any]) -> bool:
    # poll() reaps an exited leader: unreaped, it is a zombie whose pid keeps naming its group
    if proc.poll() is None:
        return True
    return _signal_group(proc, 0) and _has_live_member(proc.pid)


def _has_live_member(pgid: int) -> bool:
    """Whether a process of the group is not a zombie: orphaned zombies wait for init to reap them,
    which may take seconds or (pytest as a container's pid 1) forever, yet hold nothing any more."""
    seen = False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no /proc: trust kill(0)
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                state, _, pgrp = fh.read().rsplit(b")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue
        if int(pgrp) == pgid:
            if state not in (b"Z", b"X"):
                return True
            seen = True
    return not seen  # kill(0) found members this /proc does not show (another pid namespace): alive
