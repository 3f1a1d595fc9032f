"""What one training run is: framework, model, precision, shapes, settings.

A :class:`Scenario` is plain data. It crosses the process boundary as JSON, so the
child that trains never needs pytest, and every field is validated once, here,
with an error that names the field, the bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

FRAMEWORKS = ("torch", "tensorflow", "mxnet")
PRECISIONS = ("fp32", "tf32", "amp_fp16", "amp_bf16")
DEVICES = ("cpu", "cuda")
DATA_SOURCES = ("synthetic", "jpeg", "recordio", "tfrecord")
KVSTORES = ("local", "device", "nccl", "dist_sync", "dist_device_sync", "dist_async", "horovod")
DATA_FORMATS = ("NCHW", "NHWC")
PROFILES = ("smoke", "full")
#: torch.compile: off (eager), or one of inductor's modes (CUDA graphs are the separate ``cuda_graphs`` switch).
COMPILE_MODES = ("off", "default", "max-autotune")
#: What a scenario's rounds measure: their time, or the instructions of their steps under Valgrind
#: (:mod:`pytest_dlperf.instructions`).
MEASURES = ("time", "instructions")

#: The framework's import name and the pip requirement that provides it.
INSTALL_HINTS = {
    "torch": ("torch", "pip install torch torchvision  (or: tox -e perf-torch)"),
    "tensorflow": ("tensorflow", "pip install tensorflow  (or: tox -e perf-tf)"),
    "mxnet": ("mxnet", "pip install mxnet==1.9.1 'numpy<1.24'  (GPU: mxnet-cu112; or: tox -e perf-mxnet)"),
}


class ScenarioError(ValueError):
    """A scenario setting is invalid; the message names the field and the fix."""


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ScenarioError(f"{name}={value!r} is not supported; use one of: {', '.join(allowed)}")


def _positive(name: str, value: Any, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ScenarioError(f"{name}={value!r} must be an integer {bound}")


@dataclass(frozen=True)
class Scenario:
    framework: str
    model: str
    precision: str = "fp32"
    device: str = "cpu"
    batch_size: int = 32
    image_size: int = 224
    num_classes: int = 1000
    warmup_steps: int = 10
    rounds: int = 5
    steps_per_round: int = 20
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    #: "dynamic", or a number for a static loss scale (the Apex procedure of seed 001).
    loss_scale: str | float = "dynamic"
    #: None chooses the framework's best: channels_last/NHWC on CUDA.
    channels_last: bool | None = None
    data_format: str | None = None
    #: TensorFlow: compile the train step with XLA (``tf.function(jit_compile=True)``).
    jit_compile: bool = False
    #: PyTorch: ``torch.compile`` the model in one of :data:`COMPILE_MODES` ("off": eager).
    compile: str = "off"
    #: PyTorch on CUDA, with ``compile``: inductor's CUDA graphs (mode "reduce-overhead", or "max-autotune";
    #: without them "default" / "max-autotune-no-cudagraphs").
    cuda_graphs: bool = False
    #: MXNet: None hybridizes (static_alloc, static_shape) as the core always has, recording no compile
    #: figures; True does the same as a compiled scenario (compile time recorded); False runs imperative Gluon.
    hybridize: bool | None = None
    cudnn_benchmark: bool = True
    data: str = "synthetic"
    data_dir: str | None = None
    loader_workers: int = 0
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    kvstore: str | None = None
    #: Environment for the child, applied before the framework is imported.
    env: Mapping[str, str] = field(default_factory=dict)
    #: A command prefix such as ``("numactl", "--interleave=all")``.
    launch_prefix: tuple[str, ...] = ()
    seed: int = 0
    #: Seconds the whole child may take before it is killed.
    timeout: float = 900.0
    #: Name of this run inside its test ("fp32", "amp"): the baseline entry's key. A scenario with
    #: ``step`` or ``model_factory`` defaults to its workload name (``model``) instead of its precision.
    label: str = ""
    #: Your own training step: ``"package.module:make_step"``, imported in the child and called with
    #: this scenario; it returns a callable that runs one step and returns the loss (docs/own-training-code.md).
    step: str | None = None
    #: Your own training loop: ``"package.module:train"``, called with a :class:`pytest_dlperf.loop.Steps`
    #: handle that your loop (or the Lightning / Hugging Face callback) marks at each optimizer step
    #: (docs/own-training-code.md); the harness times the marked steps.
    loop: str | None = None
    #: Your own model for the core's own loop: ``"package.module:make_model"``, called with this scenario,
    #: returning an ``nn.Module`` that maps (batch, 3, image_size, image_size) images to num_classes logits.
    model_factory: str | None = None
    #: Folders put first on the child's ``sys.path`` before it imports ``step``/``model_factory`` (the
    #: pytest fixture passes the rootdir and the test's folder, so a module beside the test is found).
    import_path: tuple[str, ...] = ()
    #: Set by the fixture: the project's own module names (``modules``) and, in A/B of a revision, the
    #: ``tree`` this side's code must come from and the ``other`` side's (:mod:`pytest_dlperf.child.owncode`).
    own_code: Mapping[str, Any] = field(default_factory=dict)
    #: Free-form settings of the model (JSON values): the sizes of the built-in ``gpt``, or whatever
    #: your ``make_step`` reads (``scenario.model_config["hidden"]``).
    model_config: Mapping[str, Any] = field(default_factory=dict)
    #: One of :data:`MEASURES`: "instructions" counts the steps under Valgrind instead of timing them.
    measure: str = "time"

    def __post_init__(self) -> None:
        for name in ("step", "loop", "model_factory"):  # a function object becomes the name the child imports
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                object.__setattr__(self, name, entry_of(name, value))
        _choice("framework", self.framework, FRAMEWORKS)
        _choice("precision", self.precision, PRECISIONS)
        _choice("device", self.device, DEVICES)
        _choice("data", self.data, DATA_SOURCES)
        _choice("measure", self.measure, MEASURES)
        if self.measure == "instructions" and (self.device != "cpu" or self.kvstore or self.loader_workers):
            raise ScenarioError("measure='instructions' counts one CPU process's steps under Valgrind: use "
                                "device='cpu', no kvstore and loader_workers=0")
        if self.kvstore is not None:
            _choice("kvstore", self.kvstore, KVSTORES)
        if self.data_format is not None:
            _choice("data_format", self.data_format, DATA_FORMATS)
        for name in ("batch_size", "image_size", "num_classes", "rounds", "steps_per_round"):
            _positive(name, getattr(self, name))
        _positive("warmup_steps", self.warmup_steps, allow_zero=True)
        _positive("loader_workers", self.loader_workers, allow_zero=True)
        for name in ("intra_op_threads", "inter_op_threads"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        _check_compilation(self)
        if self.loss_scale != "dynamic":
            if (not isinstance(self.loss_scale, (int, float)) or isinstance(self.loss_scale, bool)
                    or self.loss_scale <= 0):
                raise ScenarioError(f"loss_scale={self.loss_scale!r} must be 'dynamic' or a positive number")
        if self.timeout <= 0:
            raise ScenarioError(f"timeout={self.timeout!r} must be > 0 seconds")
        if self.data != "synthetic" and not self.data_dir:
            raise ScenarioError(f"data={self.data!r} needs data_dir, the folder holding the data set")
        bad_env = [k for k, v in self.env.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad_env:
            raise ScenarioError(f"env values must be strings; fix {bad_env}")
        _check_user_code(self)
        if not self.label:
            object.__setattr__(self, "label", self.model if self.user_code else self.precision)
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "launch_prefix", tuple(self.launch_prefix))
        object.__setattr__(self, "import_path", tuple(self.import_path))
        object.__setattr__(self, "model_config", dict(self.model_config))
        object.__setattr__(self, "own_code", dict(self.own_code))

    @property
    def uses_channels_last(self) -> bool:
        return self.device == "cuda" if self.channels_last is None else self.channels_last

    @property
    def user_code(self) -> bool:
        """Whether the child runs your code (``step`` or ``model_factory``): its name is the default label."""
        return bool(self.step or self.loop or self.model_factory)

    @property
    def compiled(self) -> bool:
        """Whether this scenario asks for a compiled step and so records compile time and graph breaks."""
        return self.compile != "off" or self.jit_compile or self.hybridize is True

    @property
    def torch_compile_mode(self) -> str | None:
        """The ``mode=`` for torch.compile: None when eager."""
        if self.compile == "off":
            return None
        if self.compile == "max-autotune":
            return "max-autotune" if self.cuda_graphs else "max-autotune-no-cudagraphs"
        return "reduce-overhead" if self.cuda_graphs else "default"

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.rounds * self.steps_per_round

    def replace(self, **changes: Any) -> "Scenario":
        if "precision" in changes and "label" not in changes and self.label == self.precision:
            changes["label"] = changes["precision"]
        elif "precision" in changes and "label" not in changes and self.user_code and self.label == self.model:
            # two precisions of one step in a paired group need two names
            changes["label"] = f"{self.model}-{changes['precision']}"
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["launch_prefix"] = list(self.launch_prefix)
        data["import_path"] = list(self.import_path)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Scenario":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ScenarioError(f"unknown scenario setting(s) {unknown}; known: {sorted(known)}")
        return cls(**dict(data))

    def describe(self) -> str:
        if self.step or self.loop:
            code = f"step {self.step}" if self.step else f"loop {self.loop}"
            return (
                f"{self.framework}/{self.model} ({code}) {self.precision}{self._compilation_text()} on "
                f"{self.device}, batch {self.batch_size}, {self.rounds}x{self.steps_per_round} steps after "
                f"{self.warmup_steps} warm-up{self._measure_text()}"
            )
        gpt = self.framework == "torch" and self.model == "gpt" and not self.model_factory
        shape = _gpt_shape(self.model_config) if gpt else f"{self.image_size}px"
        model = self.model if not self.model_factory else f"{self.model} (model {self.model_factory})"
        return (
            f"{self.framework}/{model} {self.precision}{self._compilation_text()} on {self.device}, "
            f"batch {self.batch_size}, {shape}, {self.rounds}x{self.steps_per_round} steps after "
            f"{self.warmup_steps} warm-up{self._measure_text()}"
        )

    def _measure_text(self) -> str:
        if self.measure != "instructions":
            return ""
        return (", instructions counted under Valgrind (its CPU model: x86-64 up to AVX2; MKL, oneDNN and OpenBLAS "
                "without FMA)")

    def _compilation_text(self) -> str:
        if self.compile != "off":
            return f" torch.compile({self.torch_compile_mode})"
        if self.jit_compile:
            return " XLA"
        return {True: " hybridized", False: " imperative"}.get(self.hybridize, "")  # type: ignore[arg-type]


def _check_compilation(s: Scenario) -> None:
    """Each framework's compiler switch belongs to that framework; say which one to use instead."""
    _choice("compile", s.compile, COMPILE_MODES)
    equivalents = "torch: compile='default'/'max-autotune', tensorflow: jit_compile=True, mxnet: hybridize=True"
    if s.compile != "off" and s.framework != "torch":
        raise ScenarioError(f"compile={s.compile!r} is torch.compile; for {s.framework} use its own ({equivalents})")
    if s.cuda_graphs and (s.framework != "torch" or s.compile == "off" or s.device != "cuda"):
        raise ScenarioError("cuda_graphs=True is torch.compile's CUDA graphs: it needs framework='torch', "
                            "device='cuda' and compile='default' or 'max-autotune'")
    if s.hybridize is not None and s.framework != "mxnet":
        raise ScenarioError(f"hybridize={s.hybridize!r} is MXNet's compiler switch; for {s.framework} use "
                            f"its own ({equivalents})")
    if s.hybridize is not None and not isinstance(s.hybridize, bool):
        raise ScenarioError(f"hybridize={s.hybridize!r} must be True, False or None (the core's default)")
    if s.compiled and s.warmup_steps < 1:
        raise ScenarioError("a compiled scenario needs warmup_steps >= 1: the first step compiles, and is timed "
                            "as compile_time, never in the timed rounds")
    if s.jit_compile and s.framework == "torch":
        raise ScenarioError("jit_compile=True is TensorFlow's XLA switch; for torch use compile='default' "
                            "or 'max-autotune'")


