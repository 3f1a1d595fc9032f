"""A paced loader-only round times the loader, not the batches it buffered while its child idled."""

from __future__ import annotations

import queue
import threading
import time
from types import SimpleNamespace

import pytest

from pytest_dlperf.child import loaders
from pytest_dlperf.scenario import Scenario

pytestmark = pytest.mark.serial  # a loader's pace timed against sleeps of tenths of a second

PRODUCE_SECONDS = 0.02


def _producer_module(capacity: int = 0) -> SimpleNamespace:
    """A loader whose buffer (unbounded: 0) a thread fills, one batch per PRODUCE_SECONDS."""
    buffer: queue.Queue[int] = queue.Queue(maxsize=capacity)

    def produce() -> None:
        n = 0
        while True:
            time.sleep(PRODUCE_SECONDS)
            buffer.put(n)
            n += 1

    def endless(scenario: Scenario):  # type: ignore[no-untyped-def]
        threading.Thread(target=produce, daemon=True).start()
        while True:
            yield buffer.get()

    return SimpleNamespace(endless=endless, wait=lambda batch: None)


def _round_seconds(loop: loaders.LoaderLoop, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        loop.step()
    return time.perf_counter() - start


def test_draining_after_an_idle_spell_leaves_the_round_to_the_loaders_own_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loaders, "loader_module", lambda framework: _producer_module())
    loop = loaders.LoaderLoop(Scenario(framework="torch", model="resnet18", batch_size=4))
    _round_seconds(loop, 5)  # warm-up: the consumer is ahead, each fetch waits for the producer

    time.sleep(0.3)  # another child's round: about 15 batches pile up
    undrained = _round_seconds(loop, 5)
    time.sleep(0.3)
    loop.drain_prefetched()
    drained = _round_seconds(loop, 5)

    assert loop.drained and loop.drained[-1] >= 10, loop.drained
    # Five fetches from an empty buffer wait for at least four new batches.
    assert drained >= 4 * PRODUCE_SECONDS * 0.9, (drained, loop.drained)
    assert undrained < drained / 2, (undrained, drained)


def test_draining_stops_once_the_buffer_is_gone_however_long_the_idle_spell(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drained for as long as it idled, two loader children alternating would each drain for as long
    as the other drained, longer every pair."""
    monkeypatch.setattr(loaders, "loader_module", lambda framework: _producer_module(capacity=3))
    loop = loaders.LoaderLoop(Scenario(framework="torch", model="resnet18", batch_size=4))
    _round_seconds(loop, 5)

    time.sleep(1.0)  # 50 batches' time, but only 3 fit the buffer
    start = time.perf_counter()
    loop.drain_prefetched()
    seconds = time.perf_counter() - start

    assert loop.drained and loop.drained[-1] >= 3, loop.drained
    assert seconds < loaders.LoaderLoop.MAX_DRAIN_SECONDS + 2 * PRODUCE_SECONDS, seconds
