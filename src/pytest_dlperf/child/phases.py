"""Where a child's time goes: the phases of the suite's cost profile (docs/method.md, "What the suite costs").

The harness, not the cores, marks the phases (:func:`enter`): the training child around importing its
core and building, :func:`pytest_dlperf.child.measure.measure` around the warm-up, a paced child's waits
and the timed rounds. Entering a phase ends the one before, so the phases tile the child's life from its
framework import to its result file; the parent calls what comes before the first (the interpreter
starting) and after the last (the process exiting) the child's ``spawn``.

Each phase's spans go to the parent in the result file (:data:`pytest_dlperf.protocol.PHASES`) as
``{phase: [[start, end], ...]}``: durations from ``time.perf_counter``, placed on the wall clock
(``time.time``) that the parent shares, so the spans of children that run at once (a paired group) can
be laid on one time line and counted once.
"""

from __future__ import annotations

import time
from typing import Callable

from pytest_dlperf.protocol import BUILD, COUNT, FINISH, IMPORT, IMPORT_BUILD, MEASURE, WAIT, WARMUP

#: The phases a child marks (their meanings are the protocol's, which the parent reads too).
__all__ = ["BUILD", "COUNT", "FINISH", "IMPORT", "IMPORT_BUILD", "MEASURE", "PROCESS", "Phases", "WAIT", "WARMUP",
           "enter"]

Span = tuple[str, float, float]


class Phases:
    """The spans of one process's phases; ``clock`` times them, ``wall`` places them on the shared clock."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, wall: Callable[[], float] = time.time):
        self._clock = clock
        self._origin = wall() - clock()  # the wall-clock time of the clock's zero
        self._spans: list[Span] = []
        self._current: tuple[str, float] | None = None

    def enter(self, name: str) -> None:
        """End the current phase, if any, and start ``name``."""
        now = self._clock()
        self._close(now)
        self._current = (name, now)

    def stop(self) -> None:
        """End the current phase."""
        self._close(self._clock())
        self._current = None

    def _close(self, now: float) -> None:
        if self._current is not None:
            name, start = self._current
            if now > start:
                self._spans.append((name, start, now))

    def seconds(self) -> dict[str, float]:
        """Seconds per ended phase, in the order they were first entered."""
        out: dict[str, float] = {}
        for name, start, end in self._spans:
            out[name] = out.get(name, 0.0) + end - start
        return out

    def report(self) -> dict[str, list[list[float]]]:
        """End the current phase; every phase's spans, in wall-clock seconds (the result file's :data:`PHASES`)."""
        self.stop()
        out: dict[str, list[list[float]]] = {}
        for name, start, end in self._spans:
            out.setdefault(name, []).append([self._origin + start, self._origin + end])
        return out


#: This process's phases: the harness's modules mark them here, the child's ``main`` reports them.
PROCESS = Phases()


def enter(name: str) -> None:
    """Start phase ``name`` of this process (ending the one before)."""
    PROCESS.enter(name)
