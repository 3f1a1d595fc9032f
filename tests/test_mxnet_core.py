"""The MXNet core's refusals and environment handling: fast, no training.

Everything but the last test runs without mxnet installed: the core imports mxnet
only inside functions, after it has put the thread settings into the environment.
"""

from __future__ import annotations

import os
import sys

import pytest

from pytest_dlperf.child.cores import mxnet_core, mxnet_support
from pytest_dlperf.scenario import Scenario, ScenarioError


#: The variables these tests make apply_environment() write, as they were when the module was imported.
WRITTEN = ("OMP_NUM_THREADS", "MXNET_CPU_WORKER_NTHREADS", "MXNET_CUDNN_AUTOTUNE_DEFAULT", "NVIDIA_TF32_OVERRIDE")
AT_IMPORT = {name: os.environ.get(name) for name in WRITTEN}


@pytest.fixture(autouse=True)
def environment_restored():
    """apply_environment() writes os.environ; monkeypatch.delenv of an unset variable records nothing,
    so without this OMP_NUM_THREADS=2 from one test stayed set for every later test of the session."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def scenario(**changes) -> Scenario:
    settings = dict(model="resnet18", image_size=32, num_classes=10, batch_size=4)
    settings.update(changes)
    return Scenario(framework="mxnet", **settings)


@pytest.mark.parametrize("given, expected", [
    ("resnet18", "resnet18_v1"), ("resnet50", "resnet50_v1"), ("resnet50_v2", "resnet50_v2"),
    ("mobilenetv2_1.0", "mobilenetv2_1.0"),
])
def test_scenario_model_names_map_to_the_gluon_zoo(given, expected):
    assert mxnet_core.zoo_name(given) == expected


@pytest.mark.parametrize("changes, words", [
    (dict(precision="tf32"), ["no TF32 setting", "NVIDIA_TF32_OVERRIDE", "amp_fp16", "amp_bf16"]),
    (dict(precision="amp_fp16"), ["FP16 gemm on cpu not implemented", "amp_bf16", "cuda"]),
    (dict(precision="amp_bf16", device="cuda"), ["oneDNN", "amp_fp16"]),
    (dict(kvstore="nccl"), ["needs device='cuda'"]),
    (dict(kvstore="dist_sync"), ["launcher", "DMLC_ROLE"]),
    (dict(data_format="NHWC"), ["NCHW"]),
    (dict(jit_compile=True), ["XLA"]),
])
def test_unsupported_settings_are_refused_with_the_alternative(changes, words, monkeypatch):
    monkeypatch.delenv("DMLC_ROLE", raising=False)
    with pytest.raises(ScenarioError) as err:
        mxnet_support.check_supported(scenario(**changes))
    for word in words:
        assert word in str(err.value)


def test_default_kvstore_is_device_on_gpu_and_local_on_cpu():
    assert mxnet_support.default_kvstore(scenario()) == "local"
    assert mxnet_support.default_kvstore(scenario(device="cuda")) == "device"
    assert mxnet_support.default_kvstore(scenario(kvstore="device")) == "device"


def test_thread_counts_go_into_the_environment_before_mxnet_loads(monkeypatch):
    monkeypatch.delitem(sys.modules, "mxnet", raising=False)
    for name in ("OMP_NUM_THREADS", "MXNET_CPU_WORKER_NTHREADS"):
        monkeypatch.delenv(name, raising=False)
    mxnet_core.apply_environment(scenario(intra_op_threads=2, inter_op_threads=1))
    import os

    assert os.environ["OMP_NUM_THREADS"] == "2"
    assert os.environ["MXNET_CPU_WORKER_NTHREADS"] == "1"


def test_a_thread_count_contradicting_the_env_is_an_error(monkeypatch):
    monkeypatch.delitem(sys.modules, "mxnet", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    with pytest.raises(ScenarioError, match="contradicts"):
        mxnet_core.apply_environment(scenario(intra_op_threads=2))


def test_threads_cannot_be_applied_after_mxnet_was_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "mxnet", object())
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with pytest.raises(ScenarioError, match="imported before"):
        mxnet_core.apply_environment(scenario(intra_op_threads=2))


def test_cuda_gets_seed_000_autotune_and_strict_fp32_unless_env_says_otherwise(monkeypatch):
    import os

    monkeypatch.delitem(sys.modules, "mxnet", raising=False)
    monkeypatch.delenv("MXNET_CUDNN_AUTOTUNE_DEFAULT", raising=False)
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")
    mxnet_core.apply_environment(scenario(device="cuda"))
    assert os.environ["MXNET_CUDNN_AUTOTUNE_DEFAULT"] == "2"
    assert os.environ["NVIDIA_TF32_OVERRIDE"] == "1"  # the user's choice wins


def test_unknown_model_names_the_zoo():
    pytest.importorskip("mxnet")
    import mxnet as mx

    with pytest.raises(ScenarioError, match="Gluon model zoo has no model 'resnet7_v1'"):
        mxnet_core.build_model(scenario(model="resnet7"), mx.cpu())


def test_no_value_written_by_an_earlier_test_is_left_in_the_environment():
    """Last in the file, after every test that made apply_environment() write os.environ."""
    assert {name: os.environ.get(name) for name in WRITTEN} == AT_IMPORT


@pytest.mark.parametrize("hybridize, active, compiles", [(None, True, False), (True, True, True),
                                                          (False, False, False)])
def test_hybridize_setting_chooses_the_cached_graph_or_imperative_gluon(hybridize, active, compiles):
    """None: hybridized as the core always was, no compile figures; True: the compiled scenario
    (its first step is timed as compile time); False: imperative Gluon, the eager side."""
    pytest.importorskip("mxnet")
    loop = mxnet_core.MXNetTrainingLoop(scenario(hybridize=hybridize))
    assert loop.net._active is active and loop.loss_fn._active is active
    assert loop.compiles is compiles
    assert loop.describe()["hybridize"] == ("static_alloc, static_shape" if active else "off (imperative)")
