"""Self-tests drive pytest as a user would, so the runner's own DLPERF_* settings must not leak in.

A user's or runner's DLPERF_TOLERANCE, say, would otherwise make a test of the ini file's precedence
see the environment variable win, as designed. Nor may an xdist worker's PYTEST_XDIST_* (tox -e selftest
runs most self-tests under pytest-xdist): a pytest that a test starts would take itself for a worker, and
pytest-benchmark, for one, switches itself off in a worker.
"""

import os
import tempfile
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # Two workers (tox -e selftest) each start children. The CPU lock would make one worker's child wait
        # for the other's, a minute behind a child counted under Valgrind; so each worker locks within its
        # own folder, and its children get one OpenMP thread, lest the threads of one spin at every barrier
        # while the other's hold the two cores. The lock's own tests are marked serial and run without xdist.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ["DLPERF_LOCK_DIR"] = str(Path(tempfile.gettempdir()) / f"dlperf-selftest-locks-{worker}")
    # pytester unloads after each test the modules the test imported, and numpy's extensions cannot be
    # loaded twice in one process: loaded first inside a pytester test (dlperf compare, in-process), scipy's
    # stats left numpy.fft half gone, and every later in-process judgement failed to import it. Loaded here,
    # before any test, they stay, whichever tests a run (or an xdist worker) takes first.
    import scipy.stats  # noqa: F401
    config.addinivalue_line(
        "markers", "slow: an end-to-end test of 15 s to 90 s on a 2-core VM; tox -e selftest-slow "
        "runs these, tox -e selftest (and so CI) the rest")
    config.addinivalue_line(
        "markers", "serial: must not run beside another test: it uses a machine-wide resource (network "
        "namespaces, a Grid Engine cell, the CPU lock with a wait of seconds) or times something a concurrent "
        "test would change; tox -e selftest runs the others two at a time (pytest-xdist), then these alone")


@pytest.fixture(autouse=True)
def _no_dlperf_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if (n.startswith("DLPERF_") and n != "DLPERF_LOCK_DIR")
                 or n.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(name)
