"""pytest hooks of pytest-dlperf: thin, the work is in the modules they call.

This module is the ``pytest11`` entry point, so every pytest run in an environment with the plugin
imports it, most of them never asking for its fixtures: it and what it imports at the top stay light
(options, markers, the session's state), and the judging model, the processes and the summary (numpy
and scipy with them) are imported in the fixture or hook that first needs them
(tests/test_startup_cost.py holds that).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

from pytest_dlperf.plugin import benchmark, costs, fixtures, markers, options, run_verdict
from pytest_dlperf.child.environment import ISA_CAP_VARIABLES, cap_problem
from pytest_dlperf.plugin.session import DlperfSession

if TYPE_CHECKING:
    from pytest_dlperf.plugin.run import DlperfRun

SESSION_KEY = pytest.StashKey[DlperfSession]()
#: Why the plugin skips an item (a framework not installed here, an ISA cap), raised at its setup.
SKIP_KEY = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    markers.register(config)
    state = config.stash[SESSION_KEY] = DlperfSession(config, options.Options.from_config(config))
    config.pluginmanager.register(costs.CostProfile(), costs.PLUGIN_NAME)
    if benchmark.wanted(config):
        state.benchmarks = benchmark.BenchmarkExport(config)
        config.pluginmanager.register(state.benchmarks, benchmark.PLUGIN_NAME)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[SESSION_KEY].start()
    xml = _junit_writer(session.config)
    if xml is not None:
        session.config.pluginmanager.register(SuiteFigures(xml), "dlperf-junit")


def _junit_writer(config: pytest.Config) -> object | None:
    """pytest's JUnit writer (``--junitxml``; on the xdist controller, not its workers), if any."""
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # a pytest without it: the figures stay in each <testcase>
        return None
    return config.stash.get(xml_key, None)


class SuiteFigures:
    """Moves a test's ``dlperf.*`` user properties to the JUnit ``<testsuite>``'s properties, named
    after the test (:func:`figures.suite_property_name`), before pytest's writer sees the report: a
    ``<testcase>`` with ``<properties>`` is invalid against junit-10.xsd (Jenkins xUnit)."""

    def __init__(self, xml: object):
        self._xml = xml

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.user_properties:
            return
        from pytest_dlperf import figures

        own = [(n, v) for n, v in report.user_properties if figures.is_figure(n)]
        if not own:
            return
        report.user_properties = [(n, v) for n, v in report.user_properties if not figures.is_figure(n)]
        if report.when == "teardown":  # it carries every property the test recorded
            for name, value in dict.fromkeys(own):
                self._xml.add_global_property(figures.suite_property_name(report.nodeid, name), value)  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[SESSION_KEY]
    state.collected = [item.nodeid for item in items]
    # --collect-only runs nothing, so it has nothing to judge and never reads NOT JUDGED
    state.measures = not config.option.collectonly and any("dlperf" in getattr(item, "fixturenames", ())
                                                            for item in items)
    state.count_family()
    state.filtered = bool(config.option.keyword or config.option.markexpr or config.getoption("deselect")
                          or any(not Path(arg.split("::")[0]).is_dir() for arg in config.args))
    cap = cap_problem()
    for item in items:
        reasons = markers.validate(item)
        if cap and not item.get_closest_marker("gpu"):
            reasons.append(f"{cap}; unset {', '.join(ISA_CAP_VARIABLES)} to run it")
        if reasons:
            item.stash[SKIP_KEY] = reasons[0]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Raised here rather than added as a skip marker, so that ``-ra`` folds one reason's skips into one
    # line (pytest folds by where a skip was raised; a marker's skip is placed at each test): a
    # framework's environment skips the other frameworks' tests, dozens of lines a run otherwise.
    reason = item.stash.get(SKIP_KEY, None)
    if reason:
        pytest.skip(reason)


def pytest_report_header(config: pytest.Config) -> list[str]:
    s = config.stash[SESSION_KEY].options
    mode = "updating baselines" if s.update else f"tolerance {s.tolerance:.0%}"
    state = config.stash[SESSION_KEY]
    lines = [f"dlperf: profile {s.profile}, baselines {s.baseline_dir}, {mode}, scenario timeout {s.timeout:g} s"
             + (", missing baselines fail" if s.require_baselines else "")]
    lines += state.header_lines()
    workers = getattr(config.option, "numprocesses", None)  # pytest-xdist's -n, resolved on its controller
    if isinstance(workers, int) and workers > 1:
        lines.append(f"dlperf: pytest-xdist with {workers} workers: scenarios measure one at a time, but the other "
                     "workers' tests run beside them and can slow them; record baselines without -n")
    if s.ab_mode:
        lines.append(f"dlperf A/B mode: every scenario also runs on the reference ({state.reference_description()}), "
                     f"interleaved ({s.pairs} pairs); a test fails when the candidate is more than "
                     f"{s.ab_threshold:.0%} slower")
    return lines


