"""Where a run's time went, read back from its JUnit reports: each test's :data:`pytest_dlperf.cost.PROPERTY`
(a ``<testsuite>`` property named after the test), as Markdown for ``dlperf summary``.

A test found in several reports counts once, with its costliest profile: a merged report repeats its parts,
and each framework's run of the suite lists the other frameworks' tests as skipped, at no cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from junitparser import TestSuite

from pytest_dlperf import cost
from pytest_dlperf.figures import split_suite_property
from pytest_dlperf.reports.junit import load
from pytest_dlperf.units import count


def costs_of(paths: Iterable[str | Path]) -> list[tuple[str, cost.Cost]]:
    """(node id, cost) of every test the reports ``paths`` profiled, in the order first seen."""
    found: dict[str, cost.Cost] = {}
    for path in paths:
        xml = load(path)
        for suite in [xml] if isinstance(xml, TestSuite) else xml:  # a file whose root is one <testsuite>
            for prop in suite.properties():
                split = split_suite_property(prop.name or "")
                parsed = cost.Cost.parse(prop.value or "") if split and split[1] == cost.PROPERTY else None
                if split is not None and parsed is not None:
                    if split[0] not in found or parsed.wall > found[split[0]].wall:
                        found[split[0]] = parsed
    return list(found.items())


def run_seconds(path: str | Path) -> float | None:
    """The tests' seconds in the pytest run that wrote report ``path``, by its cost profile (each test once);
    None for a report without a profile."""
    costs = costs_of([path])
    return sum(c.wall for _, c in costs) if costs else None


def cost_markdown(costs: Sequence[tuple[str, cost.Cost]], top: int = cost.TOP) -> list[str]:
    """The run's seconds per phase and the ``top`` costliest tests with their split; nothing without a profile."""
    if not costs:
        return []
    total = cost.totals(c for _, c in costs)
    ranked, names = cost.costliest(costs, top)
    lines = ["### Where the time went", "",
             f"{total.wall:.1f} s in {count(len(costs), 'test')} using dlperf, "
             f"{count(total.children, 'child', 'children')}: "
             f"{cost.split_text(total) or 'nothing measurable'}.", "",
             "| test | wall s | " + " | ".join(names) + " | children |",
             "| --- | ---: | " + " | ".join("---:" for _ in names) + " | ---: |"]
    lines += [f"| `{test}` | {c.wall:.1f} | " + " | ".join(f"{c.phases.get(n, 0.0):.1f}" for n in names)
              + f" | {c.children} |" for test, c in ranked]
    return lines + [""]
