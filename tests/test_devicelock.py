"""The per-GPU lock, exercised by real processes: exclusion, the wait message, timeouts, crashes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_dlperf.processes import devicelock
from pytest_dlperf.processes.devicelock import DeviceLockTimeout, device_lock

pytestmark = pytest.mark.serial  # waits for a lock timed in tenths of a second

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pytest_dlperf.processes.devicelock import device_lock
    folder, device, ready = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    hold, log = float(sys.argv[4]), sys.argv[5]
    with device_lock([device], owner="tests/test_x.py::test_holder", directory=folder):
        start = time.monotonic()
        ready.write_text("locked")
        if hold < 0:
            import os, signal
            os.kill(os.getpid(), signal.SIGKILL)  # crash while holding the lock
        time.sleep(hold)
        end = time.monotonic()
    if log != "-":
        with open(log, "a") as fh:
            fh.write(f"{start} {end}\\n")
""")


def start_holder(tmp_path: Path, device: str = "0", hold: float = 30.0, log: str = "-",
                 name: str = "ready") -> subprocess.Popen[bytes]:
    ready = tmp_path / name
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "locks"), device, str(ready), str(hold), log])
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None:
            raise AssertionError(f"lock holder exited early with {proc.returncode}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("lock holder did not take the lock within 60 s")
        time.sleep(0.02)
    return proc


@pytest.fixture
def holder(tmp_path: Path):
    procs: list[subprocess.Popen[bytes]] = []

    def start(**kwargs):
        proc = start_holder(tmp_path, **kwargs)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_timeout_names_the_lock_file_and_the_holder(tmp_path: Path, holder) -> None:
    proc = holder(hold=30.0)
    messages: list[str] = []
    start = time.monotonic()
    with pytest.raises(DeviceLockTimeout) as info:
        with device_lock(["0"], timeout=0.5, on_wait=messages.append, directory=tmp_path / "locks"):
            pytest.fail("took a lock another process holds")
    waited = time.monotonic() - start
    assert 0.5 <= waited < 5.0
    text = str(info.value)
    assert str(tmp_path / "locks" / "gpu0.lock") in text
    assert f"PID {proc.pid}" in text and "tests/test_x.py::test_holder" in text
    assert "CUDA_VISIBLE_DEVICES" in text  # says what to do about it
    assert len(messages) == 1


def test_waiter_is_told_whom_it_waits_for_and_when_it_gets_the_lock(tmp_path: Path, holder) -> None:
    proc = holder(hold=1.0)
    messages: list[str] = []
    start = time.monotonic()
    with device_lock(["0"], timeout=60, on_wait=messages.append, owner="me", directory=tmp_path / "locks") as paths:
        waited = time.monotonic() - start
        assert paths == [tmp_path / "locks" / "gpu0.lock"]
        assert f'"pid": {os.getpid()}' in paths[0].read_text()  # now names this process
    assert proc.wait(timeout=30) == 0
    assert waited > 0.3  # it really waited for the holder
    assert len(messages) == 2, messages
    assert messages[0].startswith("GPU 0 is busy: ")
    assert messages[1].startswith("GPU 0 free after waiting ")
    assert str(tmp_path / "locks" / "gpu0.lock") in messages[0]
    assert f"PID {proc.pid}" in messages[0] and "waiting up to 60 s" in messages[0]


def test_two_processes_never_hold_the_same_gpu_at_once(tmp_path: Path) -> None:
    log = tmp_path / "intervals"
    folder = tmp_path / "locks"
    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), "0", str(tmp_path / f"r{i}"), "0.4",
                               str(log)])
             for i in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    intervals = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(intervals) == 3
    for (_, end), (start, _) in zip(intervals, intervals[1:]):
        assert start >= end, f"two holders overlapped: {intervals}"


REPEATER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pytest_dlperf.processes.devicelock import device_lock
    folder, ready, until = Path(sys.argv[1]), Path(sys.argv[2]), time.monotonic() + float(sys.argv[3])
    while time.monotonic() < until:  # one scenario after another, no pause between them
        with device_lock(["0"], owner="tests/test_x.py::test_many_scenarios", directory=folder):
            ready.write_text("locked")
            time.sleep(0.2)
