"""Self-tests drive pytest as a user would, so the runner's own DLPERF_* settings must not leak in.

CI sets DLPERF_TOLERANCE for the performance suite (see .ci/run); a test of the ini file's
precedence would otherwise see the environment variable win, as designed.
"""

import os

import pytest


@pytest.fixture(autouse=True)
def _no_dlperf_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("DLPERF_") and n != "DLPERF_LOCK_DIR"]:
        monkeypatch.delenv(name)
