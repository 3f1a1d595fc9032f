"""MXNet training core: a Gluon model-zoo ResNet, hybridized, SGD through ``gluon.Trainer``.

Written the way MXNet 1.9's own examples write it (``example/image-classification``
``common/fit.py`` and the Gluon AMP tutorial): the KVStore is created with
``mx.kv.create(type)`` and handed to the Trainer, as ``fit.py`` does for ``--kv-store``
(so it is really used even on one device, where a type *string* would make Gluon skip
it); the network is built after ``amp.init()`` and hybridized with a static graph;
``autograd.record()`` / ``backward`` / ``trainer.step(batch_size)``.

Precisions:

- ``fp32``: float32 everywhere. On CUDA this core sets ``NVIDIA_TF32_OVERRIDE=0`` unless
  the scenario's env sets it: cuDNN 8 uses TF32 for float32 convolutions on Ampere by
  default, and a speedup over "fp32" should be over strict FP32, as the PyTorch core's is.
- ``amp_fp16`` (CUDA only): ``mxnet.contrib.amp``: float32 master parameters, AMP casts
  the operators on its fp16 list, dynamic loss scaling by AMP's ``LossScaler`` (starts
  at 2**16, halves on overflow and skips that update, doubles after 2000 clean steps).
  A numeric ``loss_scale`` is a static scale: the loss is multiplied by it and the
  optimizer's ``rescale_grad`` divides it out; nothing is skipped. Chosen over
  ``net.cast('float16')`` (seed 000's ``--dtype float16``) because AMP keeps the
  numerically sensitive operators in float32 and is MXNet 1.9's recommended path.
  MXNet has no float16 GEMM or convolution on CPU ("FP16 gemm on cpu not implemented"),
  so ``amp_fp16`` on CPU is refused.
- ``amp_bf16`` (CPU only): ``amp.init(target_dtype='bfloat16')``, oneDNN (MKLDNN)
  bfloat16 kernels, which need an AVX-512 CPU; no loss scaling (bfloat16 has float32's
  range). MXNet 1.9 has no bfloat16 kernels on CUDA.
- ``tf32``: MXNet 1.9 has no TF32 setting; refused with the alternatives.

MXNet's engine is asynchronous on CPU as well as on GPU: ``step()`` only queues work,
``sync()`` is ``mx.nd.waitall()``, and per-step host times would be meaningless
(``synchronous = False``). Threads: OpenMP and the engine read ``OMP_NUM_THREADS`` and
``MXNET_CPU_WORKER_NTHREADS`` when ``libmxnet`` loads, so :func:`train` puts
``intra_op_threads`` / ``inter_op_threads`` into the environment first and only then
imports mxnet (every ``import mxnet`` in this module is inside a function for that reason).

Data: synthetic batches already on the device, or, with ``scenario.data='recordio'``,
``mx.io.ImageRecordIter`` over the ``.rec`` + ``.idx`` pair (seed 000's
``train_imagenet.py`` input), one batch fetched inside each ``step()`` so the timed
step includes waiting for data. After the timed rounds, outside any timing, the net
is evaluated in predict mode (``accuracy_top1``/``accuracy_top5``) on the validation
RecordIO, when the run trained on real data.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from pytest_dlperf.child.cores.mxnet_support import (check_supported, default_kvstore, installed_distribution,
                                                     unsupported_gpu)
from pytest_dlperf.scenario import Scenario, ScenarioError
from pytest_dlperf.child.synthetic import batches as synthetic_batches
from pytest_dlperf.child.measure import measure
from pytest_dlperf.child.loaders import accuracy_metrics, evaluate_real_data

if TYPE_CHECKING:
    import mxnet

#: Distinct synthetic batches cycled through (enough to defeat caching, small on the device).
SYNTHETIC_POOL = 4
#: Seed 000: ``export MXNET_CUDNN_AUTOTUNE_DEFAULT=2`` (try every algorithm, pick the fastest).
CUDNN_AUTOTUNE_SEED = "2"
def zoo_name(model: str) -> str:
    """The scenario's ``resnet50`` is the Gluon zoo's ``resnet50_v1``; other names pass through."""
    return f"{model}_v1" if re.fullmatch(r"resnet\d+", model) else model


def apply_environment(scenario: Scenario) -> None:
    """Put thread counts and cuDNN/TF32 settings into the environment before mxnet loads.

    The scenario's own ``env`` (already in ``os.environ`` in the worker) wins for the
    defaults; a thread count that contradicts it is an error.
    """
    wanted = {}
    if scenario.intra_op_threads:
        wanted["OMP_NUM_THREADS"] = str(scenario.intra_op_threads)
    if scenario.inter_op_threads:
        wanted["MXNET_CPU_WORKER_NTHREADS"] = str(scenario.inter_op_threads)
    for name, value in wanted.items():
        given = os.environ.get(name)
        if given is not None and given != value:
            raise ScenarioError(
                f"{name}={given!r} in the environment contradicts the scenario's thread setting ({value}); "
                f"set one of them only"
            )
    defaults = {}
    if scenario.device == "cuda":
        defaults["MXNET_CUDNN_AUTOTUNE_DEFAULT"] = CUDNN_AUTOTUNE_SEED if scenario.cudnn_benchmark else "0"
        if scenario.precision == "fp32":
            defaults["NVIDIA_TF32_OVERRIDE"] = "0"
    if "mxnet" in sys.modules:
        late = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
        if late:
            raise ScenarioError(
                f"mxnet was imported before the core could set {late}: MXNet reads them when it loads; "
                f"pass them in the scenario's env or set them before importing mxnet"
            )
    os.environ.update(wanted)
    for name, value in defaults.items():
        os.environ.setdefault(name, value)


def build_model(scenario: Scenario, ctx: "mxnet.Context") -> "mxnet.gluon.HybridBlock":
    import mxnet as mx
    from mxnet.gluon.model_zoo import vision

    name = zoo_name(scenario.model)
    try:
        net = vision.get_model(name, classes=scenario.num_classes)
    except ValueError:
        raise ScenarioError(
            f"the Gluon model zoo has no model {name!r} (from {scenario.model!r}); e.g. resnet18, resnet50, "
            "resnet101, resnet50_v2, vgg16, mobilenetv2_1.0, densenet121"
        ) from None
    # fit.py's initializer: MSRA-style Gaussian Xavier, fan-in, magnitude 2.
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=ctx)
    if scenario.hybridize is not False:
        net.hybridize(static_alloc=True, static_shape=True)
    return net


class OverflowCounter:
    """Counts the updates AMP's dynamic loss scaler makes a Gluon Trainer skip.

    After ``amp.init_trainer(trainer)`` the Trainer asks its scaler ``has_overflow(params)``
    once per ``step()`` and returns without updating when it says yes (MXNet 1.9
    ``Trainer._update``); wrapping that one call counts exactly the skipped updates,
    without an extra device sync (the scaler has already synced to answer).
    """

    def __init__(self, trainer: Any):
        self.scaler = getattr(trainer, "_amp_loss_scaler", None)
        if self.scaler is None:
            raise ValueError("the trainer has no AMP loss scaler: call amp.init_trainer(trainer) first")
        self.skipped = 0
        check = self.scaler.has_overflow

        def counting(params: Any) -> bool:
            overflow = bool(check(params))
            self.skipped += overflow
            return overflow

        self.scaler.has_overflow = counting

    @property
    def loss_scale(self) -> float:
        """The scale the next step's loss is multiplied by."""
        return float(self.scaler.loss_scale)  # type: ignore[union-attr]  # set whenever fp16 loss scaling is on


