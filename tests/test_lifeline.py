"""Measuring children end with their parent, even when it is killed and runs no ``finally``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

TESTS = str(Path(__file__).resolve().parent)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")


def _children_of_run(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and "fake_paced_child" in cmdline:
            found.append(int(entry.name))
    return found


def test_paired_children_die_when_pytest_is_killed(tmp_path: Path) -> None:
    """SIGKILL the process that runs a paired group while its children warm up (a 30 s step):
    the kernel kills them too, instead of leaving them to finish their warm-up unowned."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(f"""
        from pathlib import Path
        from pytest_dlperf.processes.paired import Variant, run_paired
        from pytest_dlperf.scenario import Scenario

        def variant(label):
            scenario = Scenario(framework="torch", model="fake", label=label, warmup_steps=1, steps_per_round=1,
                                timeout=120.0, env={{"PYTHONPATH": {TESTS!r}, "FAKE_STEP_SECONDS": "30"}})
            return Variant(scenario, module="fake_paced_child")

        run_paired([variant("a"), variant("b")], pairs=4, processes=2, workdir=Path({str(tmp_path)!r}),
                   build_one_at_a_time=False)  # all four warming up at once when the driver is killed
    """), encoding="utf-8")
    driver = subprocess.Popen([sys.executable, str(script)],
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        deadline = time.monotonic() + 60
        while len(_children_of_run(str(tmp_path))) < 4 and time.monotonic() < deadline:
            assert driver.poll() is None, "the driver ended before its children started"
            time.sleep(0.2)
        children = _children_of_run(str(tmp_path))
        assert len(children) == 4, f"expected 4 paired children, found {children}"
        time.sleep(1.0)  # past their imports: each has asked for its death signal
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 10
        while _children_of_run(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _children_of_run(str(tmp_path))
        assert not left, f"children outlived their killed parent: {left}"
    finally:
        if driver.poll() is None:
            driver.kill()
        for pid in _children_of_run(str(tmp_path)):
            os.kill(pid, signal.SIGKILL)


def test_a_child_whose_parent_is_already_gone_exits_at_once() -> None:
    code = ("import os; os.environ['DLPERF_PARENT_PID'] = str(2**22 + 7); "
            "from pytest_dlperf.lifeline import die_with_parent; die_with_parent(); print('survived')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "survived" not in done.stdout


def test_a_child_started_by_hand_is_left_alone() -> None:
    from pytest_dlperf.lifeline import PARENT_PID

    env = {k: v for k, v in os.environ.items() if k != PARENT_PID}
    code = "from pytest_dlperf.lifeline import die_with_parent; print(die_with_parent())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "False"
