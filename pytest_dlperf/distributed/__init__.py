"""Distributed jobs: N ranks of a framework's entry point, started through a launcher on hosts, watched.

Parent side (the pytest process):

* :mod:`.job`: what to run (:class:`Job`, :class:`Rank`), what comes back (:class:`JobResult`),
  how it fails (:class:`JobFailed`).
* :mod:`.supervise`: :func:`run_job` starts the ranks, watches them, blames the failed one and
  always cleans up; :mod:`.rendezvous` (each rank's environment, reserved ports),
  :mod:`.tagged` (one launch process carrying several ranks), :mod:`.processes` (finding and
  killing a job's processes), :mod:`.remote` (ranks on other hosts: probed before, reaped after).
* :mod:`.launchers` (local, ssh, mpirun, srun, netns argv), :mod:`.netns` (network-namespace
  hosts), :mod:`.engines` (sshd, Open MPI, Slurm on those hosts), :mod:`.networks` (the
  ``loopback``/``netns``/``netns_limited`` networks a test runs on).
* :mod:`.paced_job` (a 1- and a 2-worker job taking timed rounds in turn), :mod:`.scaling` (the
  scaling claims), :mod:`.results` (a job as a TrainingResult, parameter dumps compared).

Rank side (the training processes): :mod:`.rank` (config, launch index, heartbeats, result,
data, pacer) and :mod:`.protocol` (what both sides agree on). A rank imports
``pytest_dlperf.distributed.rank``, which runs this file first: so the names below are loaded
on first use (``dist.run_job`` imports :mod:`.supervise` then), and a rank pays for none of the
parent's modules (``tests/test_child_imports.py`` holds that).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each name callers use as ``distributed.NAME``, by the module that defines it.
_EXPORTS = {
    "job": ("ENTRY_POINTS", "TORCH_STARTS", "DEFAULT_TORCH_START", "MXNET_STARTS", "PACKAGE_ROOT",
            "Job", "Rank", "JobResult", "JobFailed", "host_python", "rank_host"),
    "protocol": ("JOB_MARKER", "HEARTBEAT", "RESULT_LINE", "CONFIG_ENV", "last_step", "read_rank_result"),
    "rendezvous": ("PORT_LOCK_DIR", "PortReservation", "rank_environments", "rendezvous_of"),
    "processes": ("job_processes", "kill_groups", "kill_marked", "exit_reason"),
    "supervise": ("run_job",),
    "tagged": ("TaggedLaunch", "launch_groups"),
    "remote": ("HostsNotReady", "RemotePorts", "reap_remote"),
    "networks": ("NETWORKS", "NetworkUnavailable", "network"),
    "results": ("as_training_result", "max_param_difference", "param_bytes"),
    "scaling": ("scaling_efficiency",),
    "rank": ("PACED", "load_rank", "launch_index", "heartbeat", "write_rank_result", "maybe_fault", "dataset",
             "shard", "scenario_of", "total_steps_of", "topk_accuracy", "RankPacer", "rank_pacer", "CORE_PER_RANK",
             "take_own_core"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what a type checker sees; at run time the names above load on first use
    from .job import (DEFAULT_TORCH_START, ENTRY_POINTS, MXNET_STARTS, PACKAGE_ROOT, TORCH_STARTS, Job, JobFailed,
                      JobResult, Rank, host_python, rank_host)
    from .networks import NETWORKS, NetworkUnavailable, network
    from .processes import exit_reason, job_processes, kill_groups, kill_marked
    from .protocol import CONFIG_ENV, HEARTBEAT, JOB_MARKER, RESULT_LINE, last_step, read_rank_result
    from .rank import (CORE_PER_RANK, PACED, RankPacer, dataset, heartbeat, launch_index, load_rank, maybe_fault,
                       rank_pacer, scenario_of, shard, take_own_core, topk_accuracy, total_steps_of,
                       write_rank_result)
    from .remote import HostsNotReady, RemotePorts, reap_remote
    from .rendezvous import PORT_LOCK_DIR, PortReservation, rank_environments, rendezvous_of
    from .results import as_training_result, max_param_difference, param_bytes
    from .scaling import scaling_efficiency
    from .supervise import run_job
    from .tagged import TaggedLaunch, launch_groups
