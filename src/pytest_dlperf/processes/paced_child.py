"""One persistent training child of a paired group: started with ``--paced``, then driven a round at a time.

The child is the ordinary training child (``pytest_dlperf.child.train``): it builds and warms up once,
then waits for a ``go`` line on stdin before each timed round and reports the round on stdout behind
``ROUND_PREFIX``. :mod:`.paired` drives a group of them.
"""

from __future__ import annotations

import hashlib
import json
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

from pytest_dlperf import cost
from pytest_dlperf.protocol import ERROR, PACED_FLAG, PROGRESS_PREFIX, RESULT, ROUND_PREFIX, read_result
from pytest_dlperf.result import TrainingResult
from pytest_dlperf.processes.groups import kill_groups
from pytest_dlperf.processes.runner import ScenarioFailed, _signal_reason, child_environment, tail
from pytest_dlperf.scenario import Scenario

@dataclass(frozen=True)
class Variant:
    """One side of a comparison: a scenario, and the interpreter that runs it (None: this one)."""

    scenario: Scenario
    python: str | None = None
    #: Distinguishes two variants with the same scenario label (the A/B mode's reference).
    name: str = ""
    #: The child's module; another one must end in ``pytest_dlperf.child.train.main`` (bench/ injects slowdowns so).
    module: str = "pytest_dlperf.child.train"
    #: The ``pytest_dlperf`` folder the child imports (None: this one; another revision's in A/B mode).
    package: Path | None = None

    @property
    def key(self) -> str:
        return self.name or self.scenario.label


def send_line(control: IO[bytes], line: str | None) -> None:
    """Write ``line`` to a paced process's stdin, or close it (None). A process that died meanwhile
    is not this write's to report: the wait that follows names it, with its output."""
    try:
        if line is None:
            control.close()
        else:
            control.write(line.encode())
            control.flush()
    except OSError:
        pass


def relay_rounds(stream: IO[bytes], replies: "queue.Queue[dict | None]", log: IO[bytes], name: str,
                 progress_prefix: str, on_progress: Callable[[str], None] | None) -> None:
    """Read a paced process's output to its end: each round report (``ROUND_PREFIX``) goes to
    ``replies``, every other line to ``log``, progress lines (``progress_prefix``) to ``on_progress``;
    ``None`` on ``replies`` at the end says the process exited."""
    for raw in stream:
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if line.startswith(ROUND_PREFIX):
            try:
                replies.put(json.loads(line[len(ROUND_PREFIX):]))
            except ValueError:
                pass
            continue
        log.write(raw)
        log.flush()
        if on_progress is not None and line.startswith(progress_prefix):
            on_progress(f"{name}: {line[len(progress_prefix):]}")
    replies.put(None)


def child_file_stem(key: str, index: int) -> str:
    """The name of a child's scenario, result and log files: the same length for every variant.

    The paths are the child's argv, and the length of a process's argv and environment moves
    where its stack starts, which alone can shift a CPU figure by a few percent (Mytkowicz et al.,
    "Producing wrong data without doing anything obviously wrong!", ASPLOS 2009): named after the
    label, an unchanged copy read faster than its reference (docs/evidence.md, "Verdict power").
    A digest of the label keeps every variant's argv alike."""
    return f"{hashlib.sha1(key.encode()).hexdigest()[:12]}.p{index:03d}"


class PacedChild:
    """One persistent training child: started, then driven one round at a time."""

    def __init__(self, variant: Variant, index: int, rounds: int, workdir: Path,
                 on_progress: Callable[[str], None] | None):
        self.variant = variant
        self.index = index
        self.name = f"{variant.key}#{index}"
        scenario = variant.scenario.replace(rounds=rounds)
        stem = child_file_stem(variant.key, index)
        self.scenario_path = workdir / f"{stem}.scenario.json"
        self.result_path = workdir / f"{stem}.result.json"
        self.log_path = workdir / f"{stem}.log"
        self.scenario_path.write_text(scenario.to_json(), encoding="utf-8")
        self.result_path.unlink(missing_ok=True)
        self.scenario = scenario
        self.timeout = scenario.timeout
        command = [*scenario.launch_prefix, variant.python or sys.executable, "-m", variant.module,
                   str(self.scenario_path), str(self.result_path), PACED_FLAG]
        self._log = open(self.log_path, "wb")
        self._log.write(f"# {self.name}: {' '.join(command)}\n".encode())  # which variant this file is
        self._log.flush()
        self._started: float | None = time.time()
        try:
            self.proc = subprocess.Popen(
                command, env=child_environment(scenario, package=variant.package), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self._log, start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            raise ScenarioFailed(self.name, "could not start", f"{command[0]}: {exc}", "(no output)") from None
        self.replies: queue.Queue[dict | None] = queue.Queue()
        self._progress_prefix = PROGRESS_PREFIX
        self._on_progress = on_progress
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        relay_rounds(self.proc.stdout, self.replies, self._log, self.name, self._progress_prefix, self._on_progress)

    @property
    def control(self) -> IO[bytes]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    def wait_ready(self, timeout: float) -> None:
        """Wait until the child has built its model and warmed up."""
        self._reply(timeout, f"not built and warmed up within {timeout:g} s")

    def read_round(self, timeout: float) -> dict:
        return self._reply(timeout, f"no round reported within {timeout:g} s; every child was killed")

    def _reply(self, timeout: float, timed_out: str) -> dict:
        """The child's next report; a timeout or its exit becomes a ScenarioFailed with its output."""
        try:
            reply = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise self.failure("timed out", timed_out) from None
        if reply is None:
            raise self.failure(*self._exit_reason())
        return reply

    def _exit_reason(self) -> tuple[str, str]:
        code = self.proc.wait()
        error = self._error()
        if error:
            return error["reason"], f"{error['type']}: {error['message']}"
        return "crashed", _signal_reason(code) if code < 0 else f"exited with status {code} before its round"

    def _error(self) -> dict | None:
        return read_result(self.result_path).get(ERROR)

    def finish(self, timeout: float) -> TrainingResult:
        """Wait for the child (its stdin closed) to write its result and exit."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise self.failure("timed out", f"no result {timeout:g} s after its last round") from None
        self._reader.join(timeout=5)
        payload = read_result(self.result_path)
        cost.child_reported(payload)
        if code == 0 and RESULT in payload:
            return TrainingResult.from_dict(payload[RESULT])
        raise self.failure(*self._exit_reason())

    def failure(self, reason: str, detail: str) -> ScenarioFailed:
        self._log.flush()
        traceback = (self._error() or {}).get("traceback", "")  # your step's own traceback, when it raised
        return ScenarioFailed(f"{self.name} ({self.scenario.label})", reason, detail, tail(self.log_path), traceback)

    def kill(self) -> None:
        kill_groups([self.proc], grace=1.0)
        if self._started is not None:  # once, however often it is killed
            cost.child_ran(self._started, time.time())
            self._started = None
        self._reader.join(timeout=2)
        self._log.close()