#: ``package.module:attribute``: what ``step=`` and ``model_factory=`` name (the entry-point syntax).
_ENTRY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
#: A workload name keys baseline entries (``node::label@profile``), so it holds none of their separators.
_NAME = re.compile(r"^[A-Za-z0-9_][\w.\-]*$")
#: The frameworks whose cores can run your own ``step``.
STEP_FRAMEWORKS = ("torch", "tensorflow", "mxnet")
#: The frameworks whose cores run your own training loop (``loop=``): PyTorch's, and TensorFlow's (Keras ``fit``).
LOOP_FRAMEWORKS = ("torch", "tensorflow")


_EXAMPLES = {"step": "my_model:make_step", "loop": "my_training:train", "model_factory": "my_model:make_model"}


def entry_of(setting: str, value: Any) -> str:
    """A module-level function of an importable module as the ``"module:function"`` the child imports.

    The training runs in a child process, which imports the function by name: a lambda, a nested
    function or a function of ``__main__`` has no such name, and is refused with the fix.
    """
    example = _EXAMPLES.get(setting, "my_model:make_step")
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if not callable(value) or not isinstance(module, str) or not isinstance(qualname, str):
        return value  # type: ignore[no-any-return, unused-ignore]  # parse_entry says what is wrong with it
    why = ("a lambda" if "<lambda>" in qualname else "a function defined inside another function"
           if "<locals>" in qualname else "a function of the script run as __main__" if module == "__main__"
           else None)
    if why is None:
        imported = sys.modules.get(module)
        target: Any = imported
        for part in qualname.split("."):
            target = getattr(target, part, None)
        if target is not value:
            why = f"not found as {module}.{qualname} (decorated or replaced under that name)"
    if why is not None:
        raise ScenarioError(
            f"{setting}={value!r} is {why}: the training runs in a child process, which imports the function "
            f"by name; define it at the top level of a module and pass it (or its name, e.g. "
            f"{setting}={example!r})")
    return f"{module}:{qualname}"


