"""Seeds 000 and 001: the input pipeline must keep up with training, and we can tell when it does not.

Seed 001 finds ResNet-18 "limited by data loading" (771 vs 805 img/s whatever the
precision; "a lot of variance ... caused by data loading waiting time"); seed 000
feeds MXNet from RecordIO with an index and ``--data-nthreads``. For each framework
this measures three figures on the same shapes:

* compute-only: training on synthetic batches already in memory;
* loader-only: the framework's own loader alone (``python -m pytest_dlperf.child.loaders``);
* effective: training fed by that loader.

The configuration under test must keep up: the loader alone is not slower than training
(a paired ratio: loader-only and compute-only children take timed rounds in turn, so the
machine's drift hits both alike; see pytest_dlperf.processes.paired), and, where the loader has cores of
its own (full profile), training fed by it is not data-bound (effective >= 90% of compute-only).
A configuration built to be data-bound (JPEGs of photo size, decoded in the training process)
must be detected as such, so the detector is proven to fire. All figures are recorded and held
against the baselines, except the effective one on the smoke profile (2 cores: a loader process
and training share them, and that figure swings beyond any tolerance with no change).
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_dlperf.child.datasets import FRAMEWORK_FORMATS, ImageSetSpec, ensure_image_set
from pytest_dlperf.child.environment import usable_cpus
from pytest_dlperf.child.loaders import balance_of
from pytest_dlperf.processes.paired import Variant
from pytest_dlperf.plugin.options import DEFAULT_AB_THRESHOLD as THRESHOLD
from pytest_dlperf.judging.outcomes import REGRESSION
from pytest_dlperf.judging.stats import decide, decided_at
from pytest_dlperf.child.train import REAL_DATA, missing_capability

MODEL = "resnet18"  # seed 001's data-bound model
#: Small JPEGs, decoded by loader workers (threads for tf.data and MXNet): the configuration under test.
SPEC = ImageSetSpec(num_classes=10, train_per_class=160, val_per_class=40, image_size=64)


def loader_workers(profile: str) -> int:
    """Smoke (2-core CI): one worker; two would take a core from the training step (measured: 81% of
    compute-only with 2 workers, 100% with 1). Full: half the physical cores, as DataLoader guides advise."""
    from pytest_dlperf.child.environment import physical_cores

    return 1 if profile == "smoke" else max(2, min(8, physical_cores() // 2))
#: Photo-sized JPEGs (4.2 megapixels) decoded in the training process: large enough that even
#: TensorFlow's SIMD decoder on a fast Xeon is slower than the model trains (docs/evidence.md).
EXPENSIVE_SPEC = ImageSetSpec(num_classes=10, train_per_class=2, val_per_class=1, image_size=2048, noise=0.3)
SMOKE = dict(image_size=32, batch_size=16, warmup_steps=2, rounds=5, steps_per_round=4)
#: The data-bound configuration reads 6-31% of compute-only against the 90% threshold on a 2-core VM, and
#: its photo-sized JPEGs decode at 17-60 img/s: 6 timed steps show that as surely as 20 (issue 59).
DATA_BOUND_SMOKE = dict(SMOKE, rounds=3, steps_per_round=2)
#: Pairs of loader-only and compute-only rounds, in one process per variant: the loader alone runs 15-115x
#: faster than training here, so 8 pairs of one process decide it as surely as 20 over two (issue 59).
PAIRS = 8

FRAMEWORKS = [pytest.param(fw, marks=pytest.mark.framework(fw), id=fw) for fw in ("torch", "tensorflow", "mxnet")]

#: Compute-only results of the data-bound test per (framework, profile, threads): one measured
#: before and one after its effective run, so drift in a shared machine's load cancels out.
_compute: dict[tuple[str, str, int | None], list] = {}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "dlperf-data"


def _base(dlperf, framework, reserve_cores=0, smoke=SMOKE):
    """The scenario; on a CPU, ``reserve_cores`` are left to the loader's workers.

    A loader worker on a core that the training step's threads also use preempts one of
    them, and the step's threads wait for the straggler at every barrier: on 2 cores one
    worker cost 25% of compute-only. Reserving its core is what a CPU training setup does,
    and both compute-only and effective then run with the same compute threads.
    """
    reason = missing_capability(framework, REAL_DATA)
    if reason:
        pytest.skip(f"{reason}: it cannot train from real data yet")
    shapes = dict(smoke) if dlperf.profile == "smoke" else {}
    base = dlperf.scenario(framework, MODEL, num_classes=SPEC.num_classes, **shapes)
    if reserve_cores and base.device == "cpu":
        base = base.replace(intra_op_threads=max(1, usable_cpus() - reserve_cores))
    return base


def _compute_only(dlperf, base, label):
    runs = _compute.setdefault((base.framework, dlperf.profile, base.intra_op_threads), [])
    if len(runs) < 2:
        runs.append(dlperf.run(base.replace(label=label)))
    return runs


def _mean_throughput(runs):
    return sum(r.throughput.value for r in runs) / len(runs)


def _speed_only(result):
    """The result without its accuracy: a few steps here say nothing about learning (test_accuracy does)."""
    return dataclasses.replace(result, metrics={k: m for k, m in result.metrics.items()
                                                if not k.startswith("accuracy")})


def _three_figures(dlperf, base, data_dir, workers, suffix=""):
    data = FRAMEWORK_FORMATS[base.framework]
    computes = _compute_only(dlperf, base, "compute_only")
    real = base.replace(data=data, data_dir=str(data_dir), loader_workers=workers)
    loader = dlperf.run(real.replace(label=f"loader_only{suffix}"), loader_only=True)
    effective = dlperf.run(real.replace(label=f"effective{suffix}"))
    assert "input_pipeline" in effective.details, (
        f"the {base.framework} core is listed with {REAL_DATA!r} in train.CAPABILITIES but its result "
        "has no details['input_pipeline']: did it train on synthetic data instead?")
    computes = _compute_only(dlperf, base, "compute_only_after")
    balance = balance_of(_mean_throughput(computes), loader.throughput.value, effective.throughput.value)
    dlperf.ledger.metric(f"loader_only{suffix}", "throughput", loader.throughput.samples, "samples/s")
    return computes[0], loader, effective, balance


#: Loader + training on a small shared VM swings more than training alone (torch, quiet A/A runs on
#: 2 cores: effective 183 then 108 img/s), so its speed figures are held at 50%: a halving still fails.
#: Memory is held at the run's tolerance.
@pytest.mark.tolerance(throughput=0.5, speedup=0.5)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_loader_is_not_the_bottleneck(dlperf, framework, data_root, request):
    workers = loader_workers(dlperf.profile)
    base = _base(dlperf, framework, reserve_cores=workers)
    data_dir = ensure_image_set(data_root, SPEC, formats=(FRAMEWORK_FORMATS[framework],))
    real = base.replace(data=FRAMEWORK_FORMATS[framework], data_dir=str(data_dir), loader_workers=workers)
    # The loader alone (no training) against training alone, interleaved: their ratio is the claim.
    paired = dlperf.run_paired(base.replace(label="compute_only"),
                               Variant(real.replace(label="loader_only"), module="pytest_dlperf.child.loaders"),
                               record=False, pairs=PAIRS, processes=1, decided=decided_at(THRESHOLD))
    compute, loader = paired.results["compute_only"], paired.results["loader_only"]
    ratio = paired.ratio("loader_only")
    dlperf.ledger.record(compute)
    dlperf.ledger.metric("loader_only", "throughput", loader.throughput.samples, "samples/s")
    dlperf.ledger.speedup("loader_only_vs_compute_only", ratio)
    effective = dlperf.run(real.replace(label="effective"))
    assert "input_pipeline" in effective.details, (
        f"the {framework} core is listed with {REAL_DATA!r} in train.CAPABILITIES but its result "
        "has no details['input_pipeline']: did it train on synthetic data instead?")
    balance = balance_of(compute.throughput.value, loader.throughput.value, effective.throughput.value)
    request.node.user_properties.append(("dlperf.pipeline.efficiency", f"{balance.efficiency:.3f}"))
    request.node.user_properties.append(("dlperf.pipeline.balance", balance.explain()))
    if dlperf.profile == "smoke":
        # Training fed by a loader process on 2 cores swings beyond any tolerance with no change
        # (torch effective: 183, 108, then 80 img/s in CI while compute-only held 124-150), so on
        # the smoke profile the effective figure is recorded, not held against a baseline.
        dlperf.check(_speed_only(compute))
    else:
        dlperf.check(_speed_only(compute), _speed_only(effective))
    assert decide(ratio, THRESHOLD) != REGRESSION, (
        f"{framework}: the loader alone cannot feed the model: loader-only/compute-only {ratio.describe()} "
        f"(paired rounds, {workers} loader workers; slower beyond the {THRESHOLD:.0%} threshold)")
    if dlperf.profile != "smoke":
        # On a 2-core CI machine any loader process competes with the training step for a core
        # (measured: 76-104% of compute-only from run to run with one worker): there the claim is
        # the loader's capacity above, and the efficiency is recorded.
        assert not balance.data_bound, f"{framework} with {workers} loader workers: {balance.explain()}"


@pytest.mark.slow
@pytest.mark.tolerance(throughput=0.5)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_data_bound_configuration_is_detected(dlperf, framework, data_root, request):
    base = _base(dlperf, framework, smoke=DATA_BOUND_SMOKE)
    data_dir = ensure_image_set(data_root, EXPENSIVE_SPEC, formats=(FRAMEWORK_FORMATS[framework],))
    compute, loader, effective, balance = _three_figures(dlperf, base, data_dir, 0, "_data_bound")
    request.node.user_properties.append(("dlperf.pipeline.efficiency", f"{balance.efficiency:.3f}"))
    request.node.user_properties.append(("dlperf.pipeline.balance", balance.explain()))
    dlperf.check(_speed_only(effective))
    assert balance.data_bound, (
        f"{framework}: {EXPENSIVE_SPEC.image_size}px JPEGs decoded with 0 workers should starve {MODEL}, "
        f"but the detector says {balance.explain()}")
