"""Self-tests drive pytest as a user would, so the runner's own DLPERF_* settings must not leak in.

A user's or runner's DLPERF_TOLERANCE, say, would otherwise make a test of the ini file's precedence
see the environment variable win, as designed.
"""

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: an end-to-end test of 15 s to 90 s on a 2-core VM; tox -e selftest-slow "
        "runs these, tox -e selftest (and so CI) the rest")


@pytest.fixture(autouse=True)
def _no_dlperf_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("DLPERF_") and n != "DLPERF_LOCK_DIR"]:
        monkeypatch.delenv(name)
