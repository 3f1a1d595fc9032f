"""The plugin costs nothing where it is not used: loading it, and a pytest run none of whose tests asks
for its fixtures, import neither numpy nor scipy nor the judging model (pytest_dlperf.judging), nor the
processes that train and the summary that reports. pytest loads the plugin in every run of an
environment it is installed in, so those wait for the first test that asks for ``dlperf`` (or for a
baseline file to read). Held by what a fresh interpreter holds, not by timing it: timings are for
benchmarks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_dlperf

#: The folder holding the package (src/), for the fresh interpreter.
IMPORT_ROOT = Path(pytest_dlperf.__file__).resolve().parent.parent
#: What loading the plugin must not import (a package: none of its modules): numpy, scipy, the judging
#: model, and the parent's heavy parts.
HEAVY = ("numpy", "scipy", "pytest_dlperf.judging", "pytest_dlperf.processes.distributed",
         "pytest_dlperf.processes.paired", "pytest_dlperf.plugin.run", "pytest_dlperf.plugin.ledger",
         "pytest_dlperf.plugin.report", "pytest_dlperf.reports")

PROBE = """
import json, sys
import pytest_dlperf.plugin.hooks
heavy = sys.argv[1:]
print(json.dumps(sorted(h for h in heavy if any(m == h or m.startswith(h + ".") for m in sys.modules))))
"""

#: Written into the pytester run's folder: what the run held when pytest unconfigured it (after the
#: header, collection, the test and the terminal summary).
CONFTEST = f"""
import json, sys

HEAVY = {HEAVY!r}


def pytest_unconfigure(config):
    held = sorted(h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in sys.modules))
    (config.rootpath / "held.json").write_text(json.dumps({{
        "heavy": held, "plugin": "pytest_dlperf.plugin.hooks" in sys.modules}}))
"""

#: A test of the suite's own, using none of the plugin's fixtures (one of its markers, registered by it).
PLAIN_TEST = """
import pytest

@pytest.mark.slow
def test_plain():
    assert sum([1, 2]) == 3
"""


def _import_path() -> str:
    """PYTHONPATH for a child that imports this package (the one under test, not an installed copy)."""
    return os.pathsep.join(p for p in (str(IMPORT_ROOT), os.environ.get("PYTHONPATH", "")) if p)


@pytest.fixture
def child_imports_this_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative PYTHONPATH=src would not reach a pytester child, which runs in its own folder."""
    monkeypatch.setenv("PYTHONPATH", _import_path())


def test_importing_the_plugins_entry_point_imports_no_heavy_module():
    env = dict(os.environ, PYTHONPATH=_import_path())
    proc = subprocess.run([sys.executable, "-c", PROBE, *HEAVY], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def _held(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    """The run's result, and what it held (:data:`CONFTEST`)."""
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    return result, json.loads((pytester.path / "held.json").read_text())


@pytest.mark.usefixtures("child_imports_this_package")
def test_a_run_that_never_asks_for_the_plugin_imports_none_of_its_heavy_parts(pytester: pytest.Pytester):
    """The header (no baseline file yet), the markers' registration and checks, the test and the summary
    import nothing heavy that the same run without the plugin does not (another installed plugin may
    bring numpy of its own)."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_plain=PLAIN_TEST)
    result, without = _held(pytester, "-p", "no:dlperf")
    result.assert_outcomes(passed=1)
    assert not without["plugin"]
    result, held = _held(pytester, "--strict-markers")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["dlperf: profile *", "dlperf: hardware *, compared with */baselines/*.json (no *"])
    assert held["plugin"]
    assert sorted(set(held["heavy"]) - set(without["heavy"])) == []


@pytest.mark.usefixtures("child_imports_this_package")
def test_the_options_are_listed_without_importing_the_heavy_parts(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COLUMNS", "400")  # one help text to a line
    pytester.makeconftest(CONFTEST)
    _, without = _held(pytester, "--help", "-p", "no:dlperf")
    result, held = _held(pytester, "--help")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*dlperf_pairs (string)*",
                                 "*interleaved pairs of rounds in a paired comparison (default 20;*",
                                 "*dlperf_processes (string)*",
                                 "*per variant in a paired comparison (default 2 on CPU, 1 on GPU*"])
    assert held["plugin"]
    assert sorted(set(held["heavy"]) - set(without["heavy"])) == []


def test_the_options_repeat_the_paired_comparisons_defaults():
    """:mod:`pytest_dlperf.plugin.options` repeats them, so that adding the options imports no numpy."""
    from pytest_dlperf.plugin import options
    from pytest_dlperf.processes import paired

    assert (options.DEFAULT_PAIRS, options.DEFAULT_PROCESSES) == (paired.DEFAULT_PAIRS, paired.DEFAULT_PROCESSES)


@pytest.mark.usefixtures("child_imports_this_package")
def test_a_baseline_file_in_the_rootdir_brings_the_store_but_neither_numpy_nor_scipy(pytester: pytest.Pytester):
    """With recorded baselines the header counts their entries and the start checks they are readable:
    that reads the store (pytest_dlperf.judging), and still waits for a judgement to import scipy."""
    from pytest_dlperf.child.environment import hardware_key

    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_plain=PLAIN_TEST)
    key = hardware_key("cpu")
    pytester.mkdir("baselines").joinpath(f"{key}.json").write_text(json.dumps(
        {"format": 1, "hardware_key": key, "hardware": {}, "entries": {}}), encoding="utf-8")
    result, without = _held(pytester, "-p", "no:dlperf")
    result, held = _held(pytester, "--strict-markers")
    result.assert_outcomes(passed=1)
    assert sorted(set(held["heavy"]) - set(without["heavy"])) in ([], ["pytest_dlperf.judging"])
    assert "numpy" not in held["heavy"] and "scipy" not in held["heavy"]
