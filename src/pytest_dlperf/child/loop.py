"""Your own training loop under the harness: ``Scenario.loop`` names ``train(steps)``, which marks each step.

Your function runs your training as you run it (a plain loop, ``Trainer.fit``, ``Trainer.train``) and
calls ``steps.step(loss, samples=n)`` after each optimizer step, or hands ``steps.lightning()`` /
``steps.huggingface()`` / ``steps.keras()`` to the trainer, whose callback does that. The harness is the same
:func:`~pytest_dlperf.child.measure.measure` that times a ``step=``: the marks are its steps.

How: your loop runs in the main thread (as it would in your training: signal handlers, the
trainers' checks); ``measure`` runs in a harness thread and asks for one step at a time. A mark
hands its loss to the harness and waits there until the harness asks for the next step, so the
work between two marks (the batch fetch, forward, backward, the optimizer, your logging, the
trainer's callbacks) is the next step's time, and nothing of yours runs while the harness
synchronises the device, checks the losses or waits for its turn in a paired run. Once ``measure``
has what it needs, ``steps.done`` is true, marks return at once, and the callbacks stop the trainer.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from pytest_dlperf.child import measure as harness
from pytest_dlperf.child.measure import check_finite, measure, rewarm_steps, steps_needed
from pytest_dlperf.child.owncode import HarnessError
from pytest_dlperf.child.usercode import UserCodeError, call, load
from pytest_dlperf.result import HIGHER, LOWER
from pytest_dlperf.scenario import Scenario


#: The most untimed steps a paired round starts with (:meth:`MarkedLoop.drain_prefetched`): a loader's ready
#: batches beyond that are left in its queue.
MAX_LEAD_IN = 32

#: The harness's own figures: a mark's figures take other names.
RESERVED = frozenset({"throughput", "step_time", "peak_host_memory", "peak_device_memory", "achieved_tflops",
                      "data_wait", "compile_time", "compile_time_total", "graph_breaks", "recompilations"})


def prefetch_depth(loader: Any) -> int:
    """How many batches ``loader`` holds ready ahead of your step: a PyTorch ``DataLoader``'s
    ``num_workers x prefetch_factor`` (its default factor 2), 0 for a loader without workers or one of
    another kind."""
    workers = getattr(loader, "num_workers", 0)
    if not isinstance(workers, int) or workers <= 0:
        return 0
    factor = getattr(loader, "prefetch_factor", None)
    return workers * (factor if isinstance(factor, int) and factor > 0 else 2)


class TrainerInOneProcess(BaseException):
    """A trainer's callback was asked for where both revisions' loops alternate in one process: a trainer
    owns process-wide state (signal handlers, seeds, its loggers), so its A/B runs in process pairs instead.
    A BaseException, so the trainer setup's ``except Exception`` does not swallow it."""


class StopTraining(BaseException):
    """Raised from a mark into your loop when the harness failed, so your loop unwinds and the error is ours.

    A BaseException, so a loop's ``except Exception`` (a trainer's error handling) does not swallow it.
    """