class MXNetTrainingLoop:
    """One Gluon training step on a fixed pool of device-resident batches."""

    def __init__(self, scenario: Scenario):
        import mxnet as mx
        from mxnet import gluon
        from mxnet.contrib import amp

        self.scenario = scenario
        self.ctx = mx.gpu(0) if scenario.device == "cuda" else mx.cpu()
        #: The engine is asynchronous on CPU too: per-step host times would measure queueing.
        self.synchronous = False
        self.samples_per_step = scenario.batch_size
        fp16 = scenario.precision == "amp_fp16"
        self.dynamic = fp16 and scenario.loss_scale == "dynamic"
        self.static_scale = float(scenario.loss_scale) if fp16 and not self.dynamic else None
        if fp16:
            amp.init()  # before the network is built: it rewrites the operators it will use
        elif scenario.precision == "amp_bf16":
            amp.init(target_dtype="bfloat16")
        self.net = build_model(scenario, self.ctx)
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        if scenario.hybridize is not False:
            self.loss_fn.hybridize(static_alloc=True, static_shape=True)
        #: A compiled scenario (hybridize=True) has its first step (building the cached graph) timed;
        #: MXNet reports no graph breaks or recompilations (a static_shape graph fails on a new shape).
        self.compiles = scenario.hybridize is True
        optimizer_params: dict[str, Any] = {
            "learning_rate": scenario.lr,
            "momentum": scenario.momentum,
            "wd": scenario.weight_decay,
            "multi_precision": fp16,
        }
        if self.static_scale is not None:
            optimizer_params["rescale_grad"] = 1.0 / self.static_scale
        self.kvstore = mx.kv.create(default_kvstore(scenario))
        self.trainer = gluon.Trainer(
            self.net.collect_params(), "sgd", optimizer_params, kvstore=self.kvstore,
            # AMP skips an overflowing update inside Trainer._update(); an update on the
            # KVStore would already have applied it, so dynamic scaling needs it off.
            update_on_kvstore=False if self.dynamic else None,
        )
        self.overflows: OverflowCounter | None = None
        if self.dynamic:
            amp.init_trainer(self.trainer)
            self.overflows = OverflowCounter(self.trainer)
        #: Real data: batches from ``ImageRecordIter``, fetched inside ``step()`` and so timed with it.
        self.loader: Iterator[tuple[Any, Any]] | None = None
        if scenario.data == "synthetic":
            self.data = self._synthetic()
        else:
            # mxnet_loader imports mxnet, which this module loads only after train() sets its environment
            from pytest_dlperf.child.loaders import mxnet_loader

            self.loader = mxnet_loader.endless(scenario)
            self.data = []
        self._i = 0
        self.flops_per_step = None  # MXNet has no FLOP counter; achieved TFLOP/s is not reported

    def _synthetic(self) -> list[tuple[Any, Any]]:
        import mxnet as mx

        s = self.scenario
        return [
            (mx.nd.array(images, ctx=self.ctx, dtype="float32"), mx.nd.array(labels, ctx=self.ctx, dtype="float32"))
            for images, labels in synthetic_batches(SYNTHETIC_POOL, s.batch_size, s.image_size, s.num_classes, s.seed)
        ]

    def step(self) -> Any:
        from mxnet import autograd
        from mxnet.contrib import amp

        if self.loader is not None:
            x, y = (a.as_in_context(self.ctx) for a in next(self.loader))
        else:
            x, y = self.data[self._i % len(self.data)]
        self._i += 1
        with autograd.record():
            loss = self.loss_fn(self.net(x), y)
            if self.dynamic:
                with amp.scale_loss(loss, self.trainer) as scaled:
                    autograd.backward(scaled)
            elif self.static_scale is not None:
                autograd.backward(loss * self.static_scale)
        if not self.dynamic and self.static_scale is None:
            loss.backward()
        self.trainer.step(self.scenario.batch_size)
        return loss.mean()

    def sync(self) -> None:
        import mxnet as mx

        mx.nd.waitall()

    def losses_to_floats(self, handles: Sequence[Any]) -> list[float]:
        import mxnet as mx

        if not handles:
            return []
        return [float(v) for v in mx.nd.concat(*handles, dim=0).astype("float32").asnumpy()]

    def loss_scale(self) -> float | None:
        if self.overflows is not None:
            return self.overflows.loss_scale
        return self.static_scale

    def skipped_steps(self) -> int:
        return self.overflows.skipped if self.overflows is not None else 0

    def peak_device_memory(self) -> int | None:
        """GPU memory in use after training (MXNet's pool keeps its high-water mark)."""
        if self.scenario.device != "cuda":
            return None
        import mxnet as mx

        free, total = mx.context.gpu_memory_info(self.ctx.device_id)
        return int(total - free)

    def evaluate(self) -> dict[str, Any]:
        """Top-1/top-5 accuracy on the validation RecordIO in predict mode (BatchNorm running
        statistics), after the timed rounds."""
        from mxnet import autograd

        from pytest_dlperf.child.loaders import mxnet_loader  # imports mxnet: loaded only after train() sets its env

        def logits_and_labels() -> Iterator[tuple[Any, Any]]:
            with autograd.predict_mode():
                for x, y in mxnet_loader.eval_batches(self.scenario):
                    logits = self.net(x.as_in_context(self.ctx))
                    yield logits.astype("float32").asnumpy(), y.asnumpy()

        return accuracy_metrics(logits_and_labels(), self.scenario.num_classes)

    def compute_dtypes(self) -> dict[str, int]:
        """How many convolution and dense outputs of the hybridized graph that trained are of each
        dtype (type inference on its internals), e.g. ``{"bfloat16": 20}``: what AMP made of the
        network, not what was asked for. Empty when the network has no cached graph."""
        import numpy as np

        cached = getattr(self.net, "_cached_graph", None)
        if not cached:
            return {}
        inputs, graph = cached
        internals = graph.get_internals()
        _, types, _ = internals.infer_type(**{inputs[0].name: "float32"})
        counts: dict[str, int] = {}
        for name, dtype in zip(internals.list_outputs(), types):
            if name.endswith("_fwd_output") and ("conv" in name or "dense" in name) and dtype is not None:
                d = np.dtype(dtype)
                key = d.names[0] if d.names else d.name  # MXNet's bfloat16 is a named uint16 record
                counts[key] = counts.get(key, 0) + 1
        return counts

    def _precision_mode(self) -> str:
        if self.scenario.precision == "amp_bf16":
            return "mxnet.contrib.amp bfloat16 (oneDNN), no loss scaling"
        if self.dynamic:
            return "mxnet.contrib.amp float16, dynamic loss scaling"
        if self.static_scale is not None:
            return f"mxnet.contrib.amp float16, static loss scale {self.static_scale:g}"
        return "float32"

    def describe(self) -> dict[str, Any]:
        """How this loop trains: recorded in the result's environment."""
        return {
            "model": zoo_name(self.scenario.model),
            "layout": "NCHW",
            "kvstore": self.kvstore.type,
            "update_on_kvstore": getattr(self.trainer, "_update_on_kvstore", None),
            "precision_mode": self._precision_mode(),
            "hybridize": "static_alloc, static_shape" if self.scenario.hybridize is not False else "off (imperative)",
        }


