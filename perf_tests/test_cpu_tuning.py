"""Seed 003: thread, OpenMP and NUMA settings speed up CPU training; each is measured against the default.

The seed trains ResNet-50 (tf_cnn_benchmarks, synthetic data, NHWC) on an 18-core,
2-socket Xeon and reaches 6x over the default with intel-tensorflow, OMP/KMP settings
and ``numactl --interleave=all``. A 2-core CI machine cannot show 6x, so no fixed
speedup is asserted: each setting's speedup over the default configuration measured
in this same session is recorded as a ``speedup`` metric and held against this
machine's baseline (``--update-baselines`` records it), and a setting that makes
training slower is reported as slower (a SlowdownWarning and a
``dlperf.<setting>.slower_than_default`` property), never passed off as a gain.
"""

from __future__ import annotations

import warnings

import pytest

from pytest_dlperf import tuning

MODEL = "resnet50"  # the seed's model
SMOKE = dict(image_size=32, batch_size=8, warmup_steps=2, rounds=5, steps_per_round=2)
FRAMEWORKS = [pytest.param(fw, marks=pytest.mark.framework(fw), id=fw) for fw in ("torch", "tensorflow", "mxnet")]

#: The default configuration's result per (framework, profile), measured once per session.
_defaults: dict[tuple[str, str], object] = {}


def _base(dlperf, framework):
    shapes = SMOKE if dlperf.profile == "smoke" else {}
    return dlperf.scenario(framework, MODEL, **shapes)


def _default(dlperf, base):
    key = (base.framework, dlperf.profile)
    if key not in _defaults:
        _defaults[key] = dlperf.run(tuning.seed_003_settings(base.framework)[0].apply(base))
    return _defaults[key]


def _assert_applied(setting, run):
    """The child saw the setting: environment recorded by the child, threads reported by the framework."""
    seen = run.environment.get("env", {})
    for name, value in setting.env.items():
        assert seen.get(name) == value, f"{setting.name}: the child ran with {name}={seen.get(name)!r}, not {value!r}"
    assert run.environment["settings"]["launch_prefix"] == list(setting.launch_prefix)
    if setting.intra_op_threads is not None and "intra_op_threads" in run.environment:
        assert run.environment["intra_op_threads"] == setting.intra_op_threads


#: Thread and OpenMP-wait settings on a small shared VM swing from run to run far more than plain
#: throughput does, and a speedup is the ratio of two such figures (quiet A/A runs on 2 cores: torch
#: intra_inter_threads 1.36x then 0.78x; MXNet numactl_interleave 1.65x then 0.79x), so these figures
#: are held at 75%: a setting that makes training four times slower still fails.
@pytest.mark.tolerance(0.75)
@pytest.mark.parametrize("name", tuning.SETTING_NAMES)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_cpu_setting_against_default(dlperf, framework, name, request):
    base = _base(dlperf, framework)
    setting = {s.name: s for s in tuning.seed_003_settings(framework)}[name]
    if setting.skip_reason:
        pytest.skip(f"{name}: {setting.skip_reason}")
    request.node.user_properties.append((f"dlperf.{name}.settings", setting.summary()))
    request.node.user_properties.append(("dlperf.topology", tuning.topology().describe()))
    default = _default(dlperf, base)
    if name == "default":
        dlperf.check(default)
        return

    run = dlperf.run(setting.apply(base))
    _assert_applied(setting, run)
    reference = default.throughput.value
    dlperf.metric(name, "speedup", run.speedup_samples_over(default), "x")
    judgement = tuning.judge(run.throughput.samples, default.throughput.samples)
    request.node.user_properties.append((f"dlperf.{name}.judgement", judgement.describe()))
    if judgement.slower:
        request.node.user_properties.append((f"dlperf.{name}.slower_than_default", f"{judgement.speedup:.3f}"))
        warnings.warn(tuning.SlowdownWarning(
            f"{framework} {name} ({setting.summary()}) is SLOWER than the default: {judgement.describe()}, "
            f"{run.throughput.value:.1f} vs {reference:.1f} img/s"), stacklevel=1)
    dlperf.check(run)