class Steps:
    """The handle your ``train(steps)`` gets: mark each optimizer step with :meth:`step`; stop at :attr:`done`.

    ``scenario``: the scenario (``batch_size``, ``device``, ``precision``, ``model_config``, ...).
    ``total``: how many steps the harness needs (warm-up and timed rounds); give your trainer
    at least that many (``max_steps=steps.total``), or loop ``while not steps.done``.
    ``flops_per_step``: set it to your step's FLOPs to add achieved TFLOP/s; ``unit``: what a sample
    is ("tokens": throughput in tokens/s; default samples/s).
    ``prefetch_depth``: how many batches your loader holds ready ahead of the step; :meth:`batches` and
    the trainers' callbacks read it off a PyTorch ``DataLoader`` (``num_workers x prefetch_factor``); set
    it for a loader of another kind. In a paired run or an A/B, where your loop idles while the other
    side takes its round and the loader refills meanwhile, each timed round starts after that many
    untimed steps (at most ``MAX_LEAD_IN``), so the round finds the queue as a loader in steady state
    leaves it, not full.
    """

    def __init__(self, scenario: Scenario, alternating: bool = False):
        self.scenario = scenario
        self.alternating = alternating
        paced = alternating or (harness.paced() and scenario.measure == "time")
        self.total = (scenario.total_steps + rewarm_steps(scenario) if alternating else steps_needed(scenario)) + (
            scenario.rounds * MAX_LEAD_IN if paced else 0)
        self.prefetch_depth = 0
        self.flops_per_step: float | None = None
        self.unit: str | None = None
        #: Your figures' (unit, "higher" | "lower"), by name; unitless and higher-is-better otherwise.
        self.figure_units: dict[str, tuple[str, str]] = {}
        self.marked = 0
        self._done = False
        self._lock = threading.Condition()
        #: marks the harness has not taken yet (at most one): loss, samples, data wait, figures
        self._pending: list[tuple[Any, int, float, dict[str, Any]]] = []
        self._asked = 0  # steps the harness asked for
        self._failure: BaseException | None = None  # the harness's error, raised into your loop
        self._ended: BaseException | str | None = None  # your loop's end: its exception, or "returned"
        self._default_samples = scenario.batch_size
        self._waited = 0.0  # seconds spent waiting for batches since the last mark

    def batches(self, loader: Iterable[Any]) -> Iterator[Any]:
        """``loader``'s batches, each one's wait timed: the run reports ``data_wait``, seconds per step
        spent waiting for the next batch (``for batch in steps.batches(loader): ...``)."""
        self.prefetch_depth = max(self.prefetch_depth, prefetch_depth(loader))
        iterator = iter(loader)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.waited(time.perf_counter() - start)
            yield batch

    def waited(self, seconds: float) -> None:
        """Add ``seconds`` spent waiting for data to the current step (what :meth:`batches` does for you)."""
        self._waited += seconds

    @property
    def done(self) -> bool:
        """True once the harness has timed every round: end your loop (the callbacks stop the trainers)."""
        return self._done

    def step(self, loss: Any = None, samples: int | None = None, figures: Mapping[str, Any] | None = None) -> None:
        """Mark the end of one optimizer step: its ``loss`` (a scalar tensor or a float; None when your
        loop has none to give), the ``samples`` it processed (tokens, rows; default the batch size) and
        any ``figures`` of yours (``{"accuracy": acc}``: scalars or scalar tensors), each reported per
        round as the mean of its marks and judged like the rest (higher is better, unitless, unless
        ``steps.figure_units["name"] = ("unit", "lower")``)."""
        count = self._default_samples if samples is None else samples
        if figures:
            clash = sorted(set(figures) & RESERVED)
            if clash or not all(isinstance(k, str) and k.isidentifier() for k in figures):
                raise UserCodeError(f"steps.step(figures=...): names {sorted(figures)} must be identifiers and "
                                    f"not the harness's own figures ({', '.join(sorted(RESERVED))})", "")
            figures = {k: v.detach() if hasattr(v, "detach") else v for k, v in figures.items()}
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count <= 0:
            raise UserCodeError(f"steps.step(samples={samples!r}): samples must be a positive integer, what "
                                "this step processed (its batch size, or its tokens)", "")
        if hasattr(loss, "detach"):
            loss = loss.detach()
        if hasattr(loss, "shape") and not isinstance(loss, numbers.Real):  # a torch or TensorFlow tensor
            if math.prod(int(size) for size in tuple(loss.shape)) != 1:
                raise UserCodeError(f"steps.step(loss=...) got a tensor of shape {tuple(loss.shape)}; mark the "
                                    "step's loss, a scalar (e.g. the mean of per-sample losses)", "")
        elif loss is not None and (isinstance(loss, bool) or not isinstance(loss, numbers.Real)):
            raise UserCodeError(f"steps.step(loss={loss!r:.80}) must be a scalar tensor, a float or None", "")
        with self._lock:
            if self._done:
                return
            self.marked += 1
            self._pending.append((loss, int(count), self._waited, dict(figures or {})))
            self._waited = 0.0
            self._lock.notify_all()
            # wait until the harness asks for another step (or has finished, or failed)
            while not self._done and self._failure is None and self._asked <= self.marked:
                self._lock.wait()
            if self._failure is not None:
                raise StopTraining(str(self._failure))

    # -- the harness's side (its thread) --

    def next_mark(self) -> tuple[Any, int, float, dict[str, Any]]:
        """Let your loop run to its next mark and return that mark's (loss, samples, data wait, figures)."""
        with self._lock:
            self._asked += 1
            self._lock.notify_all()
            while not self._pending and self._ended is None:
                self._lock.wait()
            if self._pending:
                return self._pending.pop(0)
            ended = self._ended
        if isinstance(ended, BaseException):
            raise _LoopEnded() from ended
        raise UserCodeError(
            f"loop {self.scenario.loop} returned after {self.marked} marked steps; the scenario needs {self.total} "
            f"({self.scenario.warmup_steps} warm-up, {self.scenario.rounds} rounds of "
            f"{self.scenario.steps_per_round}{self._rewarm_text()}): give your trainer"
            f" max_steps=steps.total (or more data), or loop "
            "until steps.done, and mark each step with steps.step(loss)", "")

    def _rewarm_text(self) -> str:
        extra = self.total - self.scenario.total_steps
        return f", up to {extra} untimed in a paired run" if extra else ""

    def loaders(self, *loaders: Any) -> None:
        """Note the loaders a trainer pulls from (its callback does), for :attr:`prefetch_depth`."""
        for loader in loaders:
            if isinstance(loader, dict):
                self.loaders(*loader.values())
            elif isinstance(loader, (list, tuple)):
                self.loaders(*loader)
            else:
                self.prefetch_depth = max(self.prefetch_depth, prefetch_depth(loader))

    def _trainer(self, name: str) -> None:
        if self.alternating:
            raise TrainerInOneProcess(f"steps.{name}(): a trainer's loop is compared in process pairs")

    def finish(self, failure: BaseException | None = None) -> None:
        with self._lock:
            self._done = True
            self._failure = failure
            self._lock.notify_all()

    def ended(self, how: BaseException | str) -> None:
        with self._lock:
            self._ended = how
            self._lock.notify_all()

    # -- the trainers' callbacks (optional imports) --

    def lightning(self, samples: Callable[[Any], int] | None = None) -> Any:
        """A Lightning ``Callback`` for ``Trainer(callbacks=[...])``: marks each optimizer step, stops when done.

        ``samples(batch)``: what one batch holds (default: the length of its first tensor).
        """
        self._trainer("lightning")
        from pytest_dlperf.child.callbacks import lightning_callback

        return lightning_callback(self, samples)

    def huggingface(self, samples: Callable[[Any], int] | None = None) -> Any:
        """A Hugging Face ``TrainerCallback`` for ``Trainer(callbacks=[...])``: marks each optimizer step,
        with the loss of the model's forward pass; stops the training when done.

        ``samples(inputs)``: what one forward's inputs hold (default: the batch size of ``input_ids``,
        or of the first tensor).
        """
        self._trainer("huggingface")
        from pytest_dlperf.child.callbacks import huggingface_callback

        return huggingface_callback(self, samples)

    def keras(self, samples: int | None = None) -> Any:
        """A Keras ``Callback`` for ``model.fit(..., callbacks=[...])``: marks each batch's optimizer step
        (``on_train_batch_end``) with the loss Keras logs; stops the training when done.

        ``samples``: what one batch holds, the ``batch_size`` you give ``fit`` (default the scenario's).
        """
        self._trainer("keras")
        from pytest_dlperf.child.callbacks import keras_callback

        return keras_callback(self, samples)