def environment(scenario: Scenario, loop: Any) -> dict[str, Any]:
    import mxnet as mx
    import numpy as np
    from mxnet.runtime import Features

    features = Features()
    distribution = installed_distribution()
    env: dict[str, Any] = {
        "framework": "mxnet",
        "framework_version": mx.__version__,
        "mxnet_distribution": distribution,
        "numpy_version": np.__version__,
        "features": sorted(name for name, feature in features.items() if feature.enabled),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "default (one per core)"),
        "cpu_worker_threads": os.environ.get("MXNET_CPU_WORKER_NTHREADS", "default (1)"),
        "mkldnn": features.is_enabled("MKLDNN"),
    }
    env.update(loop.describe())
    if scenario.device == "cuda":
        cuda = re.search(r"cu(\d+)(\d)$", distribution or "")
        env.update(
            cuda_version=f"{cuda.group(1)}.{cuda.group(2)}" if cuda else None,
            gpu_count=mx.context.num_gpus(),
            gpu_memory_bytes=mx.context.gpu_memory_info(0)[1],
            cudnn_autotune=os.environ.get("MXNET_CUDNN_AUTOTUNE_DEFAULT"),
            nvidia_tf32_override=os.environ.get("NVIDIA_TF32_OVERRIDE"),
            cudnn=features.is_enabled("CUDNN"),
            nccl=features.is_enabled("NCCL"),
        )
    return env


