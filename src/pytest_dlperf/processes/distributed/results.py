"""A finished job's results, read on the parent: as a TrainingResult, its parameter dumps compared, its
ranks in the test's cost profile."""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from pytest_dlperf import cost
from pytest_dlperf.protocol import PHASES
from pytest_dlperf.child.environment import hardware_key, host_record
from pytest_dlperf.child.rank import scenario_of, total_steps_of
from pytest_dlperf.processes.distributed.job import Job, JobResult
from pytest_dlperf.result import HIGHER, TrainingResult, metric_from


def charge_cost(ranks: int, started: float, payloads: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The job's ranks in the running test's cost profile: ``ranks`` children alive from ``started``
    (``time.time``) to now, and the phases each worker reported; the payloads without their phases."""
    ended = time.time()
    for _ in range(ranks):
        cost.child_ran(started, ended)
    for payload in payloads:
        cost.child_reported(payload)
    return [{k: v for k, v in payload.items() if k != PHASES} for payload in payloads]


def param_bytes(params_path: str) -> int:
    """Bytes of the float parameters a worker saved: what one all-reduce/push must move."""
    import numpy as np

    with np.load(params_path) as arrays:
        return int(sum(arrays[k].nbytes for k in arrays.files if arrays[k].dtype.kind == "f"))


def max_param_difference(path_a: str, path_b: str) -> tuple[str, float]:
    """The parameter array that differs most, and its largest ``|a-b| / max(|b|, 1e-3)``."""
    import numpy as np

    worst, name = -1.0, ""
    with np.load(path_a) as a, np.load(path_b) as b:
        if sorted(a.files) != sorted(b.files):
            raise ValueError(f"different parameter sets: {sorted(a.files)} vs {sorted(b.files)}")
        for key in a.files:
            if a[key].dtype.kind != "f":
                continue
            scale = np.maximum(np.abs(b[key]), 1e-3)
            excess = float((np.abs(a[key] - b[key]) / scale).max())
            if excess > worst:
                worst, name = excess, key
    return name, worst


def as_training_result(job: Job, result: JobResult, label: str) -> Any:
    """The job as a :class:`TrainingResult` for ``dlperf.check``: throughput *per worker*
    (every worker's per-round samples), rank 0's top-1/top-5, the job's wall time, and
    this machine's hardware key so the figures meet their baselines."""
    first = next((w for w in result.workers if w.get("accuracy")), result.workers[0])
    total = total_steps_of(job.config, job.workers)
    scenario = scenario_of(job.config, total, job.framework).replace(
        label=label, kvstore=job.config.get("kvstore"), launch_prefix=(job.launcher.name,))
    per_worker = [x for w in result.workers for x in w["throughput"]]
    metrics = {"throughput": metric_from("throughput", per_worker, "samples/s/worker", HIGHER),
               "job_wall_time": metric_from("job_wall_time", [result.wall_seconds], "s", "lower")}
    if first.get("accuracy"):
        for k, v in first["accuracy"].items():
            metrics[f"accuracy_{k}"] = metric_from(f"accuracy_{k}", [v], "fraction", HIGHER)
    environment = host_record()
    environment.update(framework=job.framework, framework_version=first.get("framework_version"),
                       hardware_key=hardware_key(str(job.config.get("device", "cpu"))),
                       workers=job.workers, launcher=job.launcher.name, job_id=result.job_id)
    details = {"wall_seconds": result.wall_seconds, "workers": result.workers}
    return TrainingResult(scenario, metrics, list(first["losses"]), environment, details)
