"""Seeds 000 and 001: the input pipeline must keep up with training, and we can tell when it does not.

Seed 001 finds ResNet-18 "limited by data loading" (771 vs 805 img/s whatever the
precision; "a lot of variance ... caused by data loading waiting time"); seed 000
feeds MXNet from RecordIO with an index and ``--data-nthreads``. For each framework
this measures three figures on the same shapes:

* compute-only: training on synthetic batches already in memory;
* loader-only: the framework's own loader alone (``python -m pytest_dlperf.loaders``);
* effective: training fed by that loader.

The configuration under test must not be data-bound (effective >= 90% of
compute-only), and a configuration built to be data-bound (JPEGs of photo size,
decoded in the training process) must be detected as such, so the detector is
proven to fire. All three figures are recorded and held against the baselines.
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_dlperf.datasets import FRAMEWORK_FORMATS, ImageSetSpec, ensure_image_set
from pytest_dlperf.loaders import classify, run_loader_only
from pytest_dlperf.worker import REAL_DATA, missing_capability

MODEL = "resnet18"  # seed 001's data-bound model
#: Small JPEGs, decoded by 2 loader workers (threads for tf.data and MXNet): the configuration under test.
SPEC = ImageSetSpec(num_classes=10, train_per_class=160, val_per_class=40, image_size=64)
WORKERS = 2
#: Large photo-sized JPEGs (1.3 megapixels, ~45 ms each to decode here) decoded in the training process.
EXPENSIVE_SPEC = ImageSetSpec(num_classes=10, train_per_class=2, val_per_class=1, image_size=1280, noise=0.3)
SMOKE = dict(image_size=32, batch_size=16, warmup_steps=2, rounds=5, steps_per_round=2)

FRAMEWORKS = [pytest.param(fw, marks=pytest.mark.framework(fw), id=fw) for fw in ("torch", "tensorflow", "mxnet")]

#: Compute-only results per (framework, profile), shared by both tests of this module: one measured
#: before and one after the first effective run, so drift in a shared machine's load cancels out.
_compute: dict[tuple[str, str], list] = {}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "dlperf-data"


def _base(dlperf, framework):
    reason = missing_capability(framework, REAL_DATA)
    if reason:
        pytest.skip(f"{reason}: it cannot train from real data yet")
    shapes = SMOKE if dlperf.profile == "smoke" else {}
    return dlperf.scenario(framework, MODEL, num_classes=SPEC.num_classes, **shapes)


def _compute_only(dlperf, base, label):
    runs = _compute.setdefault((base.framework, dlperf.profile), [])
    if len(runs) < 2:
        runs.append(dlperf.run(base.replace(label=label)))
    return runs


def _mean_throughput(runs):
    return sum(r.throughput.value for r in runs) / len(runs)


def _speed_only(result):
    """The result without its accuracy: a few steps here say nothing about learning (test_accuracy does)."""
    return dataclasses.replace(result, metrics={k: m for k, m in result.metrics.items()
                                                if not k.startswith("accuracy")})


def _three_figures(dlperf, base, data_dir, workers, tmp_path, suffix=""):
    data = FRAMEWORK_FORMATS[base.framework]
    computes = _compute_only(dlperf, base, "compute_only")
    real = base.replace(data=data, data_dir=str(data_dir), loader_workers=workers)
    loader = run_loader_only(real.replace(label=f"loader_only{suffix}"), tmp_path / "loader")
    effective = dlperf.run(real.replace(label=f"effective{suffix}"))
    assert "input_pipeline" in effective.details, (
        f"the {base.framework} core is listed with {REAL_DATA!r} in worker.CAPABILITIES but its result "
        "has no details['input_pipeline']: did it train on synthetic data instead?")
    computes = _compute_only(dlperf, base, "compute_only_after")
    verdict = classify(_mean_throughput(computes), loader.throughput.value, effective.throughput.value)
    dlperf.metric(f"loader_only{suffix}", "throughput", loader.throughput.samples, "samples/s")
    return computes[0], loader, effective, verdict


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_loader_is_not_the_bottleneck(dlperf, framework, data_root, tmp_path, request):
    base = _base(dlperf, framework)
    data_dir = ensure_image_set(data_root, SPEC, formats=(FRAMEWORK_FORMATS[framework],))
    compute, loader, effective, verdict = _three_figures(dlperf, base, data_dir, WORKERS, tmp_path)
    request.node.user_properties.append(("dlperf.pipeline.efficiency", f"{verdict.efficiency:.3f}"))
    request.node.user_properties.append(("dlperf.pipeline.verdict", verdict.explain()))
    dlperf.check(_speed_only(compute), _speed_only(effective))
    assert not verdict.data_bound, f"{framework} with {WORKERS} loader workers: {verdict.explain()}"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_data_bound_configuration_is_detected(dlperf, framework, data_root, tmp_path, request):
    base = _base(dlperf, framework)
    data_dir = ensure_image_set(data_root, EXPENSIVE_SPEC, formats=(FRAMEWORK_FORMATS[framework],))
    compute, loader, effective, verdict = _three_figures(dlperf, base, data_dir, 0, tmp_path, "_data_bound")
    request.node.user_properties.append(("dlperf.pipeline.efficiency", f"{verdict.efficiency:.3f}"))
    request.node.user_properties.append(("dlperf.pipeline.verdict", verdict.explain()))
    dlperf.check(_speed_only(effective))
    assert verdict.data_bound, (
        f"{framework}: {EXPENSIVE_SPEC.image_size}px JPEGs decoded with 0 workers should starve {MODEL}, "
        f"but the detector says {verdict.explain()}")
