"""pytest-dlperf: deep-learning training performance claims as pytest tests."""

from .result import Metric, TrainingResult
from .scenario import Scenario

__all__ = ["Metric", "Scenario", "TrainingResult"]
__version__ = "0.1.0"
