"""Distributed jobs: N ranks of a framework's entry point, started through a launcher on hosts, watched.

Parent side (the pytest process):

* :mod:`.job`: what to run (:class:`Job`, :class:`Rank`), what comes back (:class:`JobResult`),
  how it fails (:class:`JobFailed`).
* :mod:`.supervise`: :func:`run_job` starts the ranks, watches them, blames the failed one and
  always cleans up, holding :func:`jobs_lock` (a paired group's caller takes it itself);
  :mod:`.rendezvous` (each rank's environment, reserved ports),
  :mod:`.tagged` (one launch process carrying several ranks), :mod:`.processes` (finding and
  killing a job's processes by its marker), :mod:`.remote` (ranks on other hosts: probed before, reaped after).
* :mod:`.launchers` (local, ssh, mpirun, srun, netns argv) on :mod:`.hosts` (a hostfile's hosts,
  checked), :mod:`.netns` (network-namespace hosts), :mod:`.engines` (sshd, Open MPI, Slurm on those
  hosts), :mod:`.networks` (the ``loopback``/``netns``/``netns_limited`` networks a test runs on).
* :mod:`.paced_job` (a 1- and a 2-worker job taking timed rounds in turn), :mod:`.scaling` (weak-scaling
  efficiency), :mod:`.results` (a job as a TrainingResult, parameter dumps compared).

Rank side (the training processes): :mod:`pytest_dlperf.child.rank` (config, launch index,
heartbeats, result, data, pacer) and :mod:`pytest_dlperf.protocol` (what both sides agree on).
A rank imports neither this package nor anything under :mod:`pytest_dlperf.processes`
(``tests/test_child_imports.py`` holds that); the rank-side names are re-exported here for the
tests that build jobs, as ``distributed.NAME``.
"""

from __future__ import annotations

from pytest_dlperf.child.rank import (CORE_PER_RANK, PACED, RankPacer, dataset, heartbeat, launch_index, load_rank,
                                      maybe_fault, rank_pacer, scenario_of, shard, take_own_core, topk_accuracy,
                                      total_steps_of, write_rank_result)
from pytest_dlperf.processes.distributed.job import (DEFAULT_TORCH_START, ENTRY_POINTS, MXNET_STARTS, PACKAGE_ROOT,
                                                     TORCH_STARTS, Job, JobFailed, JobResult, Rank, host_python,
                                                     rank_host)
from pytest_dlperf.processes.distributed.networks import NETWORKS, NetworkUnavailable, network
from pytest_dlperf.processes.distributed.processes import exit_reason, job_processes, kill_marked
from pytest_dlperf.processes.distributed.remote import HostsNotReady, RemotePorts, reap_remote
from pytest_dlperf.processes.distributed.rendezvous import (PORT_LOCK_DIR, PortReservation, rank_environments,
                                                            rendezvous_of)
from pytest_dlperf.processes.distributed.results import as_training_result, max_param_difference, param_bytes
from pytest_dlperf.processes.distributed.scaling import scaling_efficiency
from pytest_dlperf.processes.distributed.supervise import jobs_lock, run_job
from pytest_dlperf.processes.distributed.tagged import TaggedLaunch, launch_groups
from pytest_dlperf.processes.groups import kill_groups
from pytest_dlperf.protocol import CONFIG_ENV, HEARTBEAT, JOB_MARKER, RESULT_LINE, last_step, read_rank_result

__all__ = sorted([
    "ENTRY_POINTS", "TORCH_STARTS", "DEFAULT_TORCH_START", "MXNET_STARTS", "PACKAGE_ROOT",
    "Job", "Rank", "JobResult", "JobFailed", "host_python", "rank_host",
    "JOB_MARKER", "HEARTBEAT", "RESULT_LINE", "CONFIG_ENV", "last_step", "read_rank_result",
    "PORT_LOCK_DIR", "PortReservation", "rank_environments", "rendezvous_of",
    "job_processes", "kill_groups", "kill_marked", "exit_reason",
    "run_job", "jobs_lock", "TaggedLaunch", "launch_groups", "HostsNotReady", "RemotePorts", "reap_remote",
    "NETWORKS", "NetworkUnavailable", "network", "as_training_result", "max_param_difference", "param_bytes",
    "scaling_efficiency",
    "PACED", "load_rank", "launch_index", "heartbeat", "write_rank_result", "maybe_fault", "dataset",
    "shard", "scenario_of", "total_steps_of", "topk_accuracy", "RankPacer", "rank_pacer", "CORE_PER_RANK",
    "take_own_core",
])
