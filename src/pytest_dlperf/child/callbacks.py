"""The trainers' callbacks that mark a :class:`~pytest_dlperf.child.loop.Steps` handle: Lightning, Hugging Face,
Keras.

Each is built only when asked for (``steps.lightning()``, ``steps.huggingface()``, ``steps.keras()``), so
the plugin imports none of these libraries unless your loop uses it. They count optimizer steps, not
batches: under gradient accumulation one mark covers every micro-batch since the last, their samples summed.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from pytest_dlperf.child.loop import Steps
from pytest_dlperf.child.usercode import UserCodeError


def batch_samples(batch: Any) -> int:
    """What a batch holds: the length of its first tensor (a tensor, a tuple/list, a dict, a BatchEncoding)."""
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, dict) or hasattr(batch, "values"):
        values = list(batch.values())
        if "input_ids" in batch:
            values.insert(0, batch["input_ids"])
    elif isinstance(batch, (list, tuple)):
        values = list(batch)
    else:
        values = []
    for value in values:
        if hasattr(value, "shape") and len(value.shape) > 0:
            return int(value.shape[0])
    raise UserCodeError(f"cannot tell how many samples a batch of type {type(batch).__name__} holds: pass "
                        "samples=lambda batch: ... (e.g. steps.lightning(samples=lambda b: len(b['x'])))", "")


def _lightning_base() -> Any:
    """The ``Callback`` of the Lightning your code imported (``lightning.pytorch`` or ``pytorch_lightning``)."""
    if "lightning.pytorch" in sys.modules or "pytorch_lightning" not in sys.modules:
        try:
            from lightning.pytorch import Callback

            return Callback
        except ImportError:
            pass
    try:
        from pytorch_lightning import Callback
    except ImportError:
        raise UserCodeError("steps.lightning() needs Lightning: pip install lightning (or pytorch-lightning)",
                            "") from None
    return Callback


def lightning_callback(steps: Steps, samples: Callable[[Any], int] | None = None) -> Any:
    count = samples or batch_samples
    base: Any = _lightning_base()

    class DlperfSteps(base):  # type: ignore[misc, unused-ignore]
        """Marks each optimizer step of ``Trainer.fit`` (``trainer.global_step`` advanced); stops when done."""

        def __init__(self) -> None:
            super().__init__()
            self.last_step = 0
            self.micro_samples = 0
            self.batch_ended: float | None = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.last_step = trainer.global_step
            steps.loaders(trainer.train_dataloader)

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if self.batch_ended is not None:  # the fetch of this batch (and Lightning's hooks around it)
                steps.waited(time.perf_counter() - self.batch_ended)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                               batch_idx: int) -> None:
            self.micro_samples += int(count(batch))
            if trainer.global_step != self.last_step:  # else a micro-batch of gradient accumulation
                self.last_step = trainer.global_step
                loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
                n, self.micro_samples = self.micro_samples, 0
                steps.step(loss, samples=n)
                if steps.done:
                    trainer.should_stop = True
            self.batch_ended = time.perf_counter()  # after the mark, which may have waited for the harness

    return DlperfSteps()


def huggingface_callback(steps: Steps, samples: Callable[[Any], int] | None = None) -> Any:
    try:
        import transformers
    except ImportError:
        raise UserCodeError("steps.huggingface() needs transformers: pip install transformers", "") from None
    count = samples or batch_samples
    base: Any = transformers.TrainerCallback

    class DlperfSteps(base):  # type: ignore[misc, unused-ignore]
        """Marks each optimizer step of ``Trainer.train`` (``on_step_end``) with the training forward's loss.

        The loss is read by a forward hook on the model (``outputs.loss``, or ``outputs["loss"]``), as
        the Trainer does not hand it to callbacks; its samples are summed over the accumulated forwards.
        """

        def __init__(self) -> None:
            self.loss: Any = None
            self.micro_samples = 0
            self.hook: Any = None

        def _forward(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
            if not module.training:
                return
            loss = getattr(output, "loss", None)
            if loss is None and isinstance(output, dict):
                loss = output.get("loss")
            if loss is not None:
                self.loss = loss.detach()
            inputs = kwargs if kwargs else (args[0] if args else None)
            self.micro_samples += int(count(inputs))

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            if model is not None and self.hook is None:
                self.hook = model.register_forward_hook(self._forward, with_kwargs=True)
            steps.loaders(kwargs.get("train_dataloader"))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            n, self.micro_samples = self.micro_samples, 0
            steps.step(self.loss, samples=n or None)
            if steps.done:
                control.should_training_stop = True

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.hook is not None:
                self.hook.remove()
                self.hook = None

    return DlperfSteps()


def keras_callback(steps: Steps, samples: int | None = None) -> Any:
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples <= 0):
        raise UserCodeError(f"steps.keras(samples={samples!r}): give the batch size you pass to model.fit, a "
                            "positive integer", "")
    try:
        import keras
    except ImportError:
        raise UserCodeError("steps.keras() needs Keras: pip install tensorflow (Keras 3 comes with it)", "") from None
    base: Any = keras.callbacks.Callback

    class DlperfSteps(base):  # type: ignore[misc, unused-ignore]
        """Marks each batch of ``model.fit`` (``on_train_batch_end``) with the loss in its logs; stops when done.

        The loss is what Keras logs: a float, its running mean over the epoch so far. Keras fetches
        each batch inside its compiled train function, so no ``data_wait`` is reported.
        """

        def on_train_begin(self, logs: Any = None) -> None:
            per_call = getattr(self.model, "steps_per_execution", 1) or 1
            if int(per_call) != 1:  # on_train_batch_end then ends several optimizer steps at once
                raise UserCodeError(f"steps.keras() marks one optimizer step per batch; the model was compiled "
                                    f"with steps_per_execution={per_call}: compile it with steps_per_execution=1 "
                                    "for the timed run", "")

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            steps.step((logs or {}).get("loss"), samples=samples)
            if steps.done:
                self.model.stop_training = True

    return DlperfSteps()
