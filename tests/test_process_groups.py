"""The one process-group killer: SIGTERM, a grace that ends early once the groups are gone, SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest

from pytest_dlperf.processes import groups
from pytest_dlperf.processes.groups import kill_groups

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX"),
              pytest.mark.serial]  # kills timed against a grace of tenths of a second

SLEEP = "print(flush=True); import time; time.sleep(60)"  # says it is up, then waits to be killed
IGNORE_TERM = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
#: A leader that starts a SIGTERM-ignoring grandchild in its group, says it is up and the grandchild's pid.
WITH_GRANDCHILD = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {IGNORE_TERM + SLEEP!r}],
                         stdout=subprocess.PIPE)
child.stdout.readline()
print(flush=True)
print(child.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Leaders started by a test; their groups are SIGKILLed afterwards whatever the test did."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _start(started: list[subprocess.Popen[bytes]], code: str) -> subprocess.Popen[bytes]:
    """A ``python -c CODE`` leading its own group, once it has printed its first line."""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    started.append(proc)
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (its new parent, init, reaps it when it gets to it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return state in ("Z", "X")


def test_group_that_ignores_sigterm_is_sigkilled_after_the_grace(started: list) -> None:
    proc = _start(started, IGNORE_TERM + SLEEP)
    begin = time.monotonic()
    kill_groups([proc], grace=0.5)
    assert time.monotonic() - begin >= 0.5
    assert proc.returncode == -signal.SIGKILL  # reaped by the killer


@pytest.mark.parametrize("leader", ["running", "exited"])
def test_group_that_exits_returns_well_before_the_grace(started: list, leader: str) -> None:
    """An unreaped leader is a zombie whose pid still names a group; it must not count as alive."""
    proc = _start(started, SLEEP if leader == "running" else "print()")
    if leader == "exited":
        deadline = time.monotonic() + 5
        while not _gone(proc.pid) and time.monotonic() < deadline:  # a zombie now, which nobody reaped
            time.sleep(0.01)
        assert proc.returncode is None
    begin = time.monotonic()
    kill_groups([proc], grace=5.0)
    assert time.monotonic() - begin < 2.5
    assert proc.returncode == (-signal.SIGTERM if leader == "running" else 0)


@pytest.mark.parametrize("leader", ["running", "reaped"])
def test_grandchild_that_survives_its_leader_is_killed(started: list, leader: str) -> None:
    proc = _start(started, WITH_GRANDCHILD)
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    if leader == "reaped":  # the leader is gone and waited for; only its grandchild holds the group
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    kill_groups([proc], grace=0.5)
    deadline = time.monotonic() + 2
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _gone(grandchild), "the grandchild outlived the kill"
    assert proc.returncode is not None


def test_group_already_gone_does_not_raise(started: list) -> None:
    proc = _start(started, "print()")
    proc.wait()
    begin = time.monotonic()
    kill_groups([proc, proc], grace=5.0)
    kill_groups([], grace=5.0)
    assert time.monotonic() - begin < 1.0


def test_group_it_may_not_signal_does_not_raise(started: list, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _start(started, SLEEP)

    def refuse(pgid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(groups, "os", SimpleNamespace(killpg=refuse, listdir=os.listdir))
    begin = time.monotonic()
    kill_groups([proc], grace=5.0)
    assert time.monotonic() - begin < 1.0
