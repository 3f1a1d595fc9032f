"""A measuring child ends with the process that started it.

The runner starts every child in its own session (so a hang can be killed as a group),
which also means a signal to pytest never reaches it: when pytest is killed (SIGKILL,
or SIGTERM, for which Python runs no ``finally``), its ``finally: kill`` never runs and a
child warming up a model keeps a CPU or a GPU busy for minutes. So the child asks the
kernel for SIGKILL when its parent dies (Linux ``PR_SET_PDEATHSIG``), and exits at once if
the parent is already gone (it may die between the fork and that request).
``PARENT_PID`` names the parent; a child started some other way (by hand, by a launcher
on another host) has none and is left alone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PARENT_PID = "DLPERF_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def parent_environment() -> dict[str, str]:
    """What a parent puts in a child's environment so the child can tie its life to it."""
    return {PARENT_PID: str(os.getpid())}


def die_with_parent() -> bool:
    """In a child: be killed when the parent named in the environment dies. True when armed."""
    parent = os.environ.get(PARENT_PID, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    try:
        os.kill(int(parent), 0)
    except ProcessLookupError:  # the parent died before the request: nothing would ever signal us
        os._exit(1)
    except PermissionError:
        pass  # it exists
    return True