def train(scenario: Scenario, progress: Any = None) -> tuple[Any, list[float], dict[str, Any], dict[str, Any]]:
    """Entry point used by the worker: settle the environment, import mxnet, build, measure."""
    check_supported(scenario)
    reason = unsupported_gpu() if scenario.device == "cuda" else None
    if reason:  # the plugin skips gpu-marked tests for this; here a scenario asked for CUDA by hand
        raise ScenarioError(reason)
    apply_environment(scenario)
    import mxnet as mx

    if scenario.device == "cuda" and mx.context.num_gpus() == 0:
        raise ScenarioError(
            "device='cuda' but mxnet sees no GPU: install mxnet-cu112 (CUDA 11.2, cuDNN 8) instead of mxnet, "
            "and check the driver and CUDA_VISIBLE_DEVICES"
        )
    if scenario.precision == "amp_bf16" and not mx.runtime.Features().is_enabled("MKLDNN"):
        raise ScenarioError(
            "precision='amp_bf16' needs an mxnet build with MKLDNN (oneDNN); this one has none: "
            "install the PyPI 'mxnet' wheel (MKLDNN on), or use precision='fp32'"
        )
    mx.random.seed(scenario.seed)
    loop = MXNetTrainingLoop(scenario)
    metrics, losses, details = measure(loop, scenario, progress)
    details["kvstore"] = loop.kvstore.type
    details["compute_dtypes"] = loop.compute_dtypes()
    evaluate_real_data(loop, scenario, metrics, details, progress)
    return metrics, losses, details, environment(scenario, loop)
