"""What passes between the parent and a rank: the job marker, the config variable, the lines a rank prints.

Both sides import this module (standard library only). A rank prints a heartbeat line
(:data:`HEARTBEAT`) entering each step and its payload as one :data:`RESULT_LINE` (the launcher
brings its output back: no shared filesystem); the parent reads them with :func:`last_step`
(who is behind in a hung job) and :func:`read_rank_result`. The job's config reaches the rank
in :data:`CONFIG_ENV`, and every process of the job carries :data:`JOB_MARKER` in its environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

JOB_MARKER = "DLPERF_JOB"
HEARTBEAT = "[dlperf] step "
#: The rank's payload comes back through the launcher's output on this line (no shared filesystem).
RESULT_LINE = "[dlperf] result "
#: The job's config goes to the ranks in this variable (``python -m ENTRY - RESULT``).
CONFIG_ENV = "DLPERF_JOB_CONFIG"


def last_step(path: Path) -> int:
    """The last step a rank logged entering (-1: none yet)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return -1
    steps = [line[len(HEARTBEAT):].split()[0] for line in text.splitlines() if line.startswith(HEARTBEAT)]
    return int(steps[-1]) if steps and steps[-1].isdigit() else -1


def read_rank_result(log: Path, path: Path | None) -> dict[str, Any] | None:
    """The rank's payload: its last result line in the output the launcher brought back, else its file."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith(RESULT_LINE):
            try:
                return json.loads(line[len(RESULT_LINE):])
            except ValueError:
                break
    if path is None:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
