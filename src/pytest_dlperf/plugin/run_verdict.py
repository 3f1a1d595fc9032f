"""The run as a whole, judged once every test has run: a failure is reported as the test ``dlperf::run``.

It is not a collected test: collecting one would change every run's counts and would not see an
xdist run's figures, which reach the controller only when its workers finish. After the test loop
(on the xdist controller too) the run's verdicts are all in; a failure is logged as one report,
so pytest's summary, its exit status and the JUnit file carry it like any failed test.
"""

from __future__ import annotations

from typing import Any

import pytest

#: The node id the run's failure is reported under.
NODEID = "dlperf::run"


def judge(session: pytest.Session, state: object, xml: object | None) -> None:
    """Judge the run (``state.judge_run``); log a failed report when it fails; record its shifts in JUnit, and
    every figure's final verdict in place of the one its test's check wrote."""
    problem = state.judge_run(NODEID)  # type: ignore[attr-defined]
    if xml is not None and state.verdicts:  # type: ignore[attr-defined]
        final_verdicts_in_junit(xml, state.verdicts, state.shift_verdicts())  # type: ignore[attr-defined]
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


def final_verdicts_in_junit(xml: Any, verdicts: list[Any], shifts: list[Any]) -> None:
    """Each figure's properties as the run judged it last (its test wrote them at its teardown, before the
    run's shift was known), so that JUnit, ``dlperf summary``, the HTML page and the brief say what the
    terminal says; the shifts' own properties are added under :data:`NODEID`."""
    from _pytest.junitxml import bin_xml_escape

    from pytest_dlperf import figures

    final = {figures.suite_property_name(NODEID if v in shifts else v.test, name): value
             for v in verdicts for name, value in figures.of_verdict(v)}
    xml.global_properties = [(name, bin_xml_escape(final.pop(name)) if name in final else value)
                             for name, value in xml.global_properties]
    for name, value in final.items():
        xml.add_global_property(name, value)
