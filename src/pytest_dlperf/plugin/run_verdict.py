"""The run as a whole, judged once every test has run: a failure is reported as the test ``dlperf::run``.

It is not a collected test: collecting one would change every run's counts and would not see an
xdist run's figures, which reach the controller only when its workers finish. After the test loop
(on the xdist controller too) the run's verdicts are all in; a failure is logged as one report,
so pytest's summary, its exit status and the JUnit file carry it like any failed test.
"""

from __future__ import annotations

import pytest

#: The node id the run's failure is reported under.
NODEID = "dlperf::run"


def judge(session: pytest.Session, state: object, xml: object | None) -> None:
    """Judge the run (``state.judge_run``); log a failed report when it fails; record its shifts in JUnit."""
    problem = state.judge_run(NODEID)  # type: ignore[attr-defined]
    shifts = state.shift_verdicts() if xml is not None else []  # type: ignore[attr-defined]
    if xml is not None and shifts:
        from pytest_dlperf import figures

        for verdict in shifts:
            for name, value in figures.of_verdict(verdict):
                xml.add_global_property(figures.suite_property_name(NODEID, name), value)  # type: ignore[attr-defined]
    if not problem:
        return
    hook = session.config.hook
    location = ("dlperf", None, "the run's common shift, and every figure judged after it")
    hook.pytest_runtest_logstart(nodeid=NODEID, location=location)
    hook.pytest_runtest_logreport(report=pytest.TestReport(
        nodeid=NODEID, location=location, keywords={}, outcome="failed", longrepr=problem, when="call"))
    hook.pytest_runtest_logreport(report=pytest.TestReport(
        nodeid=NODEID, location=location, keywords={}, outcome="passed", longrepr=None, when="teardown"))
    hook.pytest_runtest_logfinish(nodeid=NODEID, location=location)