class _LoopEnded(Exception):
    """Your loop raised while the harness waited for its next mark (its exception is the cause)."""


class MarkedLoop:
    """A :class:`~pytest_dlperf.child.measure.TrainingLoop` whose steps are your loop's marks.

    ``sync`` and ``to_float`` are the framework's (``torch.cuda.synchronize``, a tensor to float).
    """

    def __init__(self, steps: Steps, sync: Callable[[], None], synchronous: bool,
                 peak_device_memory: Callable[[], int | None] = lambda: None):
        self.steps = steps
        self.samples_per_step = steps.scenario.batch_size
        self.synchronous = synchronous
        self._sync = sync
        self._peak = peak_device_memory
        self.round_samples: list[int] = []
        self._round_waits: list[float] = []
        self._round_figures: list[dict[str, Any]] = []
        self._any_wait = False
        #: untimed steps run before each paired round (:meth:`drain_prefetched`)
        self.lead_ins: list[int] = []

    @property
    def flops_per_step(self) -> float | None:
        return self.steps.flops_per_step

    def step(self) -> Any:
        loss, samples, waited, figures = self.steps.next_mark()
        self.round_samples.append(samples)
        self._round_waits.append(waited)
        self._round_figures.append(figures)
        self._any_wait = self._any_wait or waited > 0
        return loss

    def sync(self) -> None:
        self._sync()
        if self.round_samples:  # measure() reads samples_per_step after a round's closing sync: its mean
            self.samples_per_step = sum(self.round_samples) / len(self.round_samples)  # type: ignore[assignment]
            self.round_samples = []

    def drain_prefetched(self) -> None:
        """Before a paired round: as many untimed steps as your loader holds batches ready
        (:attr:`Steps.prefetch_depth`, at most ``MAX_LEAD_IN``), the device synchronised after them.

        While this side idled its loader refilled its queue; timed from there, the round's first
        steps would take batches it never waited for and hide a data-bound loop. Stepping through
        them (not discarding them: your loop trains on every batch) leaves the queue where steady
        state leaves it: still full if the loader keeps ahead, near empty where it falls behind.
        """
        depth = self.steps.prefetch_depth
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise UserCodeError(f"steps.prefetch_depth={depth!r} must be the count of batches your loader holds "
                                "ready, a whole number (0: none)", "")
        count = min(depth, MAX_LEAD_IN)
        if count == 0:
            return
        first = self.steps.marked
        handles = [self.step() for _ in range(count)]
        self._sync()
        check_finite(self.losses_to_floats(handles), first, self)
        self.round_samples = []
        self.lead_ins.append(count)

    def begin_round(self) -> None:
        self._round_waits = []
        self._round_figures = []

    def round_figures(self) -> dict[str, tuple[float, str, str]]:
        """``data_wait``: the round's seconds per step spent waiting for batches (where the loop showed them);
        your marks' figures, each the mean of the round's marks that gave it (read after the round's sync)."""
        out: dict[str, tuple[float, str, str]] = {}
        if self._any_wait and self._round_waits:
            out["data_wait"] = (sum(self._round_waits) / len(self._round_waits), "s", LOWER)
        values: dict[str, list[float]] = {}
        for marks in self._round_figures:
            for name, value in marks.items():
                values.setdefault(name, []).append(float(value))
        for name, seen in values.items():
            unit, direction = self.steps.figure_units.get(name, ("", HIGHER))
            out[name] = (sum(seen) / len(seen), unit, direction)
        return out

    def losses_to_floats(self, handles: Sequence[Any]) -> list[float]:
        """The marked losses as floats (a mark without a loss has none to check)."""
        return [float(h) for h in handles if h is not None]

    def peak_device_memory(self) -> int | None:
        return self._peak()


