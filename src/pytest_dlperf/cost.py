"""What the suite's time goes to: each test's wall time split into the phases of its children and its own.

While a test that uses the ``dlperf`` fixture runs, a :class:`Recorder` collects what its children
report (:mod:`pytest_dlperf.child.phases`: ``import``, ``build``, ``warmup``, ``measure``, ...), the
lifetime of every child the runners start (:func:`child_ran`) and the parent's own ``judge``
(:func:`timed`). :func:`attribute` lays them on one time line: each instant of the test goes to the
first phase of :data:`ORDER` that some child (or the parent) was in, so children that run at once (a
paired group, whose children wait while another takes its round) are counted once and the phases sum
to the test's wall time. A child alive outside its reported phases (the interpreter starting, the
process exiting, its group killed) is ``spawn``; the parent's wait for the devices' lock is ``lock``; the
rest, where no child ran and the parent neither waited nor judged (fixtures, the test's own code, the
parent reading results), is ``other``.

The profile is a test's :data:`PROPERTY` (``wall=13.100 import=3.100 ... other=1.200 children=2``),
which the JUnit writer moves to the ``<testsuite>`` with the figures; :func:`summary_lines` is the
terminal's "where the time went".
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from pytest_dlperf import protocol, text
from pytest_dlperf.figures import COST
from pytest_dlperf.protocol import BUILD, COUNT, FINISH, IMPORT, IMPORT_BUILD, MEASURE, WAIT, WARMUP
from pytest_dlperf.text import short_test
from pytest_dlperf.units import count

#: The test's report property (a ``dlperf.*`` name, so it joins the figures in the ``<testsuite>``).
PROPERTY = COST
JUDGE = "judge"
#: The parent waiting for the devices' lock (another run, or another xdist worker, measuring).
LOCK = "lock"
SPAWN = "spawn"
OTHER = "other"
#: Precedence when several things happen at once: an instant goes to the first phase any child is in.
ORDER = (MEASURE, COUNT, WARMUP, BUILD, IMPORT_BUILD, IMPORT, FINISH, JUDGE, LOCK, WAIT, SPAWN)
#: The order phases are written and shown in: a child's life, then the parent's.
SHOWN = (IMPORT, IMPORT_BUILD, BUILD, WARMUP, WAIT, MEASURE, COUNT, FINISH, SPAWN, LOCK, JUDGE, OTHER)
#: How many of the costliest tests the summary lists.
TOP = 10

Span = tuple[str, float, float]


@dataclass(frozen=True)
class Cost:
    """A test's wall time (s), its split by phase (s, summing to ``wall``) and how many children it ran."""

    wall: float
    phases: dict[str, float]
    children: int = 0

    def text(self) -> str:
        """The property's value: ``wall=... <phase>=... children=N``, phases in :data:`SHOWN` order."""
        parts = [f"wall={self.wall:.3f}"]
        parts += [f"{name}={self.phases[name]:.3f}" for name in ordered(self.phases) if self.phases[name] > 0]
        return " ".join(parts + [f"children={self.children}"])

    @classmethod
    def parse(cls, text: str) -> Cost | None:
        """The cost :meth:`text` wrote; None for anything else."""
        values: dict[str, float] = {}
        for part in text.split():
            name, sep, number = part.partition("=")
            try:
                values[name] = float(number)
            except ValueError:
                return None
            if not sep:
                return None
        if "wall" not in values:
            return None
        wall = values.pop("wall")
        children = int(values.pop("children", 0))
        return cls(wall, values, children)


def ordered(names: Iterable[str]) -> list[str]:
    """Phase names in :data:`SHOWN` order, unknown ones (a newer child's) after them by name."""
    names = set(names)
    return [n for n in SHOWN if n in names] + sorted(names - set(SHOWN))


def attribute(start: float, end: float, spans: Iterable[Span], children: Iterable[tuple[float, float]] = ()
              ) -> dict[str, float]:
    """Seconds per phase of the window ``start``..``end``: each instant goes to the first phase of
    :data:`ORDER` among the ``spans`` (phase, start, end) covering it, else to ``spawn`` where one of
    ``children`` (start, end) was alive, else to ``other``. A phase unknown to :data:`ORDER` ranks
    after ``spawn``. The seconds sum to ``end - start``."""
    rank = {name: i for i, name in enumerate(ORDER)}
    events: list[tuple[float, int, str]] = []
    for name, s, e in [*spans, *((SPAWN, s, e) for s, e in children)]:
        s, e = max(s, start), min(e, end)
        if e > s:
            events += [(s, 1, name), (e, -1, name)]
    events.sort()
    out: dict[str, float] = {}
    active: dict[str, int] = {}
    at = start
    for when, change, name in events:
        if when > at:
            current = min(active, key=lambda n: (rank.get(n, len(ORDER)), n)) if active else OTHER
            out[current] = out.get(current, 0.0) + when - at
            at = when
        active[name] = active.get(name, 0) + change
        if not active[name]:
            del active[name]
    if end > at:
        out[OTHER] = out.get(OTHER, 0.0) + end - at
    return out


