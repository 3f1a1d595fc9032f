"""Run one distributed job: N ranks through a launcher, watched, and always cleaned up.

:func:`run_job` gives every process of the job its rendezvous environment on reserved ports
(:mod:`.rendezvous`), the job marker, its own log and its own process group; where one launch
process carries several ranks (a host's torchrun, the world's mpirun) its output is split by
rank (:mod:`.tagged`); ranks on other hosts are checked before and reaped after (:mod:`.remote`).

It then watches the ranks: the first rank to exit non-zero, or, at the timeout, the
rank with the least progress, fails the job with :class:`JobFailed` naming that rank
and its last output. Whatever happens every process group of the job is killed, and
``/proc`` is scanned for the marker to kill anything that left its group.

The rank side is :mod:`.rank`; a rank never imports this module.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_dlperf.processes.devicelock import device_lock, visible_gpus
from pytest_dlperf.processes.runner import tail
from pytest_dlperf.processes.distributed.job import (ENTRY_POINTS, Job, JobFailed, JobResult, Rank, host_python,
                                                     rank_host)
from pytest_dlperf.processes.distributed.launchers import REMOTE_SCRATCH
from pytest_dlperf.processes.distributed.processes import exit_reason, kill_marked
from pytest_dlperf.processes.groups import kill_groups
from pytest_dlperf.protocol import CONFIG_ENV, last_step, read_rank_result
from pytest_dlperf.processes.distributed.remote import RemotePorts, reap_remote, unreachable
from pytest_dlperf.processes.distributed.rendezvous import PortReservation, rank_environments, rendezvous_of
from pytest_dlperf.processes.distributed.results import charge_cost
from pytest_dlperf.processes.distributed.tagged import start_tagged

#: How long the scheduler/servers of a ps-lite job may take to exit after the workers finished.
SERVER_EXIT_GRACE = 10.0


def run_job(job: Job, workdir: Path | None = None) -> JobResult:
    """Start every rank, wait for the workers, return their payloads; raise JobFailed otherwise.

    The job holds this machine's device lock (its CPUs; the GPUs it sees when it uses them) like
    any measured scenario, so another run's scenario never shares its cores or GPUs. Ranks on
    other hosts (ssh, MPI, Slurm) are not locked there: those hosts are the job's own.
    """
    with jobs_lock([job]):
        return _run_job(job, workdir)


def jobs_lock(jobs: Sequence[Job]) -> Any:
    """The device lock for ``jobs`` run at once (one, or a paired group): this machine's CPUs, and the
    GPUs it sees when any job uses them, waited for up to the longest job timeout."""
    devices = visible_gpus() if any(j.config.get("device") == "cuda" for j in jobs) else ["cpu"]
    labels = [j.label for j in jobs]
    owner = f"distributed job {labels[0]}" if len(jobs) == 1 else f"paired jobs {' vs '.join(labels)}"
    return device_lock(devices or ["cpu"], timeout=max(j.timeout for j in jobs), owner=owner)


def _run_job(job: Job, workdir: Path | None) -> JobResult:
    job_id = f"{job.label}-{secrets.token_hex(4)}"
    logdir = Path(workdir or tempfile.mkdtemp(prefix="dlperf-job-")) / job_id
    logdir.mkdir(parents=True, exist_ok=True)
    missing = job.launcher.missing()
    if missing:
        raise RuntimeError(missing)
    remote = bool(getattr(job.launcher, "remote", False))
    (logdir / "config.json").write_text(json.dumps(job.config), encoding="utf-8")  # the record; ranks get the env
    ports: PortReservation | RemotePorts = RemotePorts(job, job_id) if remote else PortReservation()
    procs: dict[Rank, Any] = {}  # a Popen, or a TaggedLaunch several ranks share
    logs: dict[Rank, Path] = {}
    results: dict[Rank, Path] = {}
    entry = ENTRY_POINTS[job.framework]
    start, started = time.perf_counter(), time.time()
    envs: dict[Rank, dict[str, str]] = {}
    unreached: list[str] | None = None  # None: the remote hosts were not cleaned up yet
    try:
        envs = rank_environments(job, job_id, ports)
        scratch = Path(REMOTE_SCRATCH) / job_id if remote else logdir
        for rank, env in envs.items():
            logs[rank] = logdir / f"{rank.file_stem}.log"
            results[rank] = scratch / f"{rank.file_stem}.json"
            env[CONFIG_ENV] = json.dumps(job.config)
        if job.start in ("torchrun", "mpi"):
            tagged = start_tagged(job, job_id, envs, logs, scratch, logdir)
            procs.update((r, tagged[r]) for r in envs)  # rank order, whatever the hosts' order
        for rank, env in envs.items():
            if rank in procs:
                continue
            command = [host_python(job, rank.slot), "-m", entry, "-", str(results[rank])]
            argv = job.launcher.argv(rank.slot, command, env)
            with open(logs[rank], "wb") as log:
                procs[rank] = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, start_new_session=True)
        _watch(job, job_id, procs, logs, start)
        wall = time.perf_counter() - start
    except JobFailed as exc:
        if remote:  # the ranks' process groups here are gone; now whatever runs on the hosts
            unreached = exc.unreached = reap_remote(job, job_id, skip=exc.lost_hosts)
        raise
    finally:
        kill_groups(list(procs.values()))
        if remote and unreached is None and procs:
            unreached = reap_remote(job, job_id)
        if remote:  # what the launcher kept here (mpirun's session folder)
            shutil.rmtree(Path(REMOTE_SCRATCH) / job_id, ignore_errors=True)
        leftovers = kill_marked(job_id)
        ports.release()
    payloads = []
    for rank in [r for r in procs if r.role == "worker"]:
        payload = read_rank_result(logs[rank], None if remote else results[rank])
        if payload is None:
            raise JobFailed(job_id, rank.name, "exited 0 but wrote no result", _output(procs, logs, rank), leftovers,
                            rank_host(job, rank), unreached or ())
        if remote:
            payload["params"] = None  # it lived in the host's scratch folder, removed with the job
        payloads.append(payload)
    return JobResult(job_id, job.label, charge_cost(len(procs), started, payloads), wall, logdir, rendezvous_of(envs))


def _result_file(log: Path) -> Path:
    """The result file of a local rank, beside its log (remote ranks' files stay on their hosts)."""
    return log.with_suffix(".json")


#: What a rank's output says when a peer's process or host went away (gloo, ps-lite): a consequence.
PEER_LOST = ("closed by peer", "reset by peer", "Broken pipe", "Connection refused")
#: How long a failure that only says it lost a peer waits for the peer's own failure to be reported.
PEER_GRACE = 2.0


def _output(procs: Mapping[Rank, Any], logs: Mapping[Rank, Path], rank: Rank) -> str:
    """What a failure report shows of ``rank``: its last output (and its launcher's, if it has one)."""
    report = getattr(procs.get(rank), "report", None)
    return report(logs[rank]) if report is not None else tail(logs[rank])


def _lost_a_peer(log: Path) -> bool:
    text = tail(log)
    return any(marker in text for marker in PEER_LOST)


def _cause(procs: Mapping[Rank, Any], failed: Sequence[Rank], logs: Mapping[Rank, Path]) -> tuple[Rank, int]:
    """The failed rank to blame and its exit status: the first, each launch of several ranks read
    through its own failure report (``blame``), preferring a rank that did not just lose a peer."""
    candidates: list[tuple[Rank, int]] = []
    for r in failed:
        blame = getattr(procs[r], "blame", None)
        found = blame(r, procs[r].returncode) if blame is not None else (r, procs[r].returncode)
        if found not in candidates:
            candidates.append(found)
    return next((c for c in candidates if not _lost_a_peer(logs[c[0]])), candidates[0])


def _watch(job: Job, job_id: str, procs: Mapping[Rank, Any], logs: Mapping[Rank, Path],
           start: float) -> None:
    workers = [r for r in procs if r.role == "worker"]
    deadline = start + job.timeout
    workers_done_at: float | None = None
    resultless: dict[Rank, bool] = {}  # workers that exited 0: did they leave no result line?
    while True:
        for r in workers:
            if r not in resultless and procs[r].poll() == 0:
                resultless[r] = read_rank_result(logs[r], None) is None and not _result_file(logs[r]).exists()
        def failures() -> list[Rank]:
            return [r for r, p in procs.items() if p.poll() not in (None, 0) or resultless.get(r)]

        failed = failures()
        if failed:
            # the first to fail is the cause; peers that lose their connection follow it. A rank that
            # says it lost a peer is not the cause: give the peer's launch a moment to report (torchrun's
            # agents each notice their own rank's exit within 0.1 s, so they may fail in either order)
            rank, code = _cause(procs, failed, logs)
            settle = time.monotonic() + PEER_GRACE
            while (_lost_a_peer(logs[rank]) and time.monotonic() < settle
                   and any(p.poll() is None for p in procs.values())):
                time.sleep(0.1)
                rank, code = _cause(procs, failures(), logs)
            reason = exit_reason(code) if code else "exited 0 but wrote no result"
            lost: set[str] = set()
            if job.launcher.name == "ssh" and code == 255:
                reason = "lost its host: ssh exited 255 (the host stopped answering, or its sshd died)"
            elif getattr(job.launcher, "remote", False):
                # a launcher that lost a host may exit with any status, even 0 (srun); and a rank
                # that failed because a peer's host vanished is not the cause: that host is
                lost = unreachable(job, [r for r in procs if r == rank or procs[r].poll() is None])
                here = job.launcher.address(rank.slot)
                lost_ranks = [r for r in procs if job.launcher.address(r.slot) in lost and r != rank]
                if here in lost:
                    reason = f"lost its host: {here} no longer answers {job.launcher.name} (the rank {reason})"
                elif lost_ranks:
                    cause = lost_ranks[0]
                    reason = (f"lost its host: {job.launcher.address(cause.slot)} no longer answers "
                              f"{job.launcher.name} ({rank.name} {reason} after losing its peer)")
                    rank = cause
            kill_groups(list(procs.values()))
            exc = JobFailed(job_id, rank.name, reason, _output(procs, logs, rank), kill_marked(job_id),
                            rank_host(job, rank))
            exc.lost_hosts = sorted(lost)
            raise exc
        if all(procs[r].poll() == 0 for r in workers):
            if all(p.poll() == 0 for p in procs.values()):
                return
            workers_done_at = workers_done_at or time.monotonic()
            if time.monotonic() - workers_done_at > SERVER_EXIT_GRACE:
                return  # the workers have their results; servers are killed in the cleanup
        now = time.perf_counter()
        if now > deadline:
            running = [r for r, p in procs.items() if p.poll() is None and r.role == "worker"] or \
                      [r for r, p in procs.items() if p.poll() is None]
            steps = {r: last_step(logs[r]) for r in running}
            lost = unreachable(job, running) if getattr(job.launcher, "remote", False) else set()
            # a rank whose host stopped answering is the cause, whatever step its peers wait at
            laggard = min(running, key=lambda r: (job.launcher.address(r.slot) not in lost, steps[r], r.index))
            others = ", ".join(f"{r.name} at step {steps[r]}" for r in running if r != laggard)
            if len(running) > 1 and len(set(steps.values())) == 1:
                others += "; no rank is behind the others, so the hang is inside that step's collective"
            kill_groups(list(procs.values()))
            reason = (f"hung: no result after the job's timeout of {job.timeout:g} s; its last step was "
                      f"{steps[laggard]}" + (f" (still running: {others})" if others else ""))
            if lost:
                reason += f"; host(s) {', '.join(sorted(lost))} did not answer {job.launcher.name}"
            exc = JobFailed(job_id, laggard.name, reason, _output(procs, logs, laggard), kill_marked(job_id),
                            rank_host(job, laggard))
            exc.lost_hosts = sorted(lost)
            raise exc
        time.sleep(0.05)
