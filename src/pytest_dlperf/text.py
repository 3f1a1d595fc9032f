"""Values and test names as the terminal summary, the ``dlperf`` command and its HTML page show them."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Sequence


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """``header``, a rule and ``rows`` in left-aligned columns; nothing when there are no rows."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), fmt.format(*("-" * w for w in widths))] + \
        [fmt.format(*r).rstrip() for r in rows]


def short_test(nodeid: str) -> str:
    """``perf_tests/test_x.py::test_y[p]`` -> ``test_x.py::test_y[p]``: the file tells frameworks apart."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).name}::{rest}" if rest else nodeid


def percent(value: float | None, missing: str = "-") -> str:
    """A signed relative change, ``+4.2%``; ``missing`` for none (the HTML page's is an en dash)."""
    return missing if value is None else f"{value:+.1%}"


def number(value: float | None, unit: str = "", missing: str = "-") -> str:
    """A value to four significant digits, with its unit; ``missing`` for none."""
    if value is None:
        return missing
    return f"{value:.4g}" + (f" {unit}" if unit else "")


def escape(text: object) -> str:
    """``text`` safe in HTML, quotes included (it goes into attributes too)."""
    return html.escape(str(text), quote=True)


def duration(seconds: float) -> str:
    """A span of time as a person reads it: ``45 s``, ``12 min 5 s``, ``1 h 3 min``."""
    whole = max(round(seconds), 0)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {secs} s" if secs else "")
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h" + (f" {minutes} min" if minutes else "")
