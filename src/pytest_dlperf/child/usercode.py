"""Your own code in the child: import ``package.module:function`` and call it, reporting its errors as yours.

An exception raised by your module, your ``make_step`` or one of your steps becomes a
:class:`UserCodeError` whose ``traceback`` holds your frames only (the plugin's and importlib's
are dropped): the test fails with the traceback you would have got running the code yourself.
"""

from __future__ import annotations

import importlib
import numbers
import os
import sys
import traceback
from typing import Any, Callable, Sequence

from pytest_dlperf.scenario import Scenario, parse_entry

#: The whole package (not only child/): frames from any of its modules are ours, not the user's.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class UserCodeError(RuntimeError):
    """Your code raised; ``traceback`` is its traceback without the plugin's frames. ``absent``: what a
    ``module:function`` setting names and its folders do not hold (a revision from before it was written)."""

    def __init__(self, message: str, traceback_text: str, absent: str = ""):
        super().__init__(message)
        self.traceback = traceback_text
        self.absent = absent


def _ours(frame: traceback.FrameSummary) -> bool:
    name = frame.filename
    return os.path.abspath(name).startswith(_PACKAGE_DIR + os.sep) or name.startswith("<frozen importlib")


def _strip(te: traceback.TracebackException) -> None:
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if not _ours(f)])
    for chained in (te.__cause__, te.__context__):
        if chained is not None:
            _strip(chained)


def user_traceback(exc: BaseException) -> str:
    """``exc``'s traceback as Python prints it, with the plugin's own frames removed."""
    te = traceback.TracebackException.from_exception(exc)
    _strip(te)
    return "".join(te.format()).rstrip()


def call(what: str, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``; an exception becomes a UserCodeError saying ``what`` raised it."""
    try:
        return function(*args)
    except Exception as exc:  # anything of yours; KeyboardInterrupt and SystemExit stay the worker's
        raise UserCodeError(f"{what} raised {type(exc).__name__}: {exc}", user_traceback(exc)) from exc


def load(setting: str, value: str, import_path: Sequence[str]) -> Callable[..., Any]:
    """The object ``value`` ("pkg.mod:attr") names, imported with ``import_path`` first on sys.path."""
    module_name, attribute = parse_entry(setting, value)
    for folder in reversed(import_path):  # like pytest's rootdir/test folder: found before site-packages
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name) and module_name[len(exc.name):][:1] in ("", "."):
            # the module itself (not something it imports) is missing: say where it was looked for
            searched = ", ".join(import_path) or "(no test folders)"
            raise UserCodeError(
                f"{setting}={value!r}: no module named {exc.name!r}; looked in the test's folders ({searched}) "
                f"and the installed packages. Put {module_name.split('.')[0]}.py beside the test file, or pip "
                f"install the package that holds it", user_traceback(exc), absent=f"module {exc.name}") from None
        raise UserCodeError(f"importing {module_name!r} for {setting}={value!r} raised "
                            f"{type(exc).__name__}: {exc}", user_traceback(exc)) from exc
    except Exception as exc:
        raise UserCodeError(f"importing {module_name!r} for {setting}={value!r} raised "
                            f"{type(exc).__name__}: {exc}", user_traceback(exc)) from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            public = sorted(n for n in vars(module) if callable(getattr(module, n)) and not n.startswith("_"))
            raise UserCodeError(f"{setting}={value!r}: {module_name} ({getattr(module, '__file__', '?')}) has no "
                                f"{attribute!r}; its functions: {', '.join(public[:12]) or 'none'}", "",
                                absent=f"{attribute} in {module_name}") from None
    if not callable(target):
        raise UserCodeError(f"{setting}={value!r} names a {type(target).__name__}, not a function", "")
    return target


def _count(name: str, value: Any, step: str, *, integer: bool) -> Any:
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        need = "a positive integer" if integer else "a positive number"
        raise UserCodeError(f"step={step!r}: the step's {name}={value!r} must be {need}", "")
    return int(value) if integer else float(value)  # type: ignore[call-overload]  # a checked numbers.Integral


class UserStep:
    """Your ``make_step(scenario)`` called, and what the step it returned says about itself.

    ``samples_per_step`` (default ``scenario.batch_size``), ``flops_per_step`` (optional) and
    ``unit`` ("tokens": throughput in tokens/s) are read from the returned callable's attributes.
    """

    def __init__(self, scenario: Scenario):
        step = scenario.step or ""
        make_step = load("step", step, scenario.import_path)
        self.function = call(f"{step}(scenario)", make_step, scenario)
        if not callable(self.function):
            raise UserCodeError(
                f"{step}(scenario) returned {type(self.function).__name__} {self.function!r:.80}, not a callable: "
                "return the function that runs one training step and returns its loss", "")
        self.samples_per_step = _count("samples_per_step", getattr(self.function, "samples_per_step",
                                                                    scenario.batch_size), step, integer=True)
        flops = getattr(self.function, "flops_per_step", None)
        self.flops_per_step = None if flops is None else _count("flops_per_step", flops, step, integer=False)
        unit = getattr(self.function, "unit", None)
        if unit is not None and (not isinstance(unit, str) or not unit.strip() or "/" in unit):
            raise UserCodeError(f"step={step!r}: the step's unit={unit!r} must name what a sample is, e.g. "
                                "'tokens'", "")
        self.unit = unit.strip() if unit is not None else None
        self.what = f"step {step}"

    def __call__(self) -> Any:
        return call(self.what, self.function)

    def not_a_loss(self, value: Any, shape: Any = None) -> UserCodeError:
        """The error for a step that returned ``value`` instead of its loss."""
        if shape is not None:
            return UserCodeError(f"{self.what} returned a tensor of shape {tuple(shape)}; return the loss, a scalar "
                                 "(e.g. the mean of per-sample losses)", "")
        return UserCodeError(f"{self.what} returned {type(value).__name__} {value!r:.80}; return the step's loss, a "
                             "float or a scalar tensor (what it processed goes in the step's samples_per_step "
                             "attribute)", "")

    def throughput_unit(self, metrics: dict[str, Any]) -> None:
        """Throughput in your unit ("tokens/s") when the step named one."""
        import dataclasses

        if self.unit is not None and "throughput" in metrics:
            metrics["throughput"] = dataclasses.replace(metrics["throughput"], unit=f"{self.unit}/s")
