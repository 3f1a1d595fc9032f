"""TensorFlow training core: a Keras model, a custom step under ``tf.function``, SGD with momentum.

Written the way the TensorFlow mixed-precision guide and the Keras custom-training-loop
guide write it: a ``mixed_float16`` / ``mixed_bfloat16`` global policy, logits cast to
float32 before the loss, ``LossScaleOptimizer`` (dynamic) for fp16, ``GradientTape``
inside one ``tf.function`` (XLA with ``jit_compile``), synthetic batches already on
the device. A static loss scale (seed 001's ``--static-loss-scale 256``) uses the
Keras 3 idiom, the inner optimizer's ``loss_scale_factor``: Keras 3 removed
``LossScaleOptimizer(dynamic=False)``.

Models: ``resnet50`` (and any other name of ``keras.applications``, e.g. ``resnet101``,
``mobilenet_v2``) is the Keras application built with ``weights=None``. Keras has no
ResNet-18, so :func:`resnet18` builds torchvision's ResNet-18 (BasicBlock [2, 2, 2, 2])
from Keras layers, layer for layer: seed 001 measures ResNet-18, and the three
frameworks' figures are only comparable side by side on the same network.

With ``scenario.data='tfrecord'`` each step takes its batch from the scenario's
``tf.data`` pipeline (so the timed step includes waiting for data: the effective
throughput). After the timed rounds, outside any timing, the model is evaluated in
inference mode (``accuracy_top1``/``accuracy_top5``) on the validation TFRecord, when
the run trained on real data.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import tensorflow as tf
import keras

from pytest_dlperf.scenario import Scenario, ScenarioError
from pytest_dlperf.child.synthetic import batches as synthetic_batches
from pytest_dlperf.child.measure import measure
from pytest_dlperf.child.loaders import accuracy_metrics, evaluate_real_data, tf_loader
from pytest_dlperf.child.cores.tf_models import build_model

#: Distinct synthetic batches cycled through (enough to defeat caching, small on the device).
SYNTHETIC_POOL = 4
#: Ops that hold FLOPs we do not count; a graph with any of them gets no FLOP figure rather than a low one.
UNCOUNTED_FLOP_OPS = ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
                      "DepthwiseConv2dNativeBackpropFilter", "Conv3D", "BatchMatMulV2", "BatchMatMulV3", "Einsum")
#: Keras's default start for dynamic loss scaling (GradScaler starts at 2**16).
INITIAL_LOSS_SCALE = 2.0**15
POLICIES = {"fp32": "float32", "tf32": "float32", "amp_fp16": "mixed_float16", "amp_bf16": "mixed_bfloat16"}


# --------------------------------------------------------------------------- configuration


def apply_threads(scenario: Scenario) -> None:
    """Thread pools are fixed when the runtime starts: call before any op runs."""
    if scenario.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(scenario.intra_op_threads)
    if scenario.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(scenario.inter_op_threads)


def select_device(scenario: Scenario) -> None:
    """A CPU scenario hides the GPUs (so it really runs on the CPU); a CUDA one needs one."""
    gpus = tf.config.list_physical_devices("GPU")
    if scenario.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
        return
    if not gpus:
        raise ScenarioError(
            "device='cuda' but TensorFlow sees no GPU: install the CUDA build (pip install 'tensorflow[and-cuda]'), "
            "not tensorflow-cpu, and check CUDA_VISIBLE_DEVICES"
        )
    for gpu in gpus:  # allocate as needed, so peak memory means what the model used
        tf.config.experimental.set_memory_growth(gpu, True)


def gpu_details() -> dict[str, Any]:
    gpu = tf.config.list_physical_devices("GPU")[0]
    return tf.config.experimental.get_device_details(gpu)


def configure_precision(scenario: Scenario) -> None:
    """fp32 is strict (TF32 off); tf32 allows TF32 tensor-core math; amp_* set the Keras policy."""
    tf.config.experimental.enable_tensor_float_32_execution(scenario.precision == "tf32")
    if scenario.precision == "tf32" and scenario.device == "cuda":
        major, _ = gpu_details().get("compute_capability", (0, 0))
        if major < 8:
            raise ScenarioError("precision='tf32' needs an Ampere or newer GPU (compute capability >= 8.0)")
    keras.mixed_precision.set_global_policy(POLICIES[scenario.precision])


def configure_data_format(scenario: Scenario) -> None:
    """NHWC (channels_last) by default; NCHW only where TensorFlow has the kernels: on a GPU."""
    if scenario.data_format == "NCHW" and scenario.device != "cuda":
        raise ScenarioError(
            "data_format='NCHW' needs a GPU: TensorFlow's CPU kernels (pooling, fused batch norm) are NHWC only; "
            "use data_format='NHWC' (or leave it unset) on the CPU"
        )
    keras.backend.set_image_data_format("channels_first" if scenario.data_format == "NCHW" else "channels_last")


def make_optimizer(scenario: Scenario, initial_scale: float = INITIAL_LOSS_SCALE) -> keras.optimizers.Optimizer:
    """SGD with momentum and weight decay, wrapped for fp16 loss scaling.

    Keras applies weight decay decoupled (``w -= lr * wd * w``), where ``torch.optim.SGD``
    adds ``wd * w`` to the gradient before momentum; at these settings the two differ little.
    ``initial_scale`` is where dynamic loss scaling starts.
    """
    fp16 = scenario.precision == "amp_fp16"
    static = fp16 and scenario.loss_scale != "dynamic"
    sgd = keras.optimizers.SGD(
        learning_rate=scenario.lr,
        momentum=scenario.momentum,
        weight_decay=scenario.weight_decay or None,
        loss_scale_factor=float(scenario.loss_scale) if static else None,
    )
    if fp16 and not static:
        return keras.mixed_precision.LossScaleOptimizer(sgd, initial_scale=initial_scale)
    return sgd


# --------------------------------------------------------------------------- FLOPs


def _conv_flops(op: Any) -> int:
    """2 x MACs of the convolution the op belongs to: 2 * |forward output| * kh * kw * Cin.

    Forward (Conv2D) and both gradients (input, filter) cost the same, whatever the
    padding; TensorFlow's own profiler estimates the gradients from the padded input
    size instead, which overcounts small feature maps (2x for ResNet-18 at 64 px).
    """
    if op.type == "Conv2D":
        dy, kernel = op.outputs[0].shape, op.inputs[1].shape
    elif op.type == "Conv2DBackpropInput":
        dy, kernel = op.inputs[2].shape, op.inputs[1].shape
    else:  # Conv2DBackpropFilter
        dy, kernel = op.inputs[2].shape, op.outputs[0].shape
    kh, kw, cin, _ = kernel.as_list()
    return 2 * dy.num_elements() * kh * kw * cin


def _matmul_flops(op: Any) -> int:
    a = op.inputs[0].shape.as_list()
    k = a[0] if op.get_attr("transpose_a") else a[1]
    return 2 * op.outputs[0].shape.num_elements() * k


def graph_flops(graph: tf.Graph) -> float | None:
    """Convolution and matmul FLOPs, forward and backward, as ``torch.utils.flop_counter`` counts them.

    Ops whose results nothing reads (the input gradient of the first convolution) are
    pruned before the step runs and not counted. None when a shape is unknown or the
    graph holds FLOP-carrying ops this does not count.
    """
    total = 0
    for op in graph.get_operations():
        if not any(t.consumers() for t in op.outputs):
            continue
        if op.type in UNCOUNTED_FLOP_OPS:
            return None
        try:
            if op.type in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"):
                total += _conv_flops(op)
            elif op.type == "MatMul":
                total += _matmul_flops(op)
        except (TypeError, ValueError):  # an unknown dimension
            return None
    return float(total) if total else None


#: The ops that carry a step's arithmetic, forward and backward: their dtype is the compute precision.
COMPUTE_OPS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMul", "BatchMatMulV2")


def graph_compute_dtypes(graph: tf.Graph) -> dict[str, int]:
    """How many convolution/matmul ops of the traced step run in each dtype, e.g. ``{"bfloat16": 60,
    "float32": 1}``: what the Keras policy really made of the step (a ``mixed_bfloat16`` policy
    keeps variables in float32 and computes in bfloat16)."""
    counts: dict[str, int] = {}
    for op in graph.get_operations():
        if op.type in COMPUTE_OPS:
            name = op.get_attr("T").name
            counts[name] = counts.get(name, 0) + 1
    return counts


# --------------------------------------------------------------------------- the loop


class TfTrainingLoop:
    """One training step under ``tf.function``; the parts default to what ``scenario`` asks for.

    ``model``, ``data`` (pairs of images and int labels), ``optimizer`` and ``loss_fn``
    (``loss_fn(labels, float32_logits) -> scalar``) can be given instead, as to
    ``Model.compile``: the loss-scaling tests train a small model through this same step.
    """

    def __init__(
        self,
        scenario: Scenario,
        data: Sequence[tuple[Any, Any]] | None = None,
        *,
        model: keras.Model | None = None,
        optimizer: keras.optimizers.Optimizer | None = None,
        loss_fn: Callable[[Any, Any], Any] | None = None,
    ):
        self.scenario = scenario
        self.device = "/GPU:0" if scenario.device == "cuda" else "/CPU:0"
        # CPU: a tf.function call returns when its kernels have run; a GPU call only queues them.
        self.synchronous = scenario.device == "cpu"
        self.samples_per_step = scenario.batch_size
        self.model = model if model is not None else build_model(scenario)
        self.loss_fn = loss_fn or keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.optimizer = optimizer if optimizer is not None else make_optimizer(scenario)
        self.optimizer.build(self.model.trainable_variables)
        self.dynamic = isinstance(self.optimizer, keras.mixed_precision.LossScaleOptimizer)
        #: Real data: batches from the scenario's tf.data pipeline, fetched inside ``step()`` and so timed with it.
        self.loader: Iterator[tuple[tf.Tensor, tf.Tensor]] | None = None
        with tf.device(self.device):
            self.skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_steps")
            if data is not None:
                self.data = list(data)
            elif scenario.data == "synthetic":
                self.data = self._synthetic()
            else:
                self.loader = tf_loader.endless(scenario)
                self.data = [next(self.loader)]  # one batch to trace the step and count FLOPs on
        self._i = 0
        self._train_step = tf.function(self._step_fn, jit_compile=scenario.jit_compile, reduce_retracing=True)
        #: XLA compiles at the first call; the trace before it (here, for the FLOP count) is compile time too.
        self.compiles = scenario.jit_compile
        traced = time.perf_counter()
        self.flops_per_step = self._count_flops()
        self.compile_setup_seconds = time.perf_counter() - traced
        if scenario.device == "cuda":
            tf.config.experimental.reset_memory_stats("GPU:0")

    def _to_tensors(self, images: np.ndarray, labels: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
        """NCHW numpy images (and int labels) as the model's layout on the loop's device."""
        if self.scenario.data_format != "NCHW":
            images = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
        return tf.identity(images), tf.identity(labels.astype(np.int32))

    def _synthetic(self) -> list[tuple[tf.Tensor, tf.Tensor]]:
        s = self.scenario
        return [self._to_tensors(images, labels)
                for images, labels in synthetic_batches(SYNTHETIC_POOL, s.batch_size, s.image_size, s.num_classes,
                                                        s.seed)]

    def _step_fn(self, images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            loss = self.loss_fn(labels, tf.cast(logits, tf.float32))
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.model.trainable_variables)
        if self.dynamic:
            before = tf.identity(self.optimizer.dynamic_scale.value)
            self.optimizer.apply(grads, self.model.trainable_variables)
            # The LossScaleOptimizer skips a step with non-finite gradients and halves the scale.
            self.skipped.assign_add(tf.cast(self.optimizer.dynamic_scale.value < before, tf.int64))
        else:
            self.optimizer.apply(grads, self.model.trainable_variables)
        return loss

    def _count_flops(self) -> float | None:
        """FLOPs of one step, counted on the traced graph of the step (see :func:`graph_flops`)."""
        x, y = self.data[0]
        graph = self._train_step.get_concrete_function(x, y).graph
        self.compute_dtypes = graph_compute_dtypes(graph)
        return graph_flops(graph)

    def step(self) -> tf.Tensor:
        if self.loader is not None:
            x, y = next(self.loader)
        else:
            x, y = self.data[self._i % len(self.data)]
        self._i += 1
        return self._train_step(x, y)

    def sync(self) -> None:
        if not self.synchronous:
            tf.test.experimental.sync_devices()

    def losses_to_floats(self, handles: Sequence[tf.Tensor]) -> list[float]:
        return [float(v) for v in tf.stack(list(handles)).numpy()]

    def loss_scale(self) -> float | None:
        if self.dynamic:
            return float(self.optimizer.dynamic_scale.numpy())
        factor = getattr(self.optimizer, "loss_scale_factor", None)
        return float(factor) if factor is not None else None

    def skipped_steps(self) -> int:
        return int(self.skipped.numpy())

    def compile_events(self) -> dict[str, list[str]] | None:
        """Retracings of the train step (each one an XLA recompilation); XLA has no graph breaks: an
        op it cannot compile fails the step. None without jit_compile."""
        if not self.compiles:
            return None
        traces = int(self._train_step.experimental_get_tracing_count())
        return {"recompilations": [f"train step traced again (trace {n + 1} of {traces}: a new input "
                                   "signature or Python value)" for n in range(1, traces)]}

    def peak_device_memory(self) -> int | None:
        if self.scenario.device != "cuda":
            return None
        return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])

    def evaluate(self) -> dict[str, Any]:
        """Top-1/top-5 accuracy on the validation TFRecord in inference mode (BatchNorm moving
        statistics), after the timed rounds."""
        infer = tf.function(lambda x: tf.cast(self.model(x, training=False), tf.float32), reduce_retracing=True)

        def logits_and_labels() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for x, y in tf_loader.eval_batches(self.scenario):
                yield infer(x).numpy(), np.asarray(y)

        return accuracy_metrics(logits_and_labels(), self.scenario.num_classes)


# --------------------------------------------------------------------------- environment, entry point


def onednn_enabled() -> bool | None:
    """Whether this TensorFlow build runs oneDNN kernels (TF_ENABLE_ONEDNN_OPTS, default on for x86 Linux)."""
    try:
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return None


def environment(scenario: Scenario) -> dict[str, Any]:
    build = tf.sysconfig.get_build_info()
    env: dict[str, Any] = {
        "framework": "tensorflow",
        "framework_version": tf.__version__,
        "keras_version": keras.__version__,
        "onednn": onednn_enabled(),
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset"),
        # 0 means TensorFlow's default: one thread per core.
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "tensor_float_32": tf.config.experimental.tensor_float_32_execution_enabled(),
        "mixed_precision_policy": keras.mixed_precision.global_policy().name,
        "image_data_format": keras.backend.image_data_format(),
        "jit_compile": scenario.jit_compile,
    }
    if scenario.device == "cuda":
        details = gpu_details()
        major, minor = details.get("compute_capability", (0, 0))
        env.update(
            cuda_version=build.get("cuda_version"),
            cudnn_version=build.get("cudnn_version"),
            gpu_name=details.get("device_name"),
            gpu_capability=f"{major}.{minor}",
            gpu_count=len(tf.config.list_physical_devices("GPU")),
        )
    return env


def configure(scenario: Scenario) -> None:
    """Everything global, in the order TensorFlow needs: threads and devices before any op."""
    apply_threads(scenario)
    select_device(scenario)
    configure_data_format(scenario)
    configure_precision(scenario)
    keras.utils.set_random_seed(scenario.seed)


def train(scenario: Scenario, progress: Any = None) -> tuple[Any, list[float], dict[str, Any], dict[str, Any]]:
    """Entry point used by the worker: build, measure, describe the environment."""
    configure(scenario)
    loop = TfTrainingLoop(scenario)
    metrics, losses, details = measure(loop, scenario, progress)
    details["compute_dtypes"] = loop.compute_dtypes
    evaluate_real_data(loop, scenario, metrics, details, progress)
    return metrics, losses, details, environment(scenario)
