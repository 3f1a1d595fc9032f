"""Figures in units a person reads: memory in MiB/GiB; counts with their noun.

Reports and baselines keep the measured units (bytes, samples/s, a step's own unit such as
tokens/s: exact, and what the baselines compare); these only format a value for the terminal and
the summaries. A throughput keeps its measured unit: a sample is an image for the suite's ResNets
but a sequence, a row or a batch element in a user's own loop.
"""

from __future__ import annotations

_BINARY = (("GiB", 2.0 ** 30), ("MiB", 2.0 ** 20), ("KiB", 2.0 ** 10))


def readable(value: float, unit: str) -> tuple[float, str]:
    """(value, unit) scaled for reading: 1.209e9 bytes -> (1.126, 'GiB'); other units as measured."""
    if unit == "bytes":
        for name, size in _BINARY:
            if abs(value) >= size:
                return value / size, name
        return value, "B"
    return value, unit


def show(value: float, unit: str, digits: int = 4) -> str:
    """``readable`` as text: ``1.126 GiB``, ``5.788 samples/s``, ``0.912 x``."""
    scaled, name = readable(value, unit)
    return f"{scaled:.{digits}g} {name}".rstrip()



def count(n: int, noun: str, plural: str | None = None) -> str:
    """A count as it is read: ``1 regression``, ``3 regressions``, ``1 entry``/``2 entries`` (``plural``)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"
