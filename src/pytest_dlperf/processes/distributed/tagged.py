"""One launch process, several ranks: a host's torchrun agent, or the world's mpirun.

Its output is split into one log per rank by the tag each line carries (torchrun's
``--log-line-prefix-template``, mpirun's ``--tag-output``), and a failure is blamed on the rank
the launcher's own report names (torchrun's "Root Cause", mpirun's "Process name").
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from typing import Mapping, Sequence

from pytest_dlperf.processes.runner import tail
from pytest_dlperf.processes.distributed.job import ENTRY_POINTS, Job, Rank, host_python
from pytest_dlperf.processes.distributed.launchers import MPI_TAG_PATTERN, TORCHRUN_TAG_PATTERN, torchrun_command

#: How many of a launch process's own last lines a failure report shows.
LAUNCHER_LINES = 16
#: How long a launch process's output may still be read after it exited, before the exit counts.
OUTPUT_DRAIN = 3.0
#: The first failure as torchrun reports it ("rank: 1 (local_rank: 0)" ... "exitcode: 17") and as
#: mpirun does ("Process name: [[5138,1],1]" ... "Exit code: 17"): which of the launch's ranks, what status.
_CULPRITS = {"torchrun": (re.compile(rb"local_rank:\s*(\d+)\)"), re.compile(rb"exitcode\s*:\s*(-?\d+)")),
             "mpi": (re.compile(rb"Process name:\s*\[\[\d+,\d+\],(\d+)\]"), re.compile(rb"Exit code:\s*(-?\d+)"))}
#: Where torchrun names the first failure. With several ranks on a host it lists the others first
#: ("Failures:": the ranks it SIGTERMed after the first one died), so the search starts here.
_ROOT_CAUSE = b"Root Cause (first observed failure):"


class TaggedLaunch:
    """One launch process (a host's torchrun, the world's mpirun) that carries several ranks.

    Its output is read line by line: a line tagged by the launcher (``kind``'s pattern, the tag's
    number indexing ``ranks``) goes, untagged, to that rank's log; the launcher's own lines (its
    messages, its failure report) are kept apart, the last few in ``untagged`` for a failure report
    (so a rank's log shows its own last lines, not the agent's traceback). The whole output is kept
    in ``log``. ``poll`` reports the
    exit only once the output is read (a result line must not be missed), at most
    :data:`OUTPUT_DRAIN` seconds later. Quacks like the ``Popen`` the watcher and clean-up use.
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], kind: str, ranks: Sequence[Rank],
                 logs: Sequence[Path], log: Path):
        self.kind, self.ranks, self.log = kind, list(ranks), log
        # a tag may start a line or, from mpirun, follow another rank's unfinished chunk
        self._tag = re.compile((TORCHRUN_TAG_PATTERN if kind == "torchrun" else MPI_TAG_PATTERN).lstrip("^").encode())
        #: The launcher's own lines (untagged), the last few: what it says about a failure.
        self.untagged: deque[str] = deque(maxlen=LAUNCHER_LINES)
        self._files = [open(path, "wb") for path in logs]
        self._own = open(log, "wb")
        self._proc = subprocess.Popen(list(argv), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self._proc.pid
        self._exited_at: float | None = None
        self._reader = threading.Thread(target=self._read, name=f"dlperf-{kind}-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Split the output by tag. A rank's chunk may end mid-line and another rank's follow on the
        same line (mpirun tags each chunk it forwards: ``[1,0]<stdout>:step 4[1,1]<stdout>:...``):
        every piece but a line's last is partial and waits in its rank's buffer for the rest."""
        assert self._proc.stdout is not None
        partial: dict[int, bytes] = {}
        try:
            for raw in iter(self._proc.stdout.readline, b""):
                self._own.write(raw)
                self._own.flush()
                pieces = self._tag.split(raw.rstrip(b"\r\n"))  # ssh -tt's terminal ends lines with CR LF
                if pieces[0] or len(pieces) == 1:
                    self.untagged.append(pieces[0].decode(errors="replace"))  # the launcher's own line
                tagged = list(zip(pieces[1::2], pieces[2::2]))
                for at, (number, text) in enumerate(tagged):
                    index = int(number)
                    if index >= len(self._files):
                        continue
                    partial[index] = partial.get(index, b"") + text
                    if at == len(tagged) - 1:
                        self._files[index].write(partial.pop(index) + b"\n")
                        self._files[index].flush()
            for index, text in partial.items():
                self._files[index].write(text + b"\n")
        finally:
            for out in [*self._files, self._own]:
                out.close()

    def report(self, rank_log: Path) -> str:
        """A rank's last output, then its launcher's own last lines (torchrun's or mpirun's failure report)."""
        own = "\n".join(self.untagged).strip()
        return tail(rank_log) + (f"\n--- last lines of {self.kind} ---\n{own}" if own else "")

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def poll(self) -> int | None:
        code = self._proc.poll()
        if code is None or not self._reader.is_alive():
            return code
        self._exited_at = self._exited_at or time.monotonic()
        return code if time.monotonic() - self._exited_at > OUTPUT_DRAIN else None

    def wait(self, timeout: float | None = None) -> int:
        code = self._proc.wait(timeout)
        self._reader.join(OUTPUT_DRAIN)
        return code

    def blame(self, rank: Rank, code: int) -> tuple[Rank, int]:
        """The rank the launcher's own failure report names, and its exit status (else ``rank``, ``code``)."""
        try:
            text = self.log.read_bytes()
        except OSError:
            return rank, code
        if self.kind == "torchrun" and _ROOT_CAUSE in text:
            text = text[text.rindex(_ROOT_CAUSE):]
        who, status = (pattern.search(text) for pattern in _CULPRITS[self.kind])
        if who and int(who.group(1)) < len(self.ranks):
            rank = self.ranks[int(who.group(1))]
        return rank, (int(status.group(1)) or code) if status else code


def launch_groups(job: Job, ranks: Sequence[Rank]) -> list[list[Rank]]:
    """The ranks each launch process starts: a torchrun per host (in order of the hosts' first
    rank), or one mpirun for the torch world, or one mpirun per ps-lite role."""
    if job.start == "mpi":  # torch: the world; MXNet: one mpirun per role (scheduler, servers, workers)
        roles: dict[str, list[Rank]] = {}
        for rank in ranks:
            roles.setdefault(rank.role, []).append(rank)
        return list(roles.values())
    groups: dict[str, list[Rank]] = {}
    for rank in ranks:
        groups.setdefault(job.launcher.address(rank.slot), []).append(rank)
    return list(groups.values())


def start_tagged(job: Job, job_id: str, envs: Mapping[Rank, dict[str, str]], logs: Mapping[Rank, Path],
                  scratch: Path, logdir: Path) -> dict[Rank, TaggedLaunch]:
    """Start the job's torchrun agents (or its mpirun); each rank finds its result path by its launch index."""
    entry = ENTRY_POINTS[job.framework]
    result = str(scratch / "worker{index}.json")  # filled in by load_rank
    groups = launch_groups(job, list(envs))
    out: dict[Rank, TaggedLaunch] = {}
    for number, ranks in enumerate(groups):
        env, python = envs[ranks[0]], host_python(job, ranks[0].slot)
        if job.start == "mpi":
            argv = job.launcher.world_argv([r.slot for r in ranks], [python, "-m", entry, "-", result],  # type: ignore[attr-defined]
                                           env, session=f"ompi-world{number}")
        else:
            address, port = env["DLPERF_RENDEZVOUS"].rsplit(":", 1)
            command = torchrun_command(python, [entry, "-", result], nnodes=len(groups), nproc=len(ranks),
                                       address=address, port=int(port), job_id=job_id, is_host=number == 0,
                                       local_address=job.launcher.address(ranks[0].slot),
                                       log_dir=str(scratch / f"torchrun{number}"))
            argv = job.launcher.argv(ranks[0].slot, command, env)
        launch = TaggedLaunch(argv, env, job.start or "", ranks, [logs[r] for r in ranks],
                              logdir / f"launch{number}.log")
        out.update((r, launch) for r in ranks)
    return out
