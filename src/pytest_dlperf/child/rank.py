"""Everything that runs inside a rank: its config and launch index, heartbeats, its result, the data.

Imported by the per-framework entry points (``cores/torch_ddp.py``, ``cores/tf_mwms.py``,
``cores/mxnet_dist.py``) in the rank process. It imports only the standard library and
:mod:`.protocol`, :mod:`.measure`, :mod:`.phases`, :mod:`.synthetic` (numpy) and the scenario: a rank
never loads the parent's orchestration (supervise, remote, launchers, netns) or judging code
(``tests/test_child_imports.py`` holds that).

A paced job's rank (config ``"paced": true``) installs :class:`RankPacer`: rank 0 waits for the
parent's ``go`` on its stdin before each timed round and reports the round on its stdout (the
worker's protocol, :class:`pytest_dlperf.child.measure.StdinPacer`); every rank then meets the others
in the job's barrier. The parent side is :mod:`.paced_job`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn, Sequence

from pytest_dlperf.atomic import write_atomically
from pytest_dlperf.child import phases
from pytest_dlperf.child.measure import StdinPacer
from pytest_dlperf.child.synthetic import class_templates
from pytest_dlperf.protocol import CONFIG_ENV, HEARTBEAT, PHASES, RESULT_LINE
from pytest_dlperf.scenario import Scenario

#: The job config key that makes a rank paced (the parent sets it; ranks read it).
PACED = "paced"


def load_rank(argv: Sequence[str]) -> tuple[dict[str, Any], Path]:
    """The job's config and this rank's result path, from ``python -m entry CONFIG RESULT``.

    ``CONFIG`` ``-`` reads the config from ``$DLPERF_JOB_CONFIG`` (how the parent sends it: no file
    needs to exist on the rank's host). The result path's folder is made if missing. The entry point
    imported its framework before it calls this: what follows, to the warm-up, is the rank's ``build``.
    """
    phases.enter(phases.BUILD)
    config_path, result_path = argv
    text = os.environ[CONFIG_ENV] if config_path == "-" else Path(config_path).read_text(encoding="utf-8")
    result_path = result_path.replace("{index}", str(launch_index()))  # one command, several ranks
    Path(result_path).parent.mkdir(parents=True, exist_ok=True)
    return json.loads(text), Path(result_path)


def launch_index(default: int = 0) -> int:
    """This rank's launch index (``worker N`` in the parent's messages): given by the parent, or,
    where one process started several ranks, ``DLPERF_PROCESS_INDEXES[LOCAL_RANK]`` (torchrun)
    or ``OMPI_COMM_WORLD_RANK`` (one mpirun for the world)."""
    env = os.environ
    if "DLPERF_PROCESS_INDEX" in env:
        return int(env["DLPERF_PROCESS_INDEX"])
    if "DLPERF_PROCESS_INDEXES" in env:
        return int(env["DLPERF_PROCESS_INDEXES"].split(",")[int(env.get("LOCAL_RANK", 0))])
    if "OMPI_COMM_WORLD_RANK" in env:
        return int(env["OMPI_COMM_WORLD_RANK"])
    return default


def heartbeat(step: int) -> None:
    """"Entering step N", printed before the step's collective: the parent names the laggard
    of a hung job from these (its peers have entered the next step and wait in its collective)."""
    print(f"{HEARTBEAT}{step}", flush=True)


#: The job config key that gives each rank of a host its own core (fair weak scaling on one machine).
CORE_PER_RANK = "core_per_rank"


def take_own_core(config: Mapping[str, Any]) -> int | None:
    """With ``"core_per_rank": true``: pin this rank to the ``LOCAL_RANK``-th CPU it may use, so one
    worker and N workers on one host have the same resources per worker (a 1-worker job gets a core,
    not the machine). Called before the framework starts its thread pools. The engines' hosts pin
    per host instead (``taskset`` around each host's sshd/slurmd). Hosts that share this machine's
    CPUs without such pinning (the ``netns`` launcher's namespaces) all have a local rank 0 and would
    share one core: give them CPUs of their own first. Returns the core, None when off."""
    if not config.get(CORE_PER_RANK):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if local >= len(allowed):
        raise RuntimeError(f"{CORE_PER_RANK}: local rank {local} needs a core of its own, but this rank may use only "
                           f"CPUs {allowed}: run at most {len(allowed)} ranks per host, or drop {CORE_PER_RANK}")
    os.sched_setaffinity(0, {allowed[local]})
    return allowed[local]


def write_rank_result(path: Path, payload: Mapping[str, Any]) -> None:
    """The payload to ``path`` (atomically) and, as one line, to stdout: the launcher brings it back.

    Where it ran goes with it: the host's name and the CPUs the rank was allowed (its pinning), and the
    spans of its phases for the test's cost profile.
    """
    text = json.dumps(dict(payload, hostname=socket.gethostname(),
                           cpus=sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                           **{PHASES: phases.PROCESS.report()}))
    write_atomically(path, text)
    print(f"{RESULT_LINE}{text}", flush=True)


def exit_after_result(code: int) -> NoReturn:
    """End a child or rank that has written its result without the interpreter's teardown.

    The teardown is pure cost (a torch child spends over a second unloading its libraries after its
    result is written: docs/method.md, "What the suite costs"), and it can fail: torch's gloo backend
    can leave a C++ thread joinable until static destruction, which then calls ``std::terminate`` and
    SIGABRT *after* a good run (docs/method.md, same section). The launcher would report that as a crash; the
    process has nothing left to do, so it leaves at once."""
    sys.stdout.flush()
    sys.stderr.flush()
    remove_generated_sources()
    os._exit(code)


#: The module names TensorFlow's autograph gives the source files it writes to the temporary folder.
AUTOGRAPH_PREFIX = "__autograph_generated_file"


def remove_generated_sources() -> None:
    """Delete the source files autograph wrote for the functions this process converted (``tf.function``).

    Autograph writes each converted function to a file in the temporary folder and deletes it at exit
    through ``atexit``, which leaving without the teardown skips: each TensorFlow child would leave dozens
    behind. The files are the ``__file__`` of the modules it loads from them (``sys.modules``)."""
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if name.startswith(AUTOGRAPH_PREFIX) else None
        if path:
            try:
                os.remove(path)
            except OSError:
                pass


def maybe_fault(config: Mapping[str, Any], rank: int, step: int) -> None:
    """Fault injection for the reliability tests: ``fault={"rank": r, "step": s, "kind": "crash"|"hang"}``.

    ``r`` is the launch index (``worker r`` in the parent's messages); ps-lite assigns its own
    ranks in connection order, so the framework's rank is only the fallback.
    """
    fault = config.get("fault")
    index = launch_index(rank)
    if not fault or fault["rank"] != index or fault["step"] != step:
        return
    print(f"[dlperf] injected fault: {fault['kind']} at step {step}", flush=True)
    if fault["kind"] == "crash":
        os._exit(17)
    while True:  # a hang: the peers block in their next collective
        time.sleep(3600)


def dataset(samples: int, image_size: int, num_classes: int, seed: int, noise: float,
            split: str = "train") -> tuple[Any, Any]:
    """A fixed synthetic set (images NCHW float32, labels int64) from ``synthetic``'s class templates.

    ``split="val"`` draws different samples (different noise and labels) around the same
    class templates: a held-out set for top-1/top-5.
    """
    import numpy as np

    templates = class_templates(num_classes, image_size, seed)
    rng = np.random.default_rng([seed, 0 if split == "train" else 1])
    labels = rng.integers(0, num_classes, size=samples, dtype=np.int64)
    images = templates[labels] + noise * rng.standard_normal((samples, *templates.shape[1:]), dtype=np.float32)
    return images.astype(np.float32), labels


def shard(images: Any, labels: Any, step: int, rank: int, world: int, batch: int) -> tuple[Any, Any]:
    """Rank ``rank``'s slice of global batch ``step``: rows ``[g*W*b + r*b, +b)`` cycling the set.

    The union over ranks of one step is exactly the single-process batch of size ``W*b``.
    """
    per_step = world * batch
    steps_per_epoch = len(labels) // per_step
    if steps_per_epoch < 1:
        raise ValueError(f"{len(labels)} samples cannot fill one global batch of {per_step}")
    begin = (step % steps_per_epoch) * per_step + rank * batch
    return images[begin:begin + batch], labels[begin:begin + batch]


def scenario_of(config: Mapping[str, Any], total_steps: int, framework: str) -> Any:
    """The measure() schedule (a Scenario): warm-up, then rounds of equal steps, all of ``total_steps`` training."""
    rounds = max(1, min(int(config.get("rounds", 4)), total_steps))
    warmup = min(int(config.get("warmup_steps", 2)), total_steps - rounds)
    per_round = (total_steps - warmup) // rounds
    warmup = total_steps - rounds * per_round
    return Scenario(framework=framework, model=config["model"], device=config.get("device", "cpu"),
                    batch_size=int(config["batch_size"]), image_size=int(config["image_size"]),
                    num_classes=int(config["num_classes"]), warmup_steps=warmup, rounds=rounds,
                    steps_per_round=per_round, lr=float(config["lr"]), momentum=float(config["momentum"]),
                    weight_decay=float(config.get("weight_decay", 0.0)), seed=int(config["seed"]),
                    label=config.get("label", "ddp"))


def total_steps_of(config: Mapping[str, Any], world: int) -> int:
    """``steps`` if given, else ``epochs`` passes over the training set at the global batch."""
    if config.get("steps"):
        return int(config["steps"])
    return int(config["epochs"]) * (int(config["train_samples"]) // (world * int(config["batch_size"])))


def topk_accuracy(logits: Any, labels: Any, ks: Sequence[int] = (1, 5)) -> dict[str, float]:
    """top-k accuracy (fraction) of numpy ``logits`` (N, C) against ``labels`` (N,)."""
    import numpy as np

    order = np.argsort(-logits, axis=1)
    out = {}
    for k in ks:
        hits = (order[:, :min(k, logits.shape[1])] == labels[:, None]).any(axis=1)
        out[f"top{k}"] = float(hits.mean())
    return out


class RankPacer:
    """The pacer (:class:`pytest_dlperf.child.measure.Pacer`) of one rank of a paced job.

    ``barrier``: the job's collective barrier (``torch.distributed.barrier``), None for a
    1-worker job. Rank 0 talks to the parent; every rank meets the others in the barrier.
    No re-warm steps: a job's rounds split its epochs exactly (every step trains on its share).
    """

    rewarms = False

    def __init__(self, rank: int, barrier: Callable[[], Any] | None):
        self._stdin = StdinPacer() if rank == 0 else None
        self._barrier = barrier

    def wait(self) -> None:
        if self._stdin is not None:
            self._stdin.wait()
        if self._barrier is not None:
            self._barrier()

    def report(self, seconds: float, samples_per_second: float) -> None:
        if self._stdin is not None:
            self._stdin.report(seconds, samples_per_second)

    def done(self) -> None:
        if self._stdin is not None:
            self._stdin.done()
        if self._barrier is not None:
            self._barrier()


def rank_pacer(config: Mapping[str, Any], rank: int, barrier: Callable[[], Any] | None) -> RankPacer | None:
    """This rank's pacer when the job is paced, else None (the rank runs its rounds straight through)."""
    return RankPacer(rank, barrier) if config.get(PACED) else None
