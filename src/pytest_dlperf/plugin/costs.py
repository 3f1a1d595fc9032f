"""Each test's cost (:mod:`pytest_dlperf.cost`): recorded while a test that uses the ``dlperf`` fixture runs,
written as its report's :data:`~pytest_dlperf.cost.PROPERTY`, collected for the terminal summary."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported by the hooks below for a test that records (every pytest run registers this plugin)
    from pytest_dlperf import cost

RECORDER_KEY = pytest.StashKey["cost.Recorder"]()
SKIPPED_KEY = pytest.StashKey[bool]()
PLUGIN_NAME = "dlperf-cost"


class CostProfile:
    """A plugin: records each measuring test's cost and keeps ``(node id, Cost)`` in ``costs``
    (on the xdist controller too: the property travels in the workers' reports)."""

    def __init__(self) -> None:
        self.costs: list[tuple[str, cost.Cost]] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        """From before the test's setup, what its children and judging take is recorded."""
        if "dlperf" not in getattr(item, "fixturenames", ()):
            return (yield)
        from pytest_dlperf import cost

        with cost.recording() as recorder:
            item.stash[RECORDER_KEY] = recorder
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """The cost to the end of the teardown joins the teardown report's properties (which carry them all)."""
        recorder = item.stash.get(RECORDER_KEY, None)
        if recorder is not None and call.when == "teardown" and not item.stash.get(SKIPPED_KEY, False):
            from pytest_dlperf import cost

            item.user_properties.append((cost.PROPERTY, recorder.cost(end=call.stop).text()))
        report: pytest.TestReport = yield
        if report.skipped and call.when != "teardown":
            item.stash[SKIPPED_KEY] = True  # a skipped test measured nothing: no cost line to count
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Any:
        """Before the JUnit mover (``hooks.SuiteFigures``) takes the property off the report."""
        if report.when == "teardown" and report.user_properties:
            from pytest_dlperf import cost

            for name, value in report.user_properties:
                found = cost.Cost.parse(str(value)) if name == cost.PROPERTY else None
                if found is not None:
                    self.costs.append((report.nodeid, found))
        return (yield)

    def lines(self) -> list[str]:
        if not self.costs:
            return []
        from pytest_dlperf import cost

        return cost.summary_lines(self.costs)
