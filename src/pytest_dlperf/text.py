"""Plain-text tables and test names, as the terminal summary and the ``dlperf`` command print them."""

from __future__ import annotations

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
