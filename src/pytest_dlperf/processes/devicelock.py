"""One GPU, one measurement: an exclusive lock per device across pytest processes.

Two pytest runs on one runner (two CI jobs, a developer and a scheduled job) would
otherwise train on the same GPU at once and both record figures that are neither's.
Each device has a lock file; a run holds ``flock(LOCK_EX)`` on it while a scenario
trains there. The kernel releases the lock when the holder exits, however it exits,
so a crashed or killed run never leaves a device locked. The holder writes its PID,
test id and start time into the file, so a waiting run can say whom it waits for.
The host's CPUs have a lock too (``cpu.lock``): CPU scenarios of two runs distort
each other just as much. flock is not fair, so each lock has a turnstile beside it
(``gpu0.queue``) that a waiting run holds: a run that finishes a scenario cannot take
the device straight back for its next one while another run waits.

The lock folder is machine-wide (``/tmp/pytest-dlperf-locks``) rather than per user
(``$XDG_RUNTIME_DIR``), since the GPU is shared by every user of the machine; set
``DLPERF_LOCK_DIR`` to choose another, e.g. one on a shared volume for containers.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from pytest_dlperf.child.gpus import gpus

ENV_DIR = "DLPERF_LOCK_DIR"
DEFAULT_DIR = Path("/tmp/pytest-dlperf-locks")
#: Where waits are announced when a caller gives no ``on_wait`` (the plugin sets its console):
#: code that locks without knowing the terminal (a distributed job) is still heard.
_announcer: Callable[[str], None] | None = None
#: Seconds between the "still waiting" lines while a run waits for a lock.
REMINDER_S = 60.0
#: Seconds between non-blocking retries while waiting (flock itself has no timeout).
POLL_S = 0.05
POLL_MAX_S = 0.5


class DeviceLockTimeout(TimeoutError):
    """A device stayed locked by another process for longer than allowed; names the holder."""


def lock_dir() -> Path:
    return Path(os.environ.get(ENV_DIR) or DEFAULT_DIR)


def lock_name(device: str | int) -> str:
    """File name for a device: ``gpu3.lock`` for an index, ``cpu.lock`` for the host's CPUs
    (CPU scenarios of two runs distort each other too), a sanitised name for a GPU UUID."""
    text = str(device).strip()
    if text.isdigit():
        return f"gpu{int(text)}.lock"
    if text == "cpu":
        return "cpu.lock"
    return "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", text) + ".lock"


def visible_gpus(count: int | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The devices a process may use, as ``CUDA_VISIBLE_DEVICES`` names them.

    Physical indexes (``"1,3"``) and UUIDs are kept as given, so two processes that see
    the same GPU through different ``CUDA_VISIBLE_DEVICES`` lock the same file. Without
    the variable: ``0 .. count-1`` (``count`` defaults to the GPUs ``nvidia-smi`` lists).
    ``environ`` is the child's environment (default: this process's).
    """
    raw = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if raw is not None:
        raw = raw.strip()
        if raw in ("", "-1", "none", "NoDevFiles"):
            return []
        return [part.strip() for part in raw.split(",") if part.strip()]
    if count is None:
        count = len(gpus())
    return [str(i) for i in range(count)]


def _what(device: str) -> str:
    return "the CPUs" if device == "cpu" else f"GPU {device}"


def _describe_holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another process (it has not written its PID yet)"
    text = f"PID {info['pid']}"
    if info.get("host"):
        text += f" on {info['host']}"
    if info.get("owner"):
        text += f" ({info['owner']})"
    if info.get("since"):
        text += f" since {info['since']}"
    return text


# Locks this process holds, so nested or repeated acquisitions in one process do not
# deadlock on themselves (flock locks belong to open file descriptions, not processes).
_held: dict[Path, tuple[int, int]] = {}
_held_guard = threading.Lock()


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise


def _open(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # let other users' runs lock the same devices
        os.chmod(path.parent, 0o1777)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return fd


def _write_holder(fd: int, owner: str) -> None:
    info = {
        "pid": os.getpid(),
        "host": os.uname().nodename,
        "owner": owner,
        "since": _dt.datetime.now().astimezone().replace(microsecond=0).isoformat(),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)


def queue_path(path: Path) -> Path:
    """The turnstile beside a device's lock file (``gpu0.queue`` beside ``gpu0.lock``)."""
    return path.with_suffix(".queue")


def _acquire(path: Path, device: str, owner: str, timeout: float | None,
             on_wait: Callable[[str], None] | None) -> None:
    """Take the device's lock, passing its turnstile first.

    A run goes through the queue lock before the device lock and lets go of it once it
    holds the device. A waiting run keeps the turnstile while it waits, so a run that
    just finished a scenario cannot take the device straight back for its next one
    (flock is not fair): between scenarios the device passes to whoever was waiting.
    """
    with _held_guard:
        if path in _held:
            fd, depth = _held[path]
            _held[path] = (fd, depth + 1)
            return
    fd = _open(path)
    gate = _open(queue_path(path))
    started = time.monotonic()
    announced = False
    next_reminder = REMINDER_S

    def wait_for(lock_fd: int) -> None:
        nonlocal announced, next_reminder
        pause = POLL_S
        while not _try_lock(lock_fd):
            waited = time.monotonic() - started
            if on_wait is not None and not announced:
                limit = "without a limit" if timeout is None else f"up to {timeout:.0f} s"
                on_wait(f"{_what(device)} {'are' if device == 'cpu' else 'is'} busy: {path} is held by "
                        f"{_describe_holder(path)}; waiting {limit} so the two runs do not distort each "
                        f"other's measurements")
            elif on_wait is not None and waited >= next_reminder:
                on_wait(f"still waiting for {_what(device)} after {waited:.0f} s: held by {_describe_holder(path)}")
                next_reminder += REMINDER_S
            announced = True
            if timeout is not None and waited >= timeout:
                raise DeviceLockTimeout(
                    f"{_what(device)} still busy after {waited:.0f} s: {path} is held by "
                    f"{_describe_holder(path)}. Wait for that run to finish, allow a longer wait, "
                    + ("or run the two on different machines" if device == "cpu"
                       else "or give this run other GPUs with CUDA_VISIBLE_DEVICES")
                )
            time.sleep(pause if timeout is None else min(pause, max(0.0, timeout - waited)))
            pause = min(pause * 2, POLL_MAX_S)

    try:
        try:
            wait_for(gate)
            wait_for(fd)
        finally:
            os.close(gate)  # lets the next waiter into the turnstile
        _write_holder(fd, owner)
        if announced and on_wait is not None:
            on_wait(f"{_what(device)} free after waiting {time.monotonic() - started:.0f} s; measuring")
    except BaseException:
        os.close(fd)  # closing the descriptor releases the lock if it was taken
        raise
    with _held_guard:
        _held[path] = (fd, 1)


def _release(path: Path) -> None:
    with _held_guard:
        fd, depth = _held[path]
        if depth > 1:
            _held[path] = (fd, depth - 1)
            return
        del _held[path]
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def announce_waits_with(announcer: Callable[[str], None] | None) -> None:
    """Announce waits of callers without an ``on_wait`` through ``announcer`` (None: stay silent)."""
    global _announcer
    _announcer = announcer


@contextlib.contextmanager
def device_lock(
    devices: Iterable[str | int],
    timeout: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    owner: str = "",
    directory: Path | None = None,
) -> Iterator[list[Path]]:
    """Hold an exclusive lock on each device for the ``with`` block; yields the lock files.

    Each lock is first tried without blocking; for each busy device ``on_wait`` is
    called once with a message naming the lock file and its holder, then the lock is
    awaited for up to ``timeout`` seconds in all (``None``: no limit), after which
    :class:`DeviceLockTimeout` is raised. Devices are locked in sorted order, so two
    runs wanting overlapping sets cannot deadlock. ``owner`` (e.g. the test id) is
    written into the lock file for others' messages.
    """
    folder = directory or lock_dir()
    on_wait = on_wait or _announcer
    names = sorted({lock_name(d): str(d).strip() for d in devices}.items())
    deadline = None if timeout is None else time.monotonic() + timeout
    taken: list[Path] = []
    try:
        for name, device in names:
            path = folder / name
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            _acquire(path, device, owner, left, on_wait)
            taken.append(path)
        yield taken
    finally:
        for path in reversed(taken):
            _release(path)


def holders(directory: Path | None = None, devices: Sequence[str | int] | None = None) -> dict[str, str]:
    """Who holds which lock right now (for diagnostics): lock file name -> holder description."""
    folder = directory or lock_dir()
    paths = ([folder / lock_name(d) for d in devices] if devices is not None
             else sorted([*folder.glob("gpu*.lock"), *folder.glob("cpu.lock")]))
    busy = {}
    for path in paths:
        if not path.exists():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            if _try_lock(fd):
                fcntl.flock(fd, fcntl.LOCK_UN)
            else:
                busy[path.name] = _describe_holder(path)
        finally:
            os.close(fd)
    return busy