""")


def test_a_waiting_run_gets_the_gpu_between_the_holders_scenarios(tmp_path: Path) -> None:
    """flock is not fair: without the turnstile a run that re-locks at once starves the waiter."""
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", REPEATER, str(tmp_path / "locks"), str(ready), "30"])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "repeating holder did not start"
            time.sleep(0.02)
        messages: list[str] = []
        start = time.monotonic()
        with device_lock(["0"], timeout=25, on_wait=messages.append, directory=tmp_path / "locks"):
            waited = time.monotonic() - start
            assert proc.poll() is None  # got it while the other run was still going
    finally:
        proc.kill()
        proc.wait()
    assert waited < 5.0, f"waited {waited:.1f} s for a holder whose scenarios take 0.2 s"
    assert len(messages) == 2 and "free after waiting" in messages[1], messages


def test_a_crashed_holder_releases_the_lock(tmp_path: Path, holder) -> None:
    proc = holder(hold=-1)  # kills itself with SIGKILL while holding the lock
    assert proc.wait(timeout=30) == -signal.SIGKILL
    messages: list[str] = []
    with device_lock(["0"], timeout=0, on_wait=messages.append, directory=tmp_path / "locks"):
        pass
    assert messages == []  # free at once: the kernel dropped the dead process's lock


def test_other_gpus_are_not_blocked(tmp_path: Path, holder) -> None:
    holder(device="0")
    with device_lock(["1"], timeout=0, directory=tmp_path / "locks") as paths:
        assert paths == [tmp_path / "locks" / "gpu1.lock"]
    with pytest.raises(DeviceLockTimeout, match="GPU 0 still busy"):
        with device_lock(["1", "0"], timeout=0.2, directory=tmp_path / "locks"):
            pass
    # the failed attempt let go of gpu1 again
    assert devicelock.holders(tmp_path / "locks", ["1"]) == {}
    assert "gpu0.lock" in devicelock.holders(tmp_path / "locks")


def test_the_cpus_can_be_locked_like_a_gpu(tmp_path: Path, holder) -> None:
    holder(device="cpu")
    messages: list[str] = []
    with pytest.raises(DeviceLockTimeout, match="the CPUs still busy"):
        with device_lock(["cpu"], timeout=0.1, on_wait=messages.append, directory=tmp_path / "locks"):
            pass
    assert messages[0].startswith(f"the CPUs are busy: {tmp_path / 'locks' / 'cpu.lock'} is held by PID")


def test_nested_use_in_one_process_does_not_deadlock(tmp_path: Path) -> None:
    with device_lock(["0"], timeout=0, directory=tmp_path):
        with device_lock([0, "1"], timeout=0, directory=tmp_path):
            pass
        assert "gpu0.lock" in _holders_from_child(tmp_path)  # still held after the inner block
    assert _holders_from_child(tmp_path) == {}


def _holders_from_child(folder: Path) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", "import sys; from pytest_dlperf.processes.devicelock import holders; "
                          "print(repr(holders(__import__('pathlib').Path(sys.argv[1]))))", str(folder)],
                         capture_output=True, text=True, check=True).stdout
    return eval(out)


def test_lock_folder_and_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DLPERF_LOCK_DIR", str(tmp_path / "elsewhere"))
    assert devicelock.lock_dir() == tmp_path / "elsewhere"
    with device_lock(["2"], timeout=0) as paths:
        assert paths == [tmp_path / "elsewhere" / "gpu2.lock"]
    monkeypatch.delenv("DLPERF_LOCK_DIR")
    assert devicelock.lock_dir() == Path("/tmp/pytest-dlperf-locks")
    assert devicelock.lock_name(3) == "gpu3.lock"
    assert devicelock.lock_name("cpu") == "cpu.lock"
    assert devicelock.lock_name("GPU-8f2e/x") == "gpu-GPU-8f2e_x.lock"


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1, 3")
    assert devicelock.visible_gpus() == ["1", "3"]  # physical indexes: the same file whatever the remapping
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    assert devicelock.visible_gpus() == ["GPU-abc"]
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert devicelock.visible_gpus() == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert devicelock.visible_gpus(count=2) == ["0", "1"]
    assert devicelock.visible_gpus(count=2, environ={"CUDA_VISIBLE_DEVICES": "1"}) == ["1"]  # a scenario's env


def test_a_long_wait_is_reminded_with_the_time_waited(tmp_path: Path, holder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devicelock, "REMINDER_S", 0.3)
    holder(hold=1.5)
    messages: list[str] = []
    with device_lock(["0"], timeout=60, on_wait=messages.append, directory=tmp_path / "locks"):
        pass
    reminders = [m for m in messages if m.startswith("still waiting for GPU 0 after ")]
    assert reminders and all("held by PID" in m for m in reminders), messages
    assert messages[0].startswith("GPU 0 is busy") and messages[-1].startswith("GPU 0 free after waiting")
