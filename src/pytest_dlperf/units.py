"""Figures in units a person reads: memory in MiB/GiB, image throughput in img/s; counts with their noun.

Reports and baselines keep the measured units (bytes, samples/s: exact, and what the
baselines compare); these only format a value for the terminal and the summaries.
Every model of the suite is an image classifier, so a sample is an image.
"""

from __future__ import annotations

#: Measured unit -> the unit shown, same scale.
RENAMED = {"samples/s": "img/s", "samples/s/worker": "img/s/worker"}
_BINARY = (("GiB", 2.0 ** 30), ("MiB", 2.0 ** 20), ("KiB", 2.0 ** 10))


def readable(value: float, unit: str) -> tuple[float, str]:
    """(value, unit) scaled for reading: 1.209e9 bytes -> (1.126, 'GiB'); samples/s -> img/s."""
    if unit == "bytes":
        for name, size in _BINARY:
            if abs(value) >= size:
                return value / size, name
        return value, "B"
    return value, RENAMED.get(unit, unit)


def show(value: float, unit: str, digits: int = 4) -> str:
    """``readable`` as text: ``1.126 GiB``, ``5.788 img/s``, ``0.912 x``."""
    scaled, name = readable(value, unit)
    return f"{scaled:.{digits}g} {name}".rstrip()



def count(n: int, noun: str, plural: str | None = None) -> str:
    """A count as it is read: ``1 regression``, ``3 regressions``, ``1 entry``/``2 entries`` (``plural``)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"
