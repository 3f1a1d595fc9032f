"""Input pipelines: each framework's own loader over the data sets of :mod:`pytest_dlperf.child.datasets`.

* torch: ``DataLoader`` over ``torchvision.datasets.ImageFolder`` (JPEG folders), workers.
* tensorflow: ``tf.data.TFRecordDataset`` with parallel decode, batch and prefetch.
* mxnet: ``mx.io.ImageRecordIter`` over the ``.rec`` + ``.idx`` pair, preprocess threads.

Every loader decodes JPEG, resizes to ``scenario.image_size`` and normalises with the
ImageNet mean and standard deviation, so the three pipelines do the same work.

This module also holds what the three share: the check that a scenario's data
exist and match it, the loader-only measurement (the loader timed by the same
harness as training, in a child process of its own, which
:func:`pytest_dlperf.processes.runner.run_loader_only` starts), the data-bound detector,
and top-k accuracy from logits. Framework modules are imported only when used.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import statistics
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from pytest_dlperf.child import phases
from pytest_dlperf.child.datasets import (FRAMEWORK_FORMATS, DatasetError, ImageSetSpec, read_spec, recordio_paths,
                                          tfrecord_path)
from pytest_dlperf.child.environment import hardware_key, host_record
from pytest_dlperf.child.measure import StdinPacer, measure, pace_rounds
from pytest_dlperf.child.train import failure_reason, progress
from pytest_dlperf.lifeline import die_with_parent
from pytest_dlperf.protocol import ERROR, EXIT_ERROR, PACED_FLAG, PHASES, RESULT, write_result
from pytest_dlperf.result import HIGHER, Metric, TrainingResult, metric_from
from pytest_dlperf.scenario import Scenario, ScenarioError

#: ImageNet statistics (torchvision's ``Normalize`` values), in 0..1 and 0..255 units.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
MEAN_255 = tuple(m * 255 for m in MEAN)
STD_255 = tuple(s * 255 for s in STD)

LOADER_MODULES = {
    "torch": "pytest_dlperf.child.loaders.torch_loader",
    "tensorflow": "pytest_dlperf.child.loaders.tf_loader",
    "mxnet": "pytest_dlperf.child.loaders.mxnet_loader",
}
#: Effective throughput below this fraction of compute-only throughput means the loader is the bottleneck.
DATA_BOUND_THRESHOLD = 0.9


def check_data(scenario: Scenario, split: str = "train") -> ImageSetSpec:
    """The spec of ``scenario.data_dir``; raises ScenarioError when the data cannot serve the scenario."""
    native = FRAMEWORK_FORMATS[scenario.framework]
    if scenario.data != native:
        raise ScenarioError(
            f"data={scenario.data!r}: the {scenario.framework} loader reads data={native!r} "
            f"({', '.join(f'{fw}: {fmt}' for fw, fmt in FRAMEWORK_FORMATS.items())})"
        )
    try:
        spec = read_spec(scenario.data_dir or "")
    except DatasetError as exc:
        raise ScenarioError(f"data_dir: {exc}") from None
    if spec.num_classes != scenario.num_classes:
        raise ScenarioError(
            f"num_classes={scenario.num_classes} but the data set in {scenario.data_dir} has "
            f"{spec.num_classes} classes; set num_classes={spec.num_classes}"
        )
    needed = {
        "jpeg": [Path(scenario.data_dir or "") / split],
        "recordio": list(recordio_paths(scenario.data_dir or "", split)),
        "tfrecord": [tfrecord_path(scenario.data_dir or "", split)],
    }[scenario.data]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        raise ScenarioError(
            f"data={scenario.data!r}: {missing} missing; pack it with "
            f"pytest_dlperf.child.datasets.ensure_image_set(root, spec, formats=({scenario.data!r},))"
        )
    return spec


def loader_module(framework: str) -> Any:
    return importlib.import_module(LOADER_MODULES[framework])


def describe(scenario: Scenario) -> dict[str, Any]:
    """What the result records about the input pipeline of ``scenario``."""
    return {"source": scenario.data, "data_dir": scenario.data_dir, "loader_workers": scenario.loader_workers}


# --- accuracy -------------------------------------------------------------------------------

def top_k_correct(logits: np.ndarray, labels: np.ndarray, k: int) -> int:
    """How many rows of ``logits`` have their label among the ``k`` largest scores."""
    top = np.argpartition(-logits, kth=min(k, logits.shape[1]) - 1, axis=1)[:, :k]
    return int((top == labels.reshape(-1, 1)).any(axis=1).sum())


def accuracy_metrics(batches: Iterable[tuple[np.ndarray, np.ndarray]], num_classes: int) -> dict[str, Metric]:
    """``accuracy_top1`` (and ``accuracy_top5`` with >= 10 classes) over (logits, labels) batches."""
    ks = (1, 5) if num_classes >= 10 else (1,)
    correct = dict.fromkeys(ks, 0)
    total = 0
    for logits, labels in batches:
        logits = np.asarray(logits, dtype=np.float32)
        labels = np.asarray(labels).astype(np.int64).reshape(-1)
        for k in ks:
            correct[k] += top_k_correct(logits, labels, k)
        total += labels.shape[0]
    if total == 0:
        raise ScenarioError("the validation split is empty: no accuracy can be measured")
    return {f"accuracy_top{k}": metric_from(f"accuracy_top{k}", [correct[k] / total], "fraction", HIGHER)
            for k in ks}


# --- the data-bound detector ----------------------------------------------------------------

@dataclass(frozen=True)
class PipelineBalance:
    """Compute-only, loader-only and effective throughput, and whether the loader limits training."""

    compute_only: float
    loader_only: float
    effective: float
    threshold: float = DATA_BOUND_THRESHOLD

    @property
    def efficiency(self) -> float:
        """Effective throughput as a fraction of what the model computes on ready data."""
        return self.effective / self.compute_only

    @property
    def data_bound(self) -> bool:
        return self.efficiency < self.threshold

    def figures(self) -> str:
        return (f"compute-only {self.compute_only:.1f} img/s, loader-only {self.loader_only:.1f} img/s, "
                f"effective {self.effective:.1f} img/s ({self.efficiency:.0%} of compute-only)")

    def explain(self) -> str:
        if not self.data_bound:
            return f"compute-bound: {self.figures()}"
        if self.loader_only < self.compute_only:
            why = "the loader alone is slower than the model: add loader workers or make decoding cheaper"
        else:
            why = ("the loader is fast enough alone but is not overlapped with the training step "
                   "(loading in the training process, or workers competing with compute for the cores)")
        return (f"data-bound: the input pipeline limits training to {self.efficiency:.0%} of compute-only "
                f"(threshold {self.threshold:.0%}); {self.figures()}; {why}")


def evaluate_real_data(loop: Any, scenario: Scenario, metrics: dict[str, Metric], details: dict[str, Any],
                       progress: Callable[[str], None] | None = None) -> None:
    """After training on real data (every core alike): describe the input pipeline, add top-1/top-5
    on the validation split (``loop.evaluate()``) to ``metrics``. Synthetic runs are left as they are."""
    if scenario.data == "synthetic":
        return
    details["input_pipeline"] = describe(scenario)
    accuracy = loop.evaluate()
    metrics.update(accuracy)
    details["accuracy_on"] = "validation split"
    if progress is not None:
        progress("evaluated: " + ", ".join(f"{m.name} {m.value:.3f}" for m in accuracy.values()))


def balance_of(compute_only: float, loader_only: float, effective: float,
             threshold: float = DATA_BOUND_THRESHOLD) -> PipelineBalance:
    for name, value in (("compute_only", compute_only), ("loader_only", loader_only), ("effective", effective)):
        if not value > 0:
            raise ValueError(f"{name}={value!r}: throughputs must be positive")
    return PipelineBalance(compute_only, loader_only, effective, threshold)


# --- the loader alone, timed by the training harness ----------------------------------------

class LoaderLoop:
    """A loader as a ``TrainingLoop``: one step fetches one batch; there is no loss (0.0).

    Paired (the paired runner's ``--paced`` child), the loader keeps decoding while this child
    idles between its rounds, up to whatever its buffers hold (DataLoader's prefetch_factor x
    workers, tf.data's autotuned prefetch buffer, ImageRecordIter's prefetch buffer): batches no
    timed round paid for. Before each timed round :meth:`drain_prefetched` takes out, untimed, the
    batches the loader can have made while it idled, for at most ``MAX_DRAIN_SECONDS``, so the round
    starts from the loader's steady state (consumer ahead of producer, buffers empty).
    """

    synchronous = True
    #: A buffered batch comes out in well under a millisecond, so this empties buffers of hundreds; past
    #: that, each fetch waits for a new batch and drains nothing the idle spell made.
    MAX_DRAIN_SECONDS = 0.25

    def __init__(self, scenario: Scenario):
        module = loader_module(scenario.framework)
        self.samples_per_step = scenario.batch_size
        self._batches: Iterator[Any] = module.endless(scenario)
        self._wait: Callable[[Any], None] = module.wait
        self._last: Any = None
        self._fetch_seconds: list[float] = []
        self._last_fetched = time.perf_counter()
        self.drained: list[int] = []

    def _fetch(self) -> float:
        start = time.perf_counter()
        self._last = next(self._batches)
        self._wait(self._last)
        self._last_fetched = time.perf_counter()
        return self._last_fetched - start

    def step(self) -> float:
        self._fetch_seconds.append(self._fetch())
        return 0.0

    def drain_prefetched(self) -> None:
        """Fetch, untimed, the batches the loader could make since the last fetch, for at most
        ``MAX_DRAIN_SECONDS``.

        Its steady-state time per batch (the median fetch, the consumer being ahead) bounds what it
        made while idle. The time bound keeps drains from feeding each other: drained for as long as
        it idled, two loader children alternating would each drain for as long as the other drained,
        longer every pair (measured: a 20-pair loader-vs-training comparison took 124 s, 4 pairs 20 s).
        (Timing each fetch to see when the buffer runs dry does not work: the first fetches after an
        idle spell are slow while threads wake, with dozens of tf.data or RecordIO batches queued.)"""
        if not self._fetch_seconds:
            return
        start = time.perf_counter()
        idle = start - self._last_fetched
        per_batch = max(statistics.median(self._fetch_seconds), 1e-6)
        count = math.ceil(idle / per_batch)
        limit = min(idle, self.MAX_DRAIN_SECONDS)
        done = 0
        while done < count and time.perf_counter() - start < limit:
            self._fetch()
            done += 1
        self.drained.append(done)

    def sync(self) -> None:
        if self._last is not None:
            self._wait(self._last)

    def losses_to_floats(self, handles: Sequence[float]) -> list[float]:
        return [float(h) for h in handles]


def measure_loader(scenario: Scenario, progress: Callable[[str], None] | None = None) -> TrainingResult:
    """Images/s of the loader alone, warm-up excluded, in rounds: in this process."""
    environment = host_record()  # before the framework starts and may pin this thread (see train.run)
    environment["hardware_key"] = hardware_key(scenario.device)
    phases.enter(phases.IMPORT_BUILD)  # the loader imports its framework as it is built
    check_data(scenario)
    loop = LoaderLoop(scenario)
    metrics, _, details = measure(loop, scenario, progress)
    details["input_pipeline"] = describe(scenario)
    if loop.drained:
        details["drained_before_rounds"] = loop.drained
    environment.update(loader_module(scenario.framework).environment())
    return TrainingResult(scenario, metrics, [], environment, details)


def main(argv: list[str]) -> int:
    """``python -m pytest_dlperf.child.loaders SCENARIO.json RESULT.json [--paced]``: the loader-only child."""
    die_with_parent()
    paced = PACED_FLAG in argv
    scenario_path, result_path = [a for a in argv if a != PACED_FLAG]
    if paced:  # one side of a paired comparison (pytest_dlperf.processes.paired), e.g. against compute-only training

        pace_rounds(StdinPacer())
    try:
        scenario = Scenario.from_dict(json.loads(Path(scenario_path).read_text(encoding="utf-8")))
        progress(f"start: loader only, {scenario.data} from {scenario.data_dir}, {scenario.loader_workers} workers")
        payload: dict[str, Any] = {RESULT: measure_loader(scenario, progress).to_dict()}
        code = 0
    except BaseException as exc:  # report everything, then exit non-zero
        traceback.print_exc()
        payload = {ERROR: {"reason": failure_reason(exc), "type": type(exc).__name__, "message": str(exc)}}
        code = EXIT_ERROR
    write_result(result_path, {**payload, PHASES: phases.PROCESS.report()})
    return code
