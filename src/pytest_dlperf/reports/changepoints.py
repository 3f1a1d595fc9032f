"""Change points in a series by E-divisive means (Matteson and James 2014, as Apache Otava/Hunter use it).

The split of a segment that maximises the energy distance between its two sides is a candidate; a
permutation test (the values shuffled within each segment, ``PERMUTATIONS`` times) keeps it when no
more than ``MAX_PVALUE`` of the shuffles give as large a statistic; the sides are then split again
until no candidate passes. Each side keeps at least ``MIN_SEGMENT`` runs, so a change in the last
``MIN_SEGMENT - 1`` runs waits for more runs; and a series needs :func:`min_runs` runs (17 at
p <= 0.001): with fewer, even a clean step ``MIN_SEGMENT`` runs from an end cannot reach that p, as
too few shuffles differ from it. docs/history.md gives the false-alarm and detection rates this measures.

numpy only: the statistic and its shuffles are a few array operations; the method is cross-checked
against Apache Otava's in docs/history.md.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

#: Significance of a change point, Otava's default.
MAX_PVALUE = 0.001
#: Shuffles per test: with 999 a change needs every shuffle below it (p = 1/1000).
PERMUTATIONS = 999
#: Runs each side of a change must have at least.
MIN_SEGMENT = 4
_BATCH = 111  # shuffles per numpy batch; 9 batches make PERMUTATIONS


def min_runs(max_pvalue: float = MAX_PVALUE, min_size: int = MIN_SEGMENT) -> int:
    """The shortest series in which a clean step ``min_size`` runs from an end can reach ``max_pvalue``:
    the shuffles that split it as the step does (either way round) must be rarer than ``max_pvalue``."""
    n = 2 * min_size
    while 2 / math.comb(n, min_size) > max_pvalue:
        n += 1
    return n


def q_grid(x: np.ndarray, min_size: int = MIN_SEGMENT) -> np.ndarray:
    """E-divisive's statistic for each row of ``x`` (shape (rows, n)): ``[:, t, k]`` is Q of the sides
    ``[:t]`` and ``[t:k]`` (Matteson and James's Q-hat, as Otava computes it); -inf where a side would be
    shorter than ``min_size``."""
    rows, n = x.shape
    out = np.full((rows, n + 1, n + 1), -np.inf)
    if n < 2 * min_size:
        return out
    d = np.abs(x[:, :, None] - x[:, None, :])
    s = np.zeros((rows, n + 1, n + 1))
    s[:, 1:, 1:] = d.cumsum(1).cumsum(2)  # s[:, a, b] = the sum of d[:, :a, :b]
    t = np.arange(n + 1)[:, None]
    k = np.arange(n + 1)[None, :]
    valid = (t >= min_size) & (k - t >= min_size)
    ti, ki = np.nonzero(valid)
    within_left = s[:, ti, ti]  # every ordered pair of the left side: twice the pairs
    cross = s[:, ti, ki] - within_left
    within_right = s[:, ki, ki] - 2 * s[:, ti, ki] + within_left
    a, b = ti.astype(float), (ki - ti).astype(float)
    # A side of one run has no pairs within it: its term is 0, as in Otava, not 0/0.
    e = 2 * cross / (a * b) - within_left / np.maximum(a * (a - 1), 1) - within_right / np.maximum(b * (b - 1), 1)
    out[:, ti, ki] = a * b / (a + b) * e
    return out


def qhats(x: np.ndarray, min_size: int = MIN_SEGMENT) -> np.ndarray:
    """The largest Q of each split ``t`` of each row of ``x`` (over where its right side ends):
    shape (rows, n), -inf where no split is allowed."""
    return q_grid(x, min_size).max(axis=2)[:, : x.shape[1]]


def _best(values: np.ndarray, bounds: Sequence[int], min_size: int) -> tuple[float, int]:
    """The largest Q over the segments ``bounds`` cut ``values`` into, and its split (an index of values)."""
    best, where = -np.inf, -1
    for lo, hi in zip(bounds, bounds[1:]):
        q = qhats(values[None, lo:hi], min_size)[0]
        i = int(np.argmax(q))
        if q[i] > best:
            best, where = float(q[i]), lo + i
    return best, where


def _permutation_p(values: np.ndarray, bounds: Sequence[int], observed: float, min_size: int,
                   rng: np.random.Generator, permutations: int, max_pvalue: float) -> float:
    """p of ``observed`` against the largest Q of ``values`` shuffled within each segment; stops
    shuffling once p can no longer reach ``max_pvalue`` (the returned p then only bounds it below)."""
    allowed = max_pvalue * (permutations + 1) - 1  # shuffles at or above ``observed`` that still pass
    at_least, done = 0, 0
    tolerance = 1e-9 * max(abs(observed), 1e-300)
    while done < permutations:
        size = min(_BATCH, permutations - done)
        top = np.full(size, -np.inf)
        for lo, hi in zip(bounds, bounds[1:]):
            if hi - lo < 2 * min_size:
                continue
            shuffled = rng.permuted(np.tile(values[lo:hi], (size, 1)), axis=1)
            top = np.maximum(top, qhats(shuffled, min_size).max(axis=1))
        at_least += int(np.sum(top >= observed - tolerance))
        done += size
        if at_least > allowed:
            break
    return (at_least + 1) / (done + 1)


def change_points(values: Sequence[float] | np.ndarray, max_pvalue: float = MAX_PVALUE,
                  permutations: int = PERMUTATIONS, min_size: int = MIN_SEGMENT,
                  seed: int = 0) -> list[tuple[int, float]]:
    """E-divisive means: [(index of the first value on the new level, p)], in series order."""
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    found: list[tuple[int, float]] = []
    while True:
        bounds = [0, *sorted(i for i, _ in found), len(x)]
        observed, where = _best(x, bounds, min_size)
        if where < 0 or not np.isfinite(observed) or observed <= 0:
            return sorted(found)
        p = _permutation_p(x, bounds, observed, min_size, rng, permutations, max_pvalue)
        if p > max_pvalue:
            return sorted(found)
        found.append((where, p))