def drive(train: Callable[[Steps], Any], steps: Steps) -> BaseException | None:
    """Run your ``train(steps)`` to its end and tell the harness how it ended; your loop's exception, if any.

    A loop unwound by :class:`StopTraining` ended because the harness failed: the harness's error is the one
    to report, so None."""
    try:
        call(f"loop {steps.scenario.loop}", train, steps)
    except StopTraining:
        return None
    except BaseException as exc:  # noqa: BLE001  # your loop's error (or a trainer's refusal): reported by the caller
        steps.ended(exc)
        return exc
    steps.ended("returned")
    return None


def run(scenario: Scenario, loop: MarkedLoop, measure: Callable[[], Any]) -> Any:
    """Your ``train(steps)`` in this thread, ``measure()`` in a harness thread; ``measure``'s result."""
    steps = loop.steps
    train = load("loop", scenario.loop or "", scenario.import_path)
    outcome: dict[str, Any] = {}

    def harness() -> None:
        try:
            outcome["result"] = measure()
        except BaseException as exc:  # noqa: BLE001  # carried to the main thread, raised there
            outcome["error"] = exc
        finally:
            steps.finish(outcome.get("error"))

    thread = threading.Thread(target=harness, name="dlperf-harness", daemon=True)
    thread.start()
    raised = drive(train, steps)
    thread.join()
    if raised is not None:
        raise raised
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, _LoopEnded):
            raise error.__cause__ or HarnessError("your loop ended")
        raise error
    if "result" not in outcome:
        raise HarnessError("the harness thread ended without a result")
    return outcome["result"]


