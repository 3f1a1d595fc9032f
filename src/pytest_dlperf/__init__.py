"""pytest-dlperf: deep-learning training performance claims as pytest tests."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_dlperf.result import Metric, TrainingResult
    from pytest_dlperf.scenario import Scenario

__all__ = ["Metric", "Scenario", "TrainingResult"]
__version__ = "0.1.0"

#: The module each name of :data:`__all__` comes from, imported on first use: pytest imports this package
#: with the plugin in every run, most of which never ask for them (tests/test_startup_cost.py).
_EXPORTS = {"Metric": "pytest_dlperf.result", "TrainingResult": "pytest_dlperf.result",
            "Scenario": "pytest_dlperf.scenario"}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
