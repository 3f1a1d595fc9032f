"""The order of a paired group: which process of which variant takes each round, and which child builds when.

Pair ``i`` uses process ``i % processes`` of every variant, the variants in the order of a Williams
design's rows, so each variant and each process sits first and last equally often and no variant
always follows the same one; the children are started in a balanced order too. Pure arithmetic, no
processes: :mod:`.paired` runs the plan.
"""

from __future__ import annotations

from typing import Sequence

from pytest_dlperf.scenario import Scenario


def williams_rows(variants: int) -> list[list[int]]:
    """Orders of ``variants`` in which each variant sits in each position equally often and follows
    every other variant equally often (a Williams design, balanced for first-order carry-over): the
    round before can slow or speed the next one (caches, clocks, a runtime's spinning threads), and
    here no variant always follows the same one. ``variants`` rows when even, ``2 x variants`` when odd;
    for two variants, AB then BA."""
    first, low, high = [0], 1, variants - 1
    while len(first) < variants:
        first.append(low)
        low += 1
        if len(first) < variants:
            first.append(high)
            high -= 1
    rows = [[(v + shift) % variants for v in first] for shift in range(variants)]
    if variants % 2:
        rows += [row[::-1] for row in rows]
    return rows


def schedule(variants: int, processes: int, pairs: int, first_pair: int = 0) -> list[list[tuple[int, int]]]:
    """Per pair, the (variant, process) rounds in the order they are taken.

    Pair ``i`` is taken by process ``i % processes`` of every variant, in the order of Williams row
    ``(i // processes) % rows`` (:func:`williams_rows`): every process meets every row, and over
    whole cycles each variant and each process sits first and last equally often. ``first_pair``
    continues the cycle from an earlier generation of processes.
    """
    rows = williams_rows(variants)
    plan = []
    for i in range(first_pair, first_pair + pairs):
        row = rows[(i // processes) % len(rows)]
        plan.append([(v, i % processes) for v in row])
    return plan


def build_order(variants: int, processes: int, generation: int = 0) -> list[tuple[int, int]]:
    """The (variant, process) order a group's children are started in: process by process, the
    variants of each in a Williams row (:func:`williams_rows`) that moves on with every process and
    every generation. Built one at a time, the child started first idles longest before its first
    round (its early rounds can come out slow even after the re-warm); in this order no variant's
    children are always the first or the last built: over every ``len(williams_rows(variants))``
    processes, counted across generations, each variant's build
    positions sum to the same (2 variants, 2 processes: A0 B0 B1 A1 in every generation)."""
    rows = williams_rows(variants)
    return [(v, p) for p in range(processes) for v in rows[(p + generation * processes) % len(rows)]]


#: How many children of a CPU group may build and warm up at once, by framework (others: 1).
#: TensorFlow's build is one busy Python thread, so two share the cores well; torch's and MXNet's
#: warm-up steps run OpenMP threads that spin and starve each other (docs/method.md has the timings).
CPU_BUILD_WIDTH = {"tensorflow": 2}


def build_width(scenarios: Sequence[Scenario]) -> int | None:
    """How many of a group's children build at once by default: all (None) when a variant runs on a
    GPU; one when any is compiled (its warm-up is its measured compile time, which must not share the
    CPU with another child's); else the smallest :data:`CPU_BUILD_WIDTH` of the group's frameworks."""
    if any(s.device != "cpu" for s in scenarios):
        return None
    if any(s.compiled for s in scenarios):
        return 1
    return min(CPU_BUILD_WIDTH.get(s.framework, 1) for s in scenarios)


def pair_units(pairs: int, processes: int, per_generation: int) -> list[int]:
    """The process pair that took each pair: pair ``i`` of generation ``i // per_generation`` is taken
    by process ``i % processes`` of every variant (:func:`schedule`)."""
    return [(i // per_generation) * processes + i % processes for i in range(pairs)]


def pairs_for(requested: int, processes: int, generations: int = 1) -> int:
    """``requested`` rounded up to whole blocks (2 x processes) per generation, so every process
    leads and trails equally often."""
    block = 2 * processes * generations
    return max(block, -(-requested // block) * block)
