"""Unit tests of the TensorFlow core: the ResNet-18 it builds, its FLOP count, its errors, a child run."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from pytest_dlperf.child.cores import tf_core, tf_models  # noqa: E402
from pytest_dlperf.processes.runner import ScenarioFailed, run_scenario  # noqa: E402
from pytest_dlperf.scenario import Scenario, ScenarioError  # noqa: E402

#: torchvision.models.resnet18(num_classes=1000): sum(p.numel() for p in model.parameters()).
TORCHVISION_RESNET18_PARAMETERS = 11_689_512


def tiny(**changes) -> Scenario:
    settings = dict(framework="tensorflow", model="resnet18", batch_size=2, image_size=32, num_classes=10,
                    warmup_steps=1, rounds=2, steps_per_round=2, timeout=300.0)
    settings.update(changes)
    return Scenario(**settings)


def test_resnet18_has_torchvisions_parameter_count():
    model = tf_models.resnet18((224, 224, 3), 1000)
    trainable = sum(int(v.shape.num_elements()) for v in model.trainable_variables)
    assert trainable == TORCHVISION_RESNET18_PARAMETERS
    assert model.output_shape == (None, 1000)


def test_model_names_map_to_keras_applications():
    assert tf_models._application("resnet50") is keras.applications.ResNet50
    assert tf_models._application("mobilenet_v2") is keras.applications.MobileNetV2
    with pytest.raises(ScenarioError, match="no model 'resnet19'.*resnet50"):
        tf_models.build_model(tiny(model="resnet19"))


def test_the_small_nets_build_in_the_core_as_the_distributed_jobs_build_them():
    for name in tf_models.SMALL:
        model = tf_models.build_model(tiny(model=name))
        assert model.output_shape == (None, 10), name
    assert "tiny_cnn, convnet_bn (built here)" in str(pytest.raises(ScenarioError, tf_models.build_model,
                                                                    tiny(model="resnet19")).value)


#: A process that converts a function with autograph, then ends as its argument says.
AUTOGRAPH_CHILD = """
import os, sys
import tensorflow as tf
from pytest_dlperf.child.rank import exit_after_result

@tf.function
def clipped(x):
    if x > 0:
        return x + 1
    return x

clipped(tf.constant(1))
os._exit(0) if sys.argv[1] == "bare" else exit_after_result(0)
"""


def test_a_child_ending_without_teardown_leaves_no_autograph_source_behind(tmp_path):
    """Autograph deletes its generated sources at exit; a child ends with ``os._exit``, which skips that."""
    script = tmp_path / "child.py"  # autograph converts a function from its source file
    script.write_text(AUTOGRAPH_CHILD, encoding="utf-8")
    left = {}
    for ending in ("bare", "exit_after_result"):
        folder = tmp_path / ending
        folder.mkdir()
        done = subprocess.run([sys.executable, str(script), ending], env={**os.environ, "TMPDIR": str(folder)},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        left[ending] = sorted(p.name for p in folder.glob("__autograph_generated_file*"))
    assert left["bare"], "autograph wrote no source file here: the check below would see nothing"
    assert left["exit_after_result"] == []


def test_flops_are_three_forward_passes_less_the_unused_input_gradient():
    """Counted on the graph = computed by hand from the layers: fwd + grad input + grad weights."""
    s = tiny(batch_size=4, image_size=64)
    loop = tf_core.TfTrainingLoop(s)
    expected = 0
    for layer in loop.model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            kh, kw, cin, _ = layer.kernel.shape
            forward = 2 * s.batch_size * math.prod(layer.output.shape[1:]) * kh * kw * cin
            # the first convolution's input is the image: no gradient is computed for it
            expected += forward * (2 if layer.name == "stem_conv" else 3)
        elif isinstance(layer, keras.layers.Dense):
            expected += 3 * 2 * s.batch_size * layer.kernel.shape[0] * layer.kernel.shape[1]
    assert loop.flops_per_step == expected


def test_nchw_on_cpu_is_refused_with_the_fix():
    with pytest.raises(ScenarioError, match="NCHW.*needs a GPU.*NHWC"):
        tf_core.configure_data_format(tiny(data_format="NCHW"))


def test_a_child_run_records_threads_and_precision(tmp_path):
    result = run_scenario(tiny(precision="amp_bf16", intra_op_threads=1, inter_op_threads=1), tmp_path)
    env = result.environment
    assert (env["intra_op_threads"], env["inter_op_threads"]) == (1, 1)
    # what the policy made of the step: its convolutions and matmuls run in bfloat16, not just the policy's name
    dtypes = result.details["compute_dtypes"]
    assert max(dtypes, key=dtypes.get) == "bfloat16", dtypes
    assert len(result.losses) == 5 and result.details["flops_per_step"] > 0


def test_cuda_without_a_gpu_fails_clearly(tmp_path):
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    with pytest.raises(ScenarioFailed, match="invalid scenario.*sees no GPU"):
        run_scenario(tiny(device="cuda"), tmp_path)


def test_xla_loop_reports_compile_setup_and_a_retrace_as_a_recompilation():
    """jit_compile: the trace before the first step is compile time; a new input shape retraces (and so
    recompiles with XLA), counted as a recompilation with its reason."""
    s = tiny(jit_compile=True, batch_size=4, image_size=8)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(10)])
    data = [(tf.zeros((4, 8, 8, 3)), tf.zeros((4,), tf.int32))]
    loop = tf_core.TfTrainingLoop(s, data, model=model)
    assert loop.compiles and loop.compile_setup_seconds > 0
    loop.step()
    assert loop.compile_events() == {"recompilations": []}
    loop.data = [(tf.zeros((3, 8, 8, 3)), tf.zeros((3,), tf.int32))]  # a new batch size: a new signature
    loop.step()
    (reason,) = loop.compile_events()["recompilations"]
    assert "traced again" in reason
    assert tf_core.TfTrainingLoop(tiny(batch_size=4, image_size=8), data, model=model).compile_events() is None
