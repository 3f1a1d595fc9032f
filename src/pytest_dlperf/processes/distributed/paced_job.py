"""Distributed jobs as paired variants: a 1-worker and a 2-worker job take timed rounds in turn.

Weak-scaling efficiency measured as two jobs run one after the other carries the machine's
drift between them (docs/evidence.md, "Data-parallel scaling"). Run side by side, round by round, the
jobs share it, like the paired runner's variants (:mod:`pytest_dlperf.processes.paired`): each job
starts all its ranks, builds and warms up once, then takes one timed round each time the
parent asks, in the same balanced ABBA order, by the same driver (:func:`pytest_dlperf.processes.paired.drive`).
Pair ``i``'s efficiency is the N-worker job's per-worker throughput in its round over the
1-worker job's throughput in the same pair; :func:`pytest_dlperf.judging.stats.paired_ratio`
gives the estimate and its interval.

Pacing, rank side (:class:`~pytest_dlperf.child.rank.RankPacer`, in the rank's module,
installed by the core when the job's config has ``"paced": true``): rank 0 waits for the
parent's ``go`` on its stdin before each timed round and reports the round on its stdout (the
training child's protocol: :class:`pytest_dlperf.child.measure.StdinPacer`, ``ROUND_PREFIX`` lines).
Every rank then enters a barrier of the job's process group, and only after it starts its clock. Why a barrier
rather than letting the first all-reduce of the round hold the other ranks: a rank that is
not paced runs its next round's first forward and backward (and, after its last round,
writes its parameters) while the *other* job is being timed, which slows that job and gives
its own first step a head start. In the barrier the ranks idle (gloo waits on a condition
variable), and the round starts on every rank within the barrier's latency. The job's
round throughput is rank 0's timing of the synchronized steps: per worker, since a step's
all-reduce holds every rank to the slowest. After its last round rank 0 waits until the
parent closes its stdin (every round of the group taken), then the ranks meet in a barrier
once more, so no rank's evaluation or parameter dump overlaps a round of the other job.

Parent side (:class:`PacedJob`): the ranks are started as :func:`pytest_dlperf.processes.distributed.run_job`
starts them (rendezvous environment, reserved ports, job marker, one log per rank), except that
rank 0's stdin and stdout are pipes; a thread copies its output to its log and takes the round
reports out. It is a :class:`pytest_dlperf.processes.paired.PacedParty`, so the paired driver
paces a job like a training child. While waiting for a round it watches
every rank: the first rank seen to exit (with any status, before the job's finish) fails the
group with :class:`~pytest_dlperf.processes.distributed.JobFailed` naming it and carrying its output;
a round that does not come within the job's timeout names the rank with the least progress
(its heartbeats), as ``run_job`` does. Whatever happens, every process group of both jobs
is killed, and ``/proc`` is scanned for each job's marker.

Launchers: ``local`` and ``netns`` (``ip netns exec`` keeps the pipes). Remote launchers
(ssh, MPI, Slurm) are refused: rank 0's stdin would travel through the launcher, and
``mpirun``/``srun`` give stdin to rank 0 only by their own options. Frameworks: torch
(``cores/torch_ddp.py``) only; TensorFlow's and MXNet's entry points do not install the
pacer yet, and a paced job of theirs is refused rather than left waiting for a ``ready``.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import secrets
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence

from pytest_dlperf.processes.paced_child import relay_rounds
from pytest_dlperf.judging.stats import PairedRatio
from pytest_dlperf.processes.paired import Rounds, check_group, drive
from pytest_dlperf.processes.runner import tail
from pytest_dlperf.processes.distributed.job import ENTRY_POINTS, Job, JobFailed, JobResult, Rank, host_python
from pytest_dlperf.processes.distributed.processes import exit_reason, kill_marked
from pytest_dlperf.processes.groups import kill_groups
from pytest_dlperf.protocol import CONFIG_ENV, PROGRESS_PREFIX, last_step, read_rank_result
from pytest_dlperf.child.rank import PACED
from pytest_dlperf.processes.distributed.rendezvous import PortReservation, rank_environments, rendezvous_of
from pytest_dlperf.processes.distributed.results import charge_cost

#: The entry points that install :class:`~.rank.RankPacer` when the config says ``paced``.
PACED_FRAMEWORKS = ("torch", "tensorflow", "mxnet")
#: Launchers whose ranks' stdin/stdout reach this process as pipes.
PACED_LAUNCHERS = ("local", "netns")
#: How often the parent looks at every rank while it waits for a round.
POLL_SECONDS = 0.02


class PacedJob:
    """One distributed job, started paced, then driven one round at a time
    (:class:`pytest_dlperf.processes.paired.PacedParty`)."""

    def __init__(self, job: Job, workdir: Path, rounds: int,
                 on_progress: Callable[[str], None] | None = None):
        problem = paced_problem(job)
        if problem:
            raise ValueError(problem)
        # Torch ranks start directly with the rendezvous environment ("env"), whatever the default start:
        # rank 0's stdin is the parent's pipe, which a torchrun agent does not pass on to its ranks.
        if job.framework == "torch":
            job = dataclasses.replace(job, start="env")
        self.job = job
        self.config = paced_config(job.config, rounds)
        self.timeout = job.timeout
        self.job_id = f"{job.label}-{secrets.token_hex(4)}"
        self.name = job.label
        self.logdir = Path(workdir) / self.job_id
        self.logdir.mkdir(parents=True, exist_ok=True)
        (self.logdir / "config.json").write_text(json.dumps(self.config), encoding="utf-8")
        self._on_progress = on_progress
        self._ports = PortReservation()
        self.procs: dict[Rank, subprocess.Popen[bytes]] = {}
        self.logs: dict[Rank, Path] = {}
        self._results: dict[Rank, Path] = {}
        self._exited: list[Rank] = []  # ranks in the order their exit was first seen
        self._finishing = False
        self._killed = False
        self.replies: queue.Queue[dict | None] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._log0: IO[bytes] | None = None
        self._start, self._started = time.perf_counter(), time.time()
        self.envs: dict[Rank, dict[str, str]] = {}
        try:
            self._launch()
        except BaseException:
            self.kill()
            raise

    def _launch(self) -> None:
        job = self.job
        self.envs = rank_environments(job, self.job_id, self._ports)
        entry = ENTRY_POINTS[job.framework]
        for rank, env in self.envs.items():
            self.logs[rank] = self.logdir / f"{rank.file_stem}.log"
            self._results[rank] = self.logdir / f"{rank.file_stem}.json"
            env[CONFIG_ENV] = json.dumps(self.config)
            argv = job.launcher.argv(rank.slot, [host_python(job, rank.slot), "-m", entry, "-",
                                                 str(self._results[rank])], env)
            if rank == self._paced_rank:  # its stdin takes ``go``, its stdout gives the rounds
                self._log0 = open(self.logs[rank], "wb")
                self.procs[rank] = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                    stderr=subprocess.STDOUT, start_new_session=True)
                self._reader = threading.Thread(target=self._read, args=(self.procs[rank], self._log0), daemon=True)
                self._reader.start()
            else:
                with open(self.logs[rank], "wb") as log:
                    self.procs[rank] = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                        stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def _paced_rank(self) -> Rank:
        """The first worker as launched (an MXNet job's scheduler and servers are index 0 of their roles too)."""
        return Rank("worker", 0, 0)

    @property
    def rank0(self) -> Rank:
        return next(r for r in self.procs if r == self._paced_rank)

    def _read(self, proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        assert proc.stdout is not None
        relay_rounds(proc.stdout, self.replies, log, self.name, PROGRESS_PREFIX, self._on_progress_rounds)

    def _on_progress_rounds(self, text: str) -> None:
        """Only rank 0's round lines are progress (its step heartbeats are not)."""
        if self._on_progress is not None and text.startswith(f"{self.name}: round "):
            self._on_progress(text)

    # -- the PacedParty interface

    @property
    def control(self) -> IO[bytes]:
        stdin = self.procs[self.rank0].stdin
        assert stdin is not None
        return stdin

    def wait_ready(self, timeout: float) -> None:
        """Wait until rank 0 has built its model and warmed up (the others are held by the warm-up's all-reduces)."""
        self._reply(timeout, f"not built and warmed up within {timeout:g} s")

    def read_round(self, timeout: float) -> dict:
        return self._reply(timeout, f"no round reported within {timeout:g} s")

    def finish(self, timeout: float) -> JobResult:
        """Wait (rank 0's stdin closed) until every rank has exited 0; their payloads as a JobResult."""
        self._finishing = True
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in self.procs.values()):
            self._check()
            if time.monotonic() > deadline:
                raise self._hung(f"no result {timeout:g} s after its last round")
            time.sleep(POLL_SECONDS)
        self._check()
        wall = time.perf_counter() - self._start
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._log0 is not None:
            self._log0.flush()
        payloads = []
        for rank in [r for r in self.procs if r.role == "worker"]:  # a scheduler and servers write none
            payload = read_rank_result(self.logs[rank], self._results[rank])
            if payload is None:
                raise self._failed(rank, "exited 0 but wrote no result")
            payloads.append(payload)
        return JobResult(self.job_id, self.job.label, charge_cost(len(self.procs), self._started, payloads), wall,
                         self.logdir, rendezvous_of(self.envs))

    def kill(self) -> None:
        """Every rank's process group, then anything carrying the job's marker; the ports go back."""
        if self._killed:
            return
        self._killed = True
        kill_groups(list(self.procs.values()))
        kill_marked(self.job_id)
        self._ports.release()
        if self._reader is not None:
            self._reader.join(timeout=2)
        if self._log0 is not None:
            self._log0.close()

    # -- watching

    def _reply(self, timeout: float, timed_out: str) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            self._check()
            try:
                reply = self.replies.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise self._hung(timed_out) from None
                continue
            if reply is None:  # rank 0 is gone; wait for its exit status, then name the first rank that went
                try:
                    self.procs[self.rank0].wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                self._check()
                raise self._failed(self.rank0, "closed its output before its round")
            return reply

    def _check(self) -> None:
        """Fail on the first rank seen to exit: any status while rounds are due, a non-zero one when finishing."""
        for rank, proc in self.procs.items():
            if proc.poll() is not None and rank not in self._exited:
                self._exited.append(rank)
        for rank in self._exited:
            code = self.procs[rank].returncode
            if code != 0:
                raise self._failed(rank, exit_reason(code))
            if not self._finishing:
                raise self._failed(rank, "exited 0 before its last round")

    def _hung(self, detail: str) -> JobFailed:
        running = [r for r, p in self.procs.items() if p.poll() is None] or list(self.procs)
        steps = {r: last_step(self.logs[r]) for r in running}
        laggard = min(running, key=lambda r: (steps[r], r.index))
        others = ", ".join(f"{r.name} at step {steps[r]}" for r in running if r != laggard)
        if len(running) > 1 and len(set(steps.values())) == 1:
            others += "; no rank is behind the others, so the hang is inside that step's collective"
        reason = (f"hung: {detail}; its last step was {steps[laggard]}"
                  + (f" (still running: {others})" if others else ""))
        return self._failed(laggard, reason)

    def _failed(self, rank: Rank, reason: str) -> JobFailed:
        """The failure naming ``rank``, after this job's processes are killed (its output is then complete)."""
        kill_groups(list(self.procs.values()))
        survivors = kill_marked(self.job_id)
        if self._log0 is not None and self._reader is not None:
            self._reader.join(timeout=2)
            self._log0.flush()
        host = None if self.job.launcher.name == "local" else self.job.launcher.address(rank.slot)
        return JobFailed(self.job_id, rank.name, reason, tail(self.logs[rank]), survivors, host)


def paced_problem(job: Job) -> str | None:
    """Why ``job`` cannot be paced (a usage error naming the fix), or None."""
    if job.framework not in PACED_FRAMEWORKS:
        return (f"a paced job needs a core that paces its ranks ({', '.join(PACED_FRAMEWORKS)}); "
                f"{job.framework!r} does not yet: run its jobs with distributed.run_job")
    if job.launcher.name not in PACED_LAUNCHERS:
        return (f"a paced job runs on the {' or '.join(PACED_LAUNCHERS)} launcher, not {job.launcher.name!r}: "
                "rank 0's stdin would have to travel through it; run such jobs with distributed.run_job")
    return None


@dataclass
class PairedJobs(Rounds):
    """:func:`drive`'s rounds of jobs: ``results`` holds each job's :class:`JobResult` per process,
    ``throughput`` each pair's round throughput per worker (rank 0's timing), ``ratios`` each job's
    paired per-worker ratio over the first."""

    #: Each job as it ran (its config paced, with the rounds the pairs gave it), by label.
    jobs: dict[str, Job] = field(default_factory=dict)


def run_paired_jobs(jobs: Sequence[Job], pairs: int, processes: int = 1, workdir: Path | None = None,
                    on_progress: Callable[[str], None] | None = None, confidence: float = 0.95,
                    decided: Callable[[dict[str, PairedRatio]], bool] | None = None,
                    max_generations: int | None = None) -> PairedJobs:
    """Run ``jobs`` interleaved, round by round; the first (e.g. the 1-worker job) is the reference.

    Each job runs ``pairs / processes`` timed rounds (``pairs`` rounded up to whole blocks of
    ``2 * processes``), set in its config as ``rounds``, so the jobs' configs must give their
    total training (``epochs`` or ``steps``) and leave the split into rounds to this. While
    ``decided(ratios)`` is false, one more generation of fresh processes runs the jobs again, up to
    ``max_generations`` in all (:func:`~pytest_dlperf.processes.paired.drive`); each generation trains
    every job in full. The caller holds the device lock for the whole group
    (:func:`~pytest_dlperf.processes.distributed.jobs_lock`).
    Raises :class:`~pytest_dlperf.processes.distributed.JobFailed`.
    """
    labels = [j.label for j in jobs]
    check_group(labels, processes)
    for job in jobs:
        problem = paced_problem(job)
        if problem:
            raise ValueError(problem)
        missing = job.launcher.missing()
        if missing:
            raise RuntimeError(f"job {job.label}: {missing}")
    workdir = Path(tempfile.mkdtemp(prefix="paired-jobs-", dir=workdir))
    uses_gpu = any(j.config.get("device") == "cuda" for j in jobs)

    def start(v: int, index: int, rounds: int) -> PacedJob:
        job = jobs[v] if processes == 1 else _relabel(jobs[v], f"{jobs[v].label}.p{index}")
        return PacedJob(job, workdir, rounds, on_progress)

    # on CPU one job builds and warms up after the other (as paired.run_paired does for torch, whose
    # ranks these are): at once, their ranks' OpenMP pools oversubscribe the cores
    run = drive(labels, start, pairs, processes, build_width=None if uses_gpu else 1, confidence=confidence,
                decided=decided, max_generations=max_generations)
    rounds = len(run.throughput[labels[0]]) // (processes * run.generations)
    ran = {j.label: dataclasses.replace(j, config=paced_config(j.config, rounds)) for j in jobs}
    return PairedJobs(**vars(run), jobs=ran)


def paced_config(config: Mapping[str, Any], rounds: int) -> dict[str, Any]:
    """A job's config as its ranks get it when paced: ``rounds`` timed rounds, each on the parent's signal."""
    return dict(config, **{PACED: True, "rounds": rounds})


def _relabel(job: Job, label: str) -> Job:
    return dataclasses.replace(job, label=label)
