"""Runs one scenario in a child process: own environment, own process group, a timeout.

A crash, an out-of-memory kill or a hang becomes a :class:`ScenarioFailed` carrying
the reason and the child's last output; the child's whole process group is killed
whatever happens, so no data-loader worker or distributed rank outlives its test.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from pytest_dlperf import cost, instructions
from pytest_dlperf.child.environment import hardware_key
from pytest_dlperf.lifeline import parent_environment
from pytest_dlperf.processes.groups import kill_groups
from pytest_dlperf.protocol import ERROR, PROGRESS_PREFIX, RESULT, read_result
from pytest_dlperf.result import TrainingResult
from pytest_dlperf.scenario import Scenario

TAIL_LINES = 30


class ScenarioFailed(Exception):
    """The child did not produce a result; ``reason`` is one short phrase."""

    def __init__(self, label: str, reason: str, detail: str, output_tail: str, traceback: str = ""):
        self.label, self.reason, self.detail, self.output_tail = label, reason, detail, output_tail
        #: Your code's traceback (its own frames only) when your step or model raised.
        self.traceback = traceback
        super().__init__(f"{label}: {reason}: {detail}")

    def report(self) -> str:
        head = f"scenario {self.label!r} failed: {self.reason}: {self.detail}"
        if self.traceback:
            head += f"\n--- your code's traceback ---\n{self.traceback}"
        return f"{head}\n--- last output of the child ---\n{self.output_tail}"


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(no output)"


def _signal_reason(returncode: int) -> str:
    signum = -returncode
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    if signum == signal.SIGKILL:
        return f"killed by {name} (often the kernel's out-of-memory killer: check dmesg, or lower batch_size)"
    return f"killed by {name}"


def child_environment(scenario: Scenario, extra: Mapping[str, str] | None = None,
                      package: Path | None = None) -> dict[str, str]:
    """The child's environment: this one, the scenario's variables, ``extra``, and ``package`` (this package's
    folder by default; another revision's copy in A/B mode) as the one importable ``pytest_dlperf``."""
    env = dict(os.environ)
    env.update(scenario.env)
    env.update(extra or {})
    env["PYTHONUNBUFFERED"] = "1"
    env.update(parent_environment())
    # The child must import this very package, even from an uninstalled checkout, and nothing else of
    # this environment: under another interpreter (A/B mode) the folder holding the package may be
    # this environment's site-packages, whose torch would shadow the reference's own.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_import_root(package), env.get("PYTHONPATH", "")) if p)
    return env


#: This package's folder (src/pytest_dlperf, not processes/).
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def package_import_root(package: Path | None = None) -> str:
    """A folder whose only entry is ``package`` (a link to it; default: this package): put on a child's PYTHONPATH."""
    package = package or PACKAGE_DIR
    digest = hashlib.sha1(str(package).encode()).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"dlperf-import-{digest}"
    link = root / package.name
    if not link.exists():
        root.mkdir(parents=True, exist_ok=True)
        try:
            link.symlink_to(package, target_is_directory=True)
        except FileExistsError:  # another process made it first
            pass
    return str(root)


def run_child(
    command: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    timeout: float,
    label: str,
    on_output: Callable[[str], None] | None = None,
) -> int:
    """Run ``command`` in its own session; return its exit code or raise ScenarioFailed on timeout."""
    started = time.time()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            list(command), env=dict(env), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    stop = threading.Event()
    watcher = None
    if on_output is not None:
        watcher = threading.Thread(target=_follow, args=(log_path, on_output, stop), daemon=True)
        watcher.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_groups([proc])
        raise ScenarioFailed(label, "timed out", f"no result after {timeout:g} s; the child was killed",
                             tail(log_path)) from None
    finally:
        kill_groups([proc], grace=1.0)  # leftovers: loader workers, ranks, servers
        cost.child_ran(started, time.time())
        stop.set()
        if watcher is not None:
            watcher.join(timeout=2)
    return proc.returncode


def _follow(path: Path, on_output: Callable[[str], None], stop: threading.Event) -> None:
    position = 0
    while not stop.wait(0.5):
        try:
            with open(path, "rb") as fh:
                fh.seek(position)
                chunk = fh.read()
        except OSError:
            continue
        position += len(chunk)
        for line in chunk.decode("utf-8", "replace").splitlines():
            if line.startswith(PROGRESS_PREFIX):
                on_output(line[len(PROGRESS_PREFIX):])


def run_scenario(
    scenario: Scenario,
    workdir: Path | None = None,
    on_progress: Callable[[str], None] | None = None,
    python: str | None = None,
    module: str = "pytest_dlperf.child.train",
) -> TrainingResult:
    """Run ``python -m module SCENARIO.json RESULT.json`` (by default: train) in a child; return its result."""
    (outcome,) = run_scenarios([scenario], workdir, on_progress, python, module)
    if isinstance(outcome, ScenarioFailed):
        raise outcome
    return outcome


def unshareable(scenarios: Sequence[Scenario]) -> str:
    """Why ``scenarios`` cannot share one child, or "": they must share a framework, launch prefix, environment
    and measure (the child is started once, with the first one's)."""
    first = scenarios[0]
    differ = [s.describe() for s in scenarios[1:] if (s.launch_prefix, s.env, s.measure, s.framework)
              != (first.launch_prefix, first.env, first.measure, first.framework)]
    return (f"{differ} differ from {first.describe()!r} in framework, launch prefix, environment or measure: "
            "they cannot share one child") if differ else ""


def run_scenarios(
    scenarios: Sequence[Scenario],
    workdir: Path | None = None,
    on_progress: Callable[[str], None] | None = None,
    python: str | None = None,
    module: str = "pytest_dlperf.child.train",
) -> list[TrainingResult | ScenarioFailed]:
    """Run ``scenarios`` one after the other in one child (``SCENARIO.json RESULT.json`` per scenario), which
    imports their framework once; each one's result, or its failure. They share the first one's launch
    prefix, environment, timeout (the child's whole life) and measure (under Valgrind when counted)."""
    problem = unshareable(scenarios)
    if problem:
        raise ValueError(problem)
    first = scenarios[0]
    workdir = Path(workdir or tempfile.mkdtemp(prefix="dlperf-"))
    workdir.mkdir(parents=True, exist_ok=True)
    files = []
    for index, scenario in enumerate(scenarios):
        name = scenario.label if len(scenarios) == 1 else f"{index}-{scenario.label}"  # labels may repeat
        scenario_path = workdir / f"{name}.scenario.json"
        result_path = workdir / f"{name}.result.json"
        scenario_path.write_text(scenario.to_json(), encoding="utf-8")
        result_path.unlink(missing_ok=True)
        files += [scenario_path, result_path]
    label = " + ".join(s.label for s in scenarios)
    log_path = workdir / f"{scenarios[-1].label if len(scenarios) == 1 else 'together'}.log"
    command = [*first.launch_prefix, python or sys.executable, "-m", module, *map(str, files)]
    extra: dict[str, str] = {}
    if first.measure == "instructions":
        out_dir = workdir / f"{first.label}.callgrind"
        out_dir.mkdir(exist_ok=True)
        own = command[len(first.launch_prefix):]
        command = [*first.launch_prefix, *instructions.command_prefix(out_dir), *own]
        extra = instructions.child_environment(instructions.build_shim(), out_dir)
    timeout = sum(s.timeout for s in scenarios)
    code = run_child(command, child_environment(first, extra), log_path, timeout, label, on_progress)
    outcomes: list[TrainingResult | ScenarioFailed] = []
    for scenario, result_path in zip(scenarios, files[1::2]):
        try:  # a scenario that wrote its result succeeded, whatever became of the others
            written = RESULT in read_result(result_path)
            result = TrainingResult.from_dict(child_result(result_path, 0 if written else code, scenario.label,
                                                           log_path))
        except ScenarioFailed as exc:
            outcomes.append(exc)
            continue
        if scenario.measure == "instructions":
            filed_by_counting_model(result)
        outcomes.append(result)
    return outcomes


def child_result(result_path: Path, code: int, label: str, log_path: Path) -> dict:
    """What a finished child wrote as its result; its error, crash or silence as a :class:`ScenarioFailed`."""
    payload = read_result(result_path)
    cost.child_reported(payload)
    if RESULT in payload and code == 0:
        return payload[RESULT]
    if ERROR in payload:
        err = payload[ERROR]
        raise ScenarioFailed(label, err["reason"], f"{err['type']}: {err['message']}", tail(log_path),
                             err.get("traceback", ""))
    reason = _signal_reason(code) if code < 0 else f"exited with status {code} and wrote no result"
    raise ScenarioFailed(label, "crashed", reason, tail(log_path))


def filed_by_counting_model(result: TrainingResult) -> None:
    """A counted result goes to its counting model's baselines (:func:`instructions.counting_key`), its
    host kept as ``host_key``: counts made on one host judge the first counted run on another."""
    result.environment["host_key"] = hardware_key("cpu")  # this process's: no ISA cap of the counting lane
    result.environment["hardware_key"] = instructions.counting_key()
    result.environment["counting_model"] = instructions.counting_model()


def run_loader_only(
    scenario: Scenario,
    workdir: Path | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> TrainingResult:
    """Measure the loader of ``scenario`` in a child process, with the scenario's env and launch prefix."""
    return run_scenario(scenario, workdir, on_progress, module="pytest_dlperf.child.loaders")
