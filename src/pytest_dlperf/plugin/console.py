"""Lines a user must see while a test runs, past pytest's output capture.

A scenario trains for minutes behind one progress dot, and a wait for a device lock can
last as long; pytest captures what a test writes unless ``-s``. These lines go to the
terminal reporter with capturing suspended for the moment (as pytest's live logging
does), so they reach a TTY and a CI log alike. A scenario's start and end, and lock
waits, are always shown; the children's own progress (rounds, evaluation) only in a
TTY, where it helps a person watching, not a log read afterwards.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable

import pytest

PREFIX = "[dlperf]"


class Console:
    def __init__(self, config: pytest.Config):
        self._config = config

    def line(self, text: str) -> None:
        """Write ``[dlperf] text`` on a line of its own, whatever is being captured."""
        reporter = self._config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:  # -p no:terminal
            return
        capture = self._config.pluginmanager.get_plugin("capturemanager")
        suspended = capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()
        with suspended:
            reporter.write_line(f"{PREFIX} {text}")

    def for_scenario(self, label: str) -> Callable[[str], None]:
        """A writer whose lines name the scenario (or group) they belong to."""
        return lambda text: self.line(f"{label}: {text}")

    def child_progress(self, label: str) -> Callable[[str], None] | None:
        """A writer for a child's progress lines: in a TTY only (None elsewhere)."""
        stream = sys.__stdout__
        if stream is None or not os.isatty(stream.fileno()):
            return None
        return self.for_scenario(label)