class LoopThread:
    """Your ``train(steps)`` in a thread of its own, advanced mark by mark by the harness in this thread:
    two revisions' loops alternating in one process (:mod:`pytest_dlperf.child.alternate`).

    Started inside its side (its project modules in place), it runs your setup up to its first mark;
    after that it runs only while the harness takes its marks. :meth:`stop` ends it (``steps.done``)
    and waits for your loop to return.
    """

    #: How long a loop may take to return once ``steps.done`` (a plain loop checks it at its next mark).
    STOP_SECONDS = 60.0

    def __init__(self, loop: MarkedLoop):
        self.steps = loop.steps
        scenario = self.steps.scenario
        self._train = load("loop", scenario.loop or "", scenario.import_path)
        self._thread = threading.Thread(target=self._run, name=f"dlperf-loop-{scenario.label}", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        self.error = drive(self._train, self.steps)

    def stop(self) -> None:
        """End your loop (``steps.done``) and wait for it; its error after the last round is raised here."""
        self.steps.finish()
        self._thread.join(self.STOP_SECONDS)
        if self._thread.is_alive():
            raise UserCodeError(f"loop {self.steps.scenario.loop} went on for {self.STOP_SECONDS:.0f} s after "
                                "steps.done: end your loop when steps.done is true", "")
        if self.error is not None:
            raise self.error


def loop_error(exc: BaseException) -> BaseException:
    """What to report for a mark that never came: your loop's own exception, where it raised one."""
    if isinstance(exc, _LoopEnded) and exc.__cause__ is not None:
        return exc.__cause__
    return exc


def train(scenario: Scenario, loop: MarkedLoop, progress: Any = None) -> tuple[Any, list[float], dict[str, Any]]:
    """Your loop timed at its marks, for any framework's core: ``measure``'s metrics, losses and details."""
    metrics, losses, details = run(scenario, loop, lambda: measure(loop, scenario, progress))
    throughput_unit(loop.steps, metrics)
    details["user_loop"] = describe(loop)
    return metrics, losses, details


def throughput_unit(steps: Steps, metrics: dict[str, Any]) -> None:
    """Throughput in what your loop said a sample is (``steps.unit = "tokens"``: tokens/s)."""
    unit = steps.unit
    if unit is not None:
        if not isinstance(unit, str) or not unit.strip() or "/" in unit:
            raise UserCodeError(f"loop={steps.scenario.loop!r}: steps.unit={unit!r} must name what a sample is, "
                                "e.g. 'tokens'", "")
        metrics["throughput"] = dataclasses.replace(metrics["throughput"], unit=f"{unit.strip()}/s")


def describe(loop: MarkedLoop) -> dict[str, Any]:
    """What the details record of a marked loop: its steps, and the untimed lead-in of each paired round."""
    steps = loop.steps
    out: dict[str, Any] = {"loop": steps.scenario.loop, "marked_steps": steps.marked, "steps_needed": steps.total}
    if loop.lead_ins:
        out["lead_in_steps"] = loop.lead_ins
    return out
