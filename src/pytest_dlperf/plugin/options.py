"""Options and ini keys of the ``dlperf`` group, and the one place their precedence lives.

Precedence: command line, then environment variable (the option's dest in capitals, e.g.
``DLPERF_TOLERANCE``), then ini file, then the default. Bad values are pytest
usage errors that name the option and what it accepts. Settings a run rarely changes (the error budget,
timed rounds, the pairing design of a paired comparison, A/B mode's threshold) are ini keys and environment
variables only (``-o dlperf_pairs=8`` on one command line): the command line keeps twelve options.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Callable, NamedTuple

import pytest

from pytest_dlperf.child.gpus import gpus
from pytest_dlperf.scenario import MEASURES, PROFILES

# Every pytest run adds these options, so this module imports neither pytest_dlperf.processes.paired
# nor .distributed (numpy and the judging model with them): the launchers are imported by the checks
# of a launcher option, and the paired comparison's defaults are repeated here.

#: :data:`pytest_dlperf.processes.paired.DEFAULT_PAIRS` and ``DEFAULT_PROCESSES`` (tests/test_startup_cost.py
#: holds them equal).
DEFAULT_PAIRS = 20
DEFAULT_PROCESSES = 2

#: The least every gate can be (docs/verdicts.md): a GPU's run-to-run noise is small enough for 5%; a
#: virtual CPU's drifts more, and each figure's measured noise widens its own gate beyond it.
DEFAULT_TOLERANCE = {"smoke": 0.10, "full": 0.05}
#: The cap on generations of fresh processes for a paired comparison that is still inconclusive.
DEFAULT_MAX_GENERATIONS = 6
DEFAULT_TIMEOUT = {"smoke": 600.0, "full": 1800.0}
#: A/B mode fails a test when candidate/reference throughput is below 1 - this, with an interval excluding 1.
DEFAULT_AB_THRESHOLD = 0.05
#: The chance that a run with no change fails anywhere (its figures' verdicts, family-wise).
DEFAULT_ALPHA = 0.05


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def _tolerance(text: str) -> float:
    value = _positive_float(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is a fraction: use e.g. 0.1 for 10%")
    return value


def _alpha(text: str) -> float:
    value = _positive_float(text)
    if value >= 0.5:
        raise argparse.ArgumentTypeError(f"{text!r} is a chance of a false alarm: use e.g. 0.05")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _launcher(text: str) -> str:
    from pytest_dlperf.processes.distributed.launchers import LAUNCHERS

    choices = [name for name in LAUNCHERS if name != "netns"]
    if text not in choices:
        raise argparse.ArgumentTypeError(f"{text!r} is not a launcher; use one of: {', '.join(choices)} "
                                         "(netns hosts are made by the tests that need them)")
    return text


def _interpreter(text: str) -> str:
    import shutil

    path = shutil.which(text) or text
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an executable Python interpreter; give the reference environment's python, "
            "e.g. /opt/venvs/torch-2.13/bin/python")
    return os.path.abspath(path)


def _profile(text: str) -> str:
    if text not in ("auto", *PROFILES):
        raise argparse.ArgumentTypeError(f"{text!r} is not a profile; use auto, {', '.join(PROFILES)}")
    return text


def _measure(text: str) -> str:
    if text not in MEASURES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a measure; use {' or '.join(MEASURES)}")
    return text


#: option name (None: an ini key and environment variable only), dest, ini key, converter, help
OPTIONS: list[tuple[str | None, str, str, Callable[[str], Any], str]] = [
    ("--baseline-dir", "dlperf_baseline_dir", "dlperf_baseline_dir", str,
     "folder of baseline JSON files (default: baselines/ at the rootdir)"),
    ("--dlperf-profile", "dlperf_profile", "dlperf_profile", _profile,
     "smoke (small shapes, CPUs and CI), full (documented configurations) or auto "
     "(full when a CUDA device is visible; the default)"),
    ("--dlperf-tolerance", "dlperf_tolerance", "dlperf_tolerance", _tolerance,
     "relative change allowed before a metric is a regression, e.g. 0.1 "
     f"(default {DEFAULT_TOLERANCE['smoke']} for smoke, {DEFAULT_TOLERANCE['full']} for full)"),
    (None, "dlperf_alpha", "dlperf_alpha", _alpha,
     f"the chance that a run with no change fails anywhere, over every figure it judges (default "
     f"{DEFAULT_ALPHA}); a suite split over several pytest runs gives each its share"),
    ("--dlperf-measure", "dlperf_measure", "dlperf_measure", _measure,
     "time (the default) or instructions: count each step's instructions under Valgrind instead of timing it, "
     "a figure that does not drift (docs/instructions.md); scenarios that cannot be counted skip"),
    (None, "dlperf_rounds", "dlperf_rounds", _positive_int,
     "timed rounds per scenario, after warm-up (default: the profile's)"),
    ("--dlperf-launcher", "dlperf_launcher", "dlperf_launcher", _launcher,
     "where distributed jobs run their ranks: local (default), ssh, mpi (mpirun), slurm (srun) or sge (qrsh); "
     "all but local read --dlperf-hostfile"),
    ("--dlperf-hostfile", "dlperf_hostfile", "dlperf_hostfile", str,
     "hosts for the ssh/mpi/slurm launchers: one [user@]host[:port] [slots=N] per line"),
    (None, "dlperf_pairs", "dlperf_pairs", _positive_int,
     f"interleaved pairs of rounds in a paired comparison (default {DEFAULT_PAIRS}; rounded up to whole "
     "blocks of 2 x processes)"),
    (None, "dlperf_processes", "dlperf_processes", _positive_int,
     f"persistent processes per variant in a paired comparison (default {DEFAULT_PROCESSES} on CPU, 1 on GPU, "
     "where every process's memory must fit at once)"),
    (None, "dlperf_generations", "dlperf_generations", _positive_int,
     "successive sets of fresh processes that share a paired comparison's pairs (default 1): "
     "processes x generations processes per variant, only processes of them resident at once"),
    ("--dlperf-max-generations", "dlperf_max_generations", "dlperf_max_generations", _positive_int,
     f"a paired comparison still inconclusive after its generations (A/B mode; tests that ask for it) takes "
     f"one more generation of fresh processes at a time, up to this many in all (default "
     f"{DEFAULT_MAX_GENERATIONS}); A/B mode starts with at least 2, so its interval rests on more than one "
     "process pair"),
    ("--dlperf-reference", "dlperf_reference", "dlperf_reference", _interpreter,
     "A/B mode: the python of a reference environment (e.g. a venv with the previous framework release); "
     "every scenario also runs there, interleaved, and the test fails when this environment is slower"),
    ("--dlperf-reference-rev", "dlperf_reference_rev", "dlperf_reference_rev", str,
     "A/B mode: a revision (commit, branch, tag) of the git repository holding the rootdir; every scenario "
     "also runs on your code as it is there, in a worktree the plugin adds and removes, interleaved with the "
     "working tree's, and the test fails when the working tree is slower (with --dlperf-reference: that "
     "interpreter runs the revision)"),
    (None, "dlperf_ab_threshold", "dlperf_ab_threshold", _tolerance,
     f"A/B mode: slowdown of candidate vs reference throughput that fails a test (default {DEFAULT_AB_THRESHOLD})"),
    ("--dlperf-timeout", "dlperf_timeout", "dlperf_timeout", _positive_float,
     "seconds one scenario may run before its child is killed "
     f"(default {DEFAULT_TIMEOUT['smoke']:g} smoke, {DEFAULT_TIMEOUT['full']:g} full)"),
]


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("dlperf", "deep-learning training performance (pytest-dlperf)")
    group.addoption("--update-baselines", action="store_true", dest="dlperf_update", default=False,
                    help="write the figures measured in this run to the baseline files (merging; "
                         "other tests' and machines' entries are kept; also DLPERF_UPDATE_BASELINES=1)")
    group.addoption("--dlperf-require-baselines", action="store_true", dest="dlperf_require_baselines",
                    default=False, help="fail a test whose figures have no baseline on this machine (for runners "
                                        "that must compare; also ini dlperf_require_baselines, "
                                        "DLPERF_REQUIRE_BASELINES=1)")
    parser.addini("dlperf_require_baselines", type="bool", default=False,
                  help="fail a test whose figures have no baseline on this machine")
    for flag, dest, ini, convert, help_text in OPTIONS:
        if flag is not None:
            group.addoption(flag, dest=dest, type=convert, default=None, help=help_text)
        parser.addini(ini, help=help_text, default=None)


class Options(NamedTuple):
    update: bool
    baseline_dir: Path
    profile: str
    tolerance: float
    rounds: int | None
    timeout: float
    launcher: str
    hostfile: Path | None
    pairs: int = DEFAULT_PAIRS
    #: None: the default for the device (DEFAULT_PROCESSES on CPU, 1 on GPU).
    processes: int | None = None
    generations: int = 1
    max_generations: int = 6
    reference: str | None = None
    ab_threshold: float = DEFAULT_AB_THRESHOLD
    require_baselines: bool = False
    alpha: float = DEFAULT_ALPHA
    measure: str = "time"
    #: A/B mode against a revision: the revision as given, resolved when the run starts.
    reference_rev: str | None = None

    @property
    def ab_mode(self) -> bool:
        """Whether every scenario also runs on a reference (another interpreter, another revision, or both)."""
        return bool(self.reference or self.reference_rev)

    @classmethod
    def from_config(cls, config: pytest.Config) -> "Options":
        def get(flag: str | None, dest: str, ini: str, convert: Callable[[str], Any]) -> Any:
            value = config.getoption(dest) if flag is not None else None
            if value is not None:
                return value
            env = dest.upper()
            if os.environ.get(env, "").strip():
                try:
                    return convert(os.environ[env].strip())
                except argparse.ArgumentTypeError as exc:
                    raise pytest.UsageError(f"environment variable {env}={os.environ[env]!r}: {exc}") from None
            raw = config.getini(ini)
            if raw in (None, ""):
                return None
            try:
                return convert(str(raw).strip())
            except argparse.ArgumentTypeError as exc:
                raise pytest.UsageError(f"ini key {ini} = {raw!r}: {exc}") from None

        values = {dest: get(flag, dest, ini, convert) for flag, dest, ini, convert, _ in OPTIONS}
        profile = values["dlperf_profile"] or "auto"
        if profile == "auto":
            profile = "full" if gpus() else "smoke"
        base = values["dlperf_baseline_dir"]
        baseline_dir = Path(base) if base else Path("baselines")
        if not baseline_dir.is_absolute():
            baseline_dir = Path(config.rootpath) / baseline_dir
        if baseline_dir.exists() and not baseline_dir.is_dir():
            raise pytest.UsageError(f"--baseline-dir {baseline_dir} is a file; give a folder")
        launcher = values["dlperf_launcher"] or "local"
        hostfile = Path(values["dlperf_hostfile"]) if values["dlperf_hostfile"] else None
        if hostfile is not None and not hostfile.is_absolute():
            hostfile = Path(config.rootpath) / hostfile
        if launcher != "local":
            from pytest_dlperf.processes.distributed.launchers import HostfileError, make_launcher

            if hostfile is None:
                raise pytest.UsageError(f"--dlperf-launcher {launcher} needs --dlperf-hostfile PATH "
                                        "(one [user@]host[:port] per line)")
            try:  # the hosts, and what this launcher can do with them (a port under mpi/slurm), before any test
                make_launcher(launcher, hostfile)
            except (HostfileError, ValueError, OSError) as exc:
                raise pytest.UsageError(f"--dlperf-hostfile {hostfile}: {exc}") from None
        return cls(
            launcher=launcher,
            hostfile=hostfile,
            update=_update(config),
            baseline_dir=baseline_dir,
            profile=profile,
            tolerance=values["dlperf_tolerance"] or DEFAULT_TOLERANCE[profile],
            rounds=values["dlperf_rounds"],
            timeout=values["dlperf_timeout"] or DEFAULT_TIMEOUT[profile],
            pairs=values["dlperf_pairs"] or DEFAULT_PAIRS,
            processes=values["dlperf_processes"],
            generations=values["dlperf_generations"] or 1,
            max_generations=values["dlperf_max_generations"] or DEFAULT_MAX_GENERATIONS,
            reference=values["dlperf_reference"],
            ab_threshold=values["dlperf_ab_threshold"] or DEFAULT_AB_THRESHOLD,
            require_baselines=_require_baselines(config),
            alpha=values["dlperf_alpha"] or DEFAULT_ALPHA,
            measure=values["dlperf_measure"] or "time",
            reference_rev=values["dlperf_reference_rev"] or None,
        )


def _update(config: pytest.Config) -> bool:
    """--update-baselines, else DLPERF_UPDATE_BASELINES=1: one setting records every pytest run of a
    suite split over several (tox -m perf's framework and ISA-capped runs); no ini key, on purpose."""
    if config.getoption("dlperf_update"):
        return True
    raw = os.environ.get("DLPERF_UPDATE_BASELINES", "").strip().lower()
    if raw and raw not in ("1", "true", "yes", "0", "false", "no"):
        raise pytest.UsageError(f"environment variable DLPERF_UPDATE_BASELINES={raw!r}: use 1 or 0")
    return raw in ("1", "true", "yes")


def _require_baselines(config: pytest.Config) -> bool:
    """--dlperf-require-baselines, else DLPERF_REQUIRE_BASELINES (1/true/yes or 0/false/no), else the ini key."""
    if config.getoption("dlperf_require_baselines"):
        return True
    raw = os.environ.get("DLPERF_REQUIRE_BASELINES", "").strip().lower()
    if raw:
        if raw not in ("1", "true", "yes", "0", "false", "no"):
            raise pytest.UsageError(f"environment variable DLPERF_REQUIRE_BASELINES={raw!r}: use 1 or 0")
        return raw in ("1", "true", "yes")
    return bool(config.getini("dlperf_require_baselines"))
