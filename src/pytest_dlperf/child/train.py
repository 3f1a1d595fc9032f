"""The child process that trains: ``python -m pytest_dlperf.child.train SCENARIO.json RESULT.json [...] [--paced]``.

``--paced``: each timed round waits for the paired runner's signal (:mod:`pytest_dlperf.processes.paired`).

The parent has already put the scenario's environment (threads, OMP/KMP, CUDA
variables) into this process's environment, so they are in force before the
framework is imported here. The result, or the error, is written as JSON; progress
lines go to stdout, which the parent keeps as the run's log.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from typing import Any

from pytest_dlperf.child import phases
from pytest_dlperf.child.owncode import Side
from pytest_dlperf.child.environment import hardware_key, host_record
from pytest_dlperf.child.measure import StdinPacer, pace_rounds
from pytest_dlperf.child.rank import exit_after_result
from pytest_dlperf.lifeline import die_with_parent
from pytest_dlperf.protocol import (ERROR, EXIT_ERROR, NOT_IN_REFERENCE, PACED_FLAG, PHASES, PROGRESS_PREFIX, RESULT,
                                    TRAINER_LOOP, write_result)
from pytest_dlperf.result import TrainingResult
from pytest_dlperf.scenario import Scenario, ScenarioError

CORES = {
    "torch": "pytest_dlperf.child.cores.torch_core",
    "tensorflow": "pytest_dlperf.child.cores.tf_core",
    "mxnet": "pytest_dlperf.child.cores.mxnet_core",
}
#: The cores that run your own ``step`` (``Scenario.step``) instead of a built-in model.
STEP_CORES = {
    "torch": "pytest_dlperf.child.cores.torch_step",
    "tensorflow": "pytest_dlperf.child.cores.tf_step",
    "mxnet": "pytest_dlperf.child.cores.mxnet_step",
}
#: The cores that run your own training loop (``Scenario.loop``), timed at the steps it marks.
LOOP_CORES = {"torch": "pytest_dlperf.child.cores.torch_loop", "tensorflow": "pytest_dlperf.child.cores.tf_loop"}
#: The module each framework is imported as (whether a core imported it before building).
FRAMEWORK_MODULES = {"torch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet"}
#: The built-in GPT-style language model (``model="gpt"``) has its own core.
MODEL_CORES = {("torch", "gpt"): "pytest_dlperf.child.cores.torch_gpt"}
#: A core trains from ``scenario.data`` through its framework's loader (``pytest_dlperf.child.loaders``)
#: and records ``details["input_pipeline"]``.
REAL_DATA = "real_data"
#: A core reports ``accuracy_top1``/``accuracy_top5`` on the validation split after training on real data.
ACCURACY = "accuracy"
#: What each core can do beyond timing synthetic-data training. Tests read this (the parent
#: never imports a framework) to skip a case its core cannot run; a core listed here that
#: then does not deliver fails the test instead.
CAPABILITIES: dict[str, frozenset[str]] = {
    "torch": frozenset({REAL_DATA, ACCURACY}),
    "tensorflow": frozenset({REAL_DATA, ACCURACY}),
    "mxnet": frozenset({REAL_DATA, ACCURACY}),
}


def missing_capability(framework: str, capability: str) -> str | None:
    """Why ``framework``'s core cannot do ``capability`` (a skip reason), or None when it can."""
    if capability in CAPABILITIES.get(framework, frozenset()):
        return None
    return (f"the {framework} core ({CORES.get(framework, '?')}) does not support {capability!r} "
            f"(pytest_dlperf.child.train.CAPABILITIES lists what each core can do)")


def progress(message: str) -> None:
    print(PROGRESS_PREFIX + message, flush=True)