@pytest.fixture
def dlperf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DlperfRun]:
    """Train scenarios in child processes and check their figures against the baselines."""
    from pytest_dlperf.plugin.run import DlperfRun

    yield DlperfRun(request.config.stash[SESSION_KEY], request.node, tmp_path)


@pytest.fixture
def gpu(request: pytest.FixtureRequest) -> Iterator[fixtures.GpuDevices]:
    """The CUDA device(s) of ``@pytest.mark.gpu(count=N)``, locked for the test; skips without them."""
    yield from fixtures.gpu(request)


@pytest.fixture
def precision(request: pytest.FixtureRequest) -> str:
    """This call's precision: one test per name in ``@pytest.mark.precision(...)``."""
    return fixtures.precision(request)


@pytest.fixture
def distributed(request: pytest.FixtureRequest) -> Iterator[fixtures.Hosts]:
    """Hosts and launcher of ``@pytest.mark.distributed(workers=, launcher=, rate=)``, torn down after the test."""
    yield from fixtures.distributed(request, request.config.stash[SESSION_KEY].options)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    fixtures.parametrize_precision(metafunc)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> object:
    result = yield
    state = session.config.stash[SESSION_KEY]
    measuring = not (state.options.update or state.options.ab_mode)
    if measuring and getattr(session.config, "workerinput", None) is None:  # one process sees the whole run
        run_verdict.judge(session, state, _junit_writer(session.config))
    return result


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash[SESSION_KEY]
    state.finish()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller prints the summary
        workeroutput["dlperf"] = state.worker_output()
    elif state.unjudged_fails() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """xdist controller: every worker records under the controller's session, one run's shift."""
    node.workerinput["dlperf_session"] = node.config.stash[SESSION_KEY].store.session  # type: ignore[attr-defined]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """xdist controller: a worker finished; its verdicts and written files join the run's."""
    output = getattr(node, "workeroutput", {}).get("dlperf")
    if output:
        node.config.stash[SESSION_KEY].add_worker_output(output)  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    quiet = config.get_verbosity() < 0  # -q: the verdicts that need a reader, the figures in the JUnit report
    _summary(terminalreporter, config.stash[SESSION_KEY], quiet)
    profile = config.pluginmanager.get_plugin(costs.PLUGIN_NAME)
    lines = profile.lines() if profile is not None else []
    lines = lines[:1] if quiet else lines
    if lines:  # a section of its own: the summary above reads the same in every run of the same figures
        terminalreporter.section("dlperf cost")
        for line in lines:
            terminalreporter.write_line(line)


def _summary(tr: pytest.TerminalReporter, state: DlperfSession, quiet: bool) -> None:
    if not (state.ab_outcomes or state.ab_not_compared or state.verdicts or state.judges):  # nothing to sum up
        return
    from pytest_dlperf.judging.verdict import IMPROVEMENT
    from pytest_dlperf.plugin import report

    if state.ab_outcomes or state.ab_not_compared:
        tr.section("dlperf A/B")
        for line in report.ab_lines(state.ab_outcomes, state.reference_description(), state.options.ab_threshold,
                                    state.ab_not_compared):
            tr.write_line(line)
    if not state.verdicts:
        if state.judges:
            tr.section("dlperf summary")
            tr.write_line(report.unjudged_line([], state.options.require_baselines))
        return
    tr.section("dlperf summary")
    tr.write_line(report.unjudged_line(state.verdicts, state.options.require_baselines)
                  if state.judges and not report.judged_count(state.verdicts)
                  else report.verdict_line(state.verdicts, state.options.alpha))
    tr.write_line("")
    shown = report.needing_a_reader(state.verdicts) if quiet else state.verdicts
    for line in report.table(shown) if shown else []:
        tr.write_line(line)
    if len(shown) < len(state.verdicts):
        from pytest_dlperf.units import count

        tr.write_line(f"({count(len(state.verdicts) - len(shown), 'figure')} neither a regression nor an improvement: "
                      "listed without -q, and in the JUnit report)")
    tr.write_line("")
    tr.write_line(report.counts_line(state.verdicts, state.written, state.unused()))
    for line in (report.inconclusive_lines(state.verdicts) + report.precision_lines(state.verdicts)
                 + report.missing_lines(state.verdicts, state.store, state.options.profile)
                 + report.unused_lines(state.unused()) + report.pruned_lines(state.store.pruned)):
        tr.write_line(line)
    if any(v.status == IMPROVEMENT for v in state.verdicts):
        tr.write_line("Improvements beyond their noise: refresh with --update-baselines to keep them.")