@dataclass
class Recorder:
    """What one test's children and parent spent their time on (wall-clock seconds, ``time.time``)."""

    start: float = field(default_factory=time.time)
    spans: list[Span] = field(default_factory=list)
    children: list[tuple[float, float]] = field(default_factory=list)

    def reported(self, spans: Mapping[str, Any]) -> None:
        """A child's phases as its result file holds them (``{phase: [[start, end], ...]}``)."""
        for name, pairs in spans.items():
            for pair in pairs if isinstance(pairs, list) else ():
                try:
                    self.spans.append((str(name), float(pair[0]), float(pair[1])))
                except (TypeError, ValueError, IndexError):
                    continue

    def cost(self, end: float | None = None) -> Cost:
        """The test's cost from :attr:`start` to ``end`` (now)."""
        end = time.time() if end is None else end
        wall = max(end - self.start, 0.0)
        return Cost(wall, attribute(self.start, self.start + wall, self.spans, self.children), len(self.children))


_recorder: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("dlperf_cost", default=None)


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Record what the children started here report, and the parent's :func:`timed` phases, until the end."""
    recorder = Recorder()
    token = _recorder.set(recorder)
    try:
        yield recorder
    finally:
        _recorder.reset(token)


def child_ran(start: float, end: float) -> None:
    """A child's life, from before it was started to after it was reaped (``time.time``)."""
    recorder = _recorder.get()
    if recorder is not None:
        recorder.children.append((start, end))


def child_reported(payload: Mapping[str, Any]) -> None:
    """A child's result file (:func:`pytest_dlperf.protocol.read_result`): the phases it holds."""
    recorder = _recorder.get()
    spans = payload.get(protocol.PHASES)
    if recorder is not None and isinstance(spans, Mapping):
        recorder.reported(spans)


@contextlib.contextmanager
def timed(name: str) -> Iterator[None]:
    """A phase of the parent's own (``judge``)."""
    start = time.time()
    try:
        yield
    finally:
        recorder = _recorder.get()
        if recorder is not None:
            recorder.spans.append((name, start, time.time()))


# --- the summary -------------------------------------------------------------------------------

def totals(costs: Iterable[Cost]) -> Cost:
    """The run's costs added up (wall: the tests' wall times, one after another)."""
    wall, children = 0.0, 0
    split: dict[str, float] = {}
    for c in costs:
        wall += c.wall
        children += c.children
        for name, seconds in c.phases.items():
            split[name] = split.get(name, 0.0) + seconds
    return Cost(wall, split, children)


def split_text(c: Cost) -> str:
    """``import 3.1 s (24%), measure 6.0 s (46%), ...``: the phases of ``c``, largest share first."""
    shown = sorted(((s, n) for n, s in c.phases.items() if s >= 0.05), key=lambda x: -x[0])
    return ", ".join(f"{n} {s:.1f} s ({s / c.wall:.0%})" if c.wall else f"{n} {s:.1f} s" for s, n in shown)


def costliest(costs: Sequence[tuple[str, Cost]], top: int = TOP) -> tuple[list[tuple[str, Cost]], list[str]]:
    """The ``top`` costliest tests, costliest first, and the phases they spent any time in, in :data:`SHOWN` order."""
    ranked = sorted(costs, key=lambda item: -item[1].wall)[:top]
    return ranked, ordered(n for _, c in ranked for n, s in c.phases.items() if s > 0)


def summary_lines(costs: Sequence[tuple[str, Cost]], top: int = TOP) -> list[str]:
    """Where the time went: the run's seconds per phase, then the ``top`` costliest tests (node ids) with
    their split, in seconds."""
    if not costs:
        return []
    total = totals(c for _, c in costs)
    split = split_text(total)
    lines = [f"dlperf: where the time went: {total.wall:.1f} s in {count(len(costs), 'test')} using dlperf, "
             f"{count(total.children, 'child', 'children')}" + (f": {split}." if split else ".")]
    ranked, names = costliest(costs, top)
    header = ("costliest tests", "wall s", *names, "children")
    rows = [(short_test(test), f"{c.wall:.1f}", *(f"{c.phases.get(n, 0.0):.1f}" for n in names), str(c.children))
            for test, c in ranked]
    return lines + text.table(header, rows)
