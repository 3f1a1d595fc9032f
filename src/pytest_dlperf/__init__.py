"""pytest-dlperf: deep-learning training performance claims as pytest tests."""

from pytest_dlperf.result import Metric, TrainingResult
from pytest_dlperf.scenario import Scenario

__all__ = ["Metric", "Scenario", "TrainingResult"]
__version__ = "0.1.0"
