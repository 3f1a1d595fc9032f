"""A run's reports: the reports in one folder (the layout CI artifacts download to:
``runs/1234/torch.xml``, ``runs/1234/tensorflow.xml``), ordered by when each run started."""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from pytest_dlperf.reports.junit import expand, load, records, report_time
from pytest_dlperf.reports.records import ReportError, TestRecord


@dataclass
class Run:
    """The reports of one run: its name (the folder), when it started, and its test records."""

    name: str
    #: In UTC (:func:`pytest_dlperf.reports.junit.report_time`).
    started: _dt.datetime
    paths: list[Path]
    tests: list[TestRecord] = field(default_factory=list)

    @property
    def started_at(self) -> str:
        """When the run started, as the page shows it: ISO 8601 to the second, in UTC."""
        return self.started.isoformat(timespec="seconds")


def read_runs(paths: Iterable[str | Path]) -> list[Run]:
    """The reports grouped into runs by folder, oldest run first."""
    by_folder: dict[Path, Run] = {}
    for path in expand(paths):
        xml = load(path)
        folder = path.resolve().parent
        started = report_time(path, xml)
        run = by_folder.setdefault(folder, Run(name=folder.name or str(folder), started=started, paths=[]))
        run.paths.append(path)
        run.tests += records(xml, source=str(path))
        run.started = min(run.started, started)
    runs = sorted(by_folder.values(), key=lambda r: (r.started, r.name))
    tests = [t for r in runs for t in r.tests]
    if not any(t.metrics for t in tests) and not (tests and all(t.outcome == "skipped" for t in tests)):
        raise ReportError(f"{', '.join(str(p) for r in runs for p in r.paths)}: no dlperf.* properties in any "
                          "test case; are these reports of a pytest-dlperf run (pytest --junitxml=FILE)?")
    names = Counter(r.name for r in runs)
    for r in runs:  # two folders of one name (a/run1, b/run1): tell them apart
        if names[r.name] > 1:
            r.name = str(r.paths[0].parent)
    return runs