def failure_reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".lower()
    if isinstance(exc, MemoryError) or "out of memory" in text or "oom" in text.split():
        return "out of memory"
    if isinstance(exc, ScenarioError):
        return "invalid scenario"
    if type(exc).__name__ == "NonFiniteLoss":
        return "non-finite loss"
    if type(exc).__name__ == "UserCodeError":
        return "error in your code"
    if type(exc).__name__ == "TrainerInOneProcess":
        return TRAINER_LOOP
    if type(exc).__name__ == "NotInReference":
        return NOT_IN_REFERENCE
    if type(exc).__name__ in ("HarnessError", "CodeOriginError", "StopTraining"):
        return "error in pytest-dlperf"
    return "training failed"


def core_module(scenario: Scenario) -> str:
    """The module whose ``train(scenario, progress)`` runs ``scenario``."""
    if scenario.loop:
        return LOOP_CORES[scenario.framework]
    if scenario.step:
        return STEP_CORES[scenario.framework]
    if scenario.model_factory:  # your model in the framework's own loop, whatever its name
        return CORES[scenario.framework]
    return MODEL_CORES.get((scenario.framework, scenario.model), CORES[scenario.framework])


def error_payload(exc: BaseException) -> dict[str, Any]:
    """What the parent reports for a failed child; your code's errors carry their own traceback."""
    error = {"reason": failure_reason(exc), "type": type(exc).__name__, "message": str(exc)}
    user_traceback = getattr(exc, "traceback", None)
    if type(exc).__name__ == "UserCodeError" and isinstance(user_traceback, str):
        error["traceback"] = user_traceback
    return error


def run(scenario: Scenario) -> TrainingResult:
    # The machine is described before the framework starts: its OpenMP runtime may pin this
    # thread to one core (OMP_PROC_BIND, KMP_AFFINITY), after which the process would report
    # one usable CPU and file its figures under another machine's baselines.
    environment = host_record()
    environment["hardware_key"] = hardware_key(scenario.device)
    phases.enter(phases.IMPORT)
    core = importlib.import_module(core_module(scenario))
    # a core that imports its framework only while building (MXNet) cannot tell the two apart
    phases.enter(phases.BUILD if FRAMEWORK_MODULES[scenario.framework] in sys.modules else phases.IMPORT_BUILD)
    progress(f"start: {scenario.describe()}")
    own = Side(scenario) if scenario.user_code else None
    if own is not None:
        own.enter()
    metrics, losses, details, framework_env = core.train(scenario, progress)
    if own is not None:
        own.check()
        details["own_code"] = own.origins()
    environment.update(framework_env)
    environment["settings"] = {
        "launch_prefix": list(scenario.launch_prefix),
        "env": dict(scenario.env),
        "intra_op_threads": scenario.intra_op_threads,
        "inter_op_threads": scenario.inter_op_threads,
    }
    return TrainingResult(scenario, metrics, losses, environment, details)


def main(argv: list[str]) -> int:
    """``SCENARIO.json RESULT.json [SCENARIO.json RESULT.json ...]``: each scenario in turn in this process,
    which imports their framework once; each result, or error, in its own file with the phases it took."""
    die_with_parent()
    paced = PACED_FLAG in argv
    paths = [a for a in argv if a != PACED_FLAG]
    if paced:  # driven round by round by the paired runner (pytest_dlperf.processes.paired)

        pace_rounds(StdinPacer())
    code = 0
    for scenario_path, result_path in zip(paths[::2], paths[1::2]):
        try:
            with open(scenario_path, encoding="utf-8") as fh:
                scenario = Scenario.from_dict(json.load(fh))
            result = run(scenario)
        except BaseException as exc:  # reported; after KeyboardInterrupt or SystemExit the rest does not run
            traceback.print_exc()
            write_result(result_path, {ERROR: error_payload(exc), PHASES: phases.PROCESS.report()})
            code = EXIT_ERROR
            if not isinstance(exc, Exception):
                return code
        else:
            write_result(result_path, {RESULT: result.to_dict(), PHASES: phases.PROCESS.report()})
        phases.PROCESS = phases.Phases()  # the next scenario's phases are its own
    progress("done")
    return code


if __name__ == "__main__":
    exit_after_result(main(sys.argv[1:]))