def parse_entry(setting: str, value: Any) -> tuple[str, str]:
    """``"pkg.mod:make_step"`` -> ("pkg.mod", "make_step"), or a ScenarioError that shows the fix."""
    example = _EXAMPLES.get(setting, "my_model:make_step")
    if not isinstance(value, str) or not _ENTRY.match(value):
        raise ScenarioError(
            f"{setting}={value!r} is not 'package.module:function'; e.g. {setting}={example!r} for the "
            f"function {example.split(':')[1]} in my_model.py beside the test file (or in an installed package)")
    module, _, attribute = value.partition(":")
    return module, attribute


def _check_user_code(s: Scenario) -> None:
    if s.loop is not None:
        parse_entry("loop", s.loop)
        if s.framework not in LOOP_FRAMEWORKS:
            raise ScenarioError(f"loop= is supported for {', '.join(LOOP_FRAMEWORKS)}; not yet for {s.framework}: "
                                "give it a step= (one training step) instead")
        if s.step is not None or s.model_factory is not None:
            raise ScenarioError("give one of loop= (your training loop, marking its steps), step= (one training "
                                "step) or model_factory= (your model in the core's loop)")
        if s.data != "synthetic":
            raise ScenarioError(f"data={s.data!r} is read by the built-in loops; with loop= your loop reads "
                                "its own data (pass the folder in model_config)")
    if s.step is not None:
        parse_entry("step", s.step)
        if s.framework not in STEP_FRAMEWORKS:
            raise ScenarioError(f"step= is supported for {', '.join(STEP_FRAMEWORKS)}; not yet for {s.framework}")
        if s.model_factory is not None:
            raise ScenarioError("give either step= (your whole training step) or model_factory= (your model "
                                "in the core's loop), not both")
        if s.data != "synthetic":
            raise ScenarioError(f"data={s.data!r} is read by the built-in loops; with step= your step reads "
                                "its own data (pass the folder in model_config)")
    if s.user_code:
        if not isinstance(s.model, str) or not _NAME.match(s.model):
            raise ScenarioError(f"the workload name {s.model!r} keys the baselines: use letters, digits, "
                                "'_', '-' and '.', e.g. 'my_mlp'")
    if s.model_factory is not None:
        parse_entry("model_factory", s.model_factory)
        if s.framework != "torch":
            raise ScenarioError(f"model_factory= is supported for torch; for {s.framework} write a step= instead")
    bad_path = [p for p in s.import_path if not isinstance(p, str) or not p]
    if bad_path:
        raise ScenarioError(f"import_path entries must be folder names; fix {bad_path}")
    try:
        json.dumps(dict(s.model_config))
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"model_config must hold JSON values (it crosses to the child as JSON): {exc}") from None


def _gpt_shape(config: Mapping[str, Any]) -> str:
    keys = ("layers", "width", "heads", "context")
    return " ".join(f"{k} {config[k]}" for k in keys if k in config) or "gpt"
