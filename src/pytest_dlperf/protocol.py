"""What passes between the parent and a measuring child: arguments, lines, exit codes, result files.

Both sides import this module (standard library and the shared atomic writer only), so each
word of the conversation is defined once.

A training or loader child (``python -m MODULE SCENARIO.json RESULT.json [--paced]``) prints
progress lines behind :data:`PROGRESS_PREFIX`, and writes ``{"result": ...}`` or
``{"error": {"reason", "type", "message"[, "traceback"]}}`` to its result file
(:func:`write_result`, :func:`read_result`), exiting with :data:`EXIT_ERROR` after an error; beside
either, under :data:`PHASES`, the wall-clock spans of its phases (:mod:`pytest_dlperf.child.phases`).
Started with :data:`PACED_FLAG`, it reports ``{"ready": true}`` and each timed round behind
:data:`ROUND_PREFIX` and waits for a :data:`GO` line on stdin before each round; the parent
closes stdin after the last.

A distributed rank prints a heartbeat line (:data:`HEARTBEAT`) entering each step and its payload
as one :data:`RESULT_LINE` (the launcher brings its output back: no shared filesystem); the parent
reads them with :func:`last_step` (who is behind in a hung job) and :func:`read_rank_result`. The
job's config reaches the rank in :data:`CONFIG_ENV`, and every process of the job carries
:data:`JOB_MARKER` in its environment. A paced rank takes its rounds as a paced child does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pytest_dlperf.atomic import write_atomically

#: A child's progress lines (the parent shows them while it waits).
PROGRESS_PREFIX = "[dlperf] "
#: A paced child's ``{"ready": true}`` and per-round reports.
ROUND_PREFIX = "[dlperf-round] "
#: The argument that makes a child paced: one timed round per :data:`GO` line on its stdin.
PACED_FLAG = "--paced"
GO = "go\n"
#: A child's exit status after it wrote an error to its result file.
EXIT_ERROR = 3
#: The keys of a child's result file: its TrainingResult as a dict, or what went wrong.
RESULT, ERROR = "result", "error"
#: The error reason of an alternating child whose loop asked for a trainer's callback: the parent then
#: compares the two revisions in process pairs (a trainer's loop does not share its process).
TRAINER_LOOP = "a trainer's loop"
#: The error reason of an alternating child whose reference revision has no module or function the
#: candidate's step= or loop= names: new in the candidate, so the parent runs the candidate alone.
NOT_IN_REFERENCE = "not in the reference"
#: The key of a result file's phase spans: ``{phase: [[start, end], ...]}``, wall-clock seconds
#: (:mod:`pytest_dlperf.child.phases`). The phases:
PHASES = "phases"
#: Importing the framework (the core module's imports).
IMPORT = "import"
#: Model, data and optimizer construction, the framework's own setup included.
BUILD = "build"
#: A core that imports its framework while it builds (MXNet, whose threads are set by the environment
#: that ``libmxnet`` reads when it loads), and the loader-only child: the two cannot be told apart.
IMPORT_BUILD = "import+build"
#: Untimed steps: the scenario's warm-up, and a paced child's re-warm-up before its first round.
WARMUP = "warmup"
#: A paced child waiting for the group: before its first round (others build) and after its last.
WAIT = "wait"
#: The timed rounds (a paced child's waits between its rounds included: the others' rounds fill them).
MEASURE = "measure"
#: The rounds counted under Valgrind (``--dlperf-measure=instructions``).
COUNT = "count"
#: After the rounds: evaluation on real data, describing the framework, writing the result.
FINISH = "finish"


def write_result(path: str | os.PathLike[str], payload: dict[str, Any]) -> None:
    """A child's result file (``{RESULT: ...}`` or ``{ERROR: ...}``), written atomically."""
    write_atomically(path, json.dumps(payload))


def read_result(path: Path) -> dict[str, Any]:
    """A child's result file; empty when it wrote none or it cannot be read."""
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return payload if isinstance(payload, dict) else {}


#: Every process of a distributed job carries this variable, so its processes can be found and killed.
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
