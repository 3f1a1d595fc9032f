"""``dlperf record``: the recorded runs a machine type's figures need, each a separate run of the suite.

Each ``--update-baselines`` run adds one run to every figure it records (:mod:`.judging.baselines`), and a
figure of a new machine type wants :data:`RECORDINGS` of them. So the suite's command is run again and
again, each time as a process of its own (its own pytest sessions, so that the noise model sees each
recording's common shift), until every figure the command records has them.

What is done is read from the baseline files, never from a state of this command's own, so running it
again after an interruption continues where it stopped. This machine's files are those its figures go to:
its CPU's (at its own ISA level and each capped one), its GPUs' and, where it can count, the counting
model's. The figures in them with the fewest runs say how many recordings remain; a command given after ``--``
runs at least once, since a new test's figures are in no file until it has run. After each recording the
files are read again: a figure the recording added no run to is not one the command records (another
profile's or selection's, a removed test's), and is no longer waited for; one whose history started again
(recorded beyond its gate) needs its runs again.

The recordings get ``DLPERF_UPDATE_BASELINES=1`` in their environment rather than ``--update-baselines`` on
their command line: the variable reaches every pytest run under the command (tox passes ``DLPERF_*`` to its
environments, the ISA-capped reruns inherit it), where a flag reaches only the program it is given to.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Mapping, Sequence, TextIO

from pytest_dlperf import instructions
from pytest_dlperf.child.environment import cpu_keys, hardware_key
from pytest_dlperf.child.gpus import gpus
from pytest_dlperf.judging.baselines import RECORDINGS, BaselineStore, runs_of
from pytest_dlperf.reports.cost import run_seconds
from pytest_dlperf.reports.records import ReportError
from pytest_dlperf.text import duration
from pytest_dlperf.units import count

#: The suite's own command: every framework's quick and slow tiers, each quick tier with its ISA-capped rerun.
DEFAULT_COMMAND = ("tox", "-m", "perf")
#: Where the default command's reports are: its cost profile estimates the next recording's time.
DEFAULT_REPORTS = ("reports", "perf-*.xml")
#: The default command's tox environments (tox.ini's ``perf`` label), each writing ``reports/<name>.xml``.
DEFAULT_ENVIRONMENTS = ("perf-torch", "perf-torch-slow", "perf-tf", "perf-tf-slow", "perf-mxnet", "perf-mxnet-slow")
#: The setting that makes a pytest run record (``plugin.options``).
UPDATE = "DLPERF_UPDATE_BASELINES"
#: Recordings beyond the ones planned at the start that figures whose history started again may take.
EXTRA = RECORDINGS
#: The exit status of a command stopped by Ctrl-C (128 + SIGINT).
INTERRUPTED = 130

#: (file's key, entry key, metric)
Figure = tuple[str, str, str]


class RecordingError(Exception):
    """The recordings cannot go on; the message names the problem and the fix."""


def machine_keys() -> list[str]:
    """The baseline files this machine's figures go to, as the plugin files them."""
    keys = cpu_keys() + ([hardware_key("cuda")] if gpus() else [])
    return keys + ([] if instructions.unavailable() else [instructions.counting_key()])


def read_runs(directory: Path, keys: Sequence[str]) -> dict[Figure, list[dict[str, Any]]]:
    """Every figure of the files ``keys`` in ``directory``, with its recorded runs."""
    store = BaselineStore(directory)
    return {(key, entry, metric): runs_of(rec) for key in keys
            for entry, metrics in store.entries(key).items() for metric, rec in metrics.items()}


def recordings_needed(runs: Mapping[Figure, Sequence[object]]) -> int:
    """The recordings that give every figure :data:`RECORDINGS` runs; all of them where nothing is recorded."""
    if not runs:
        return RECORDINGS
    return max(RECORDINGS - min(len(r) for r in runs.values()), 0)


def profiled_seconds(reports: Sequence[Path], strict: bool = True) -> tuple[float, list[Path]]:
    """One recording's seconds by the cost profile of an earlier run's ``reports``, and the reports that had one.
    Each report is a pytest run of its own: an ISA-capped rerun repeats tests its first run measured.
    Not ``strict``: a report that cannot be read is left out (a run killed while writing it)."""
    seconds, read = 0.0, []
    for path in reports:
        try:
            found = run_seconds(path)
        except ReportError:
            if strict:
                raise
            continue
        if found is not None:
            seconds += found
            read.append(path)
    return seconds, read


def default_reports() -> list[Path]:
    """The default command's reports of its last run here."""
    folder, pattern = DEFAULT_REPORTS
    return sorted(Path(folder).glob(pattern))


def unprofiled_environments(reports: Sequence[Path]) -> list[str]:
    """The default command's environments none of ``reports`` is from: an estimate leaves their time out."""
    names = {path.name for path in reports}
    return [env for env in DEFAULT_ENVIRONMENTS if f"{env}.xml" not in names]


def check_command(command: Sequence[str], default: bool) -> None:
    """A usage error unless ``command``'s program can be started."""
    program = command[0] if command else ""
    if os.sep in program and os.access(program, os.X_OK) and Path(program).is_file():
        return
    if os.sep not in program and program and shutil.which(program):
        return
    if default:
        raise RecordingError(f"{program} is not on PATH: install it (python3 -m pip install tox), or give the "
                             "suite's command after --: dlperf record -- pytest perf_tests")
    raise RecordingError(f"{program!r} is not a program that can be run here; give the suite's command after --, "
                         "e.g. dlperf record -- pytest perf_tests")


def run_command(command: Sequence[str], env: Mapping[str, str]) -> int:
    """The command's exit status. On Ctrl-C the command (in the same process group) stopped too: it is left
    to finish stopping, so its pytest runs write what they recorded, and KeyboardInterrupt goes on."""
    try:
        proc = subprocess.Popen(list(command), env=dict(env))
    except OSError as exc:
        raise RecordingError(f"cannot run {command[0]}: {exc.strerror or exc}; give the suite's command "
                             "after --, e.g. dlperf record -- pytest perf_tests") from None
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.wait()
        raise


def _files(directory: Path, figures: Mapping[Figure, object] | set[Figure]) -> str:
    return ", ".join(str(directory / f"{key}.json") for key in sorted({f[0] for f in figures}))


def _examples(figures: set[Figure], shown: int = 3) -> str:
    names = [f"{entry} {metric}" for _, entry, metric in sorted(figures)[:shown]]
    return "; ".join(names) + ("; ..." if len(figures) > shown else "")


def record(command: Sequence[str], directory: Path, out: TextIO, resume: str,
           profile: tuple[float, int] = (0.0, 0), default: bool = False, unprofiled: Sequence[str] = ()) -> int:
    """Run ``command`` as recordings until every figure it records has :data:`RECORDINGS` runs; the exit
    status: 0 done (or nothing to do), a failed recording's own, :data:`INTERRUPTED` on Ctrl-C.
    ``resume``: the command line that continues; ``profile``: :func:`profiled_seconds` of an earlier run;
    ``default``: ``command`` is :data:`DEFAULT_COMMAND`; ``unprofiled``: its parts the profile has no time of."""

    def say(text: str) -> None:
        print(f"dlperf record: {text}", file=out, flush=True)

    if directory.exists() and not directory.is_dir():
        raise RecordingError(f"--baseline-dir {directory} is a file; give the folder of baseline files")
    keys = machine_keys()
    runs = read_runs(directory, keys)
    remaining = recordings_needed(runs)
    if not remaining and default:
        say(f"nothing to record: every one of the {count(len(runs), 'figure')} in {_files(directory, runs)} "
            f"has {RECORDINGS} or more recorded runs; a test added since is not in them until it runs: give it "
            "after --, e.g. dlperf record -- pytest PATH/test_new.py")
        return 0
    check_command(command, default)
    if not remaining:
        remaining = 1
        say(f"every one of the {count(len(runs), 'figure')} in {_files(directory, runs)} has {RECORDINGS} or more "
            "recorded runs, but what this command records is known only once it runs (a new test's figures are "
            "not in the files yet): 1 recording to find out, which adds a run to every figure it records")
    elif runs:
        short = {f for f, r in runs.items() if len(r) < RECORDINGS}
        fewest = min(len(r) for r in runs.values())
        say(f"{count(len(short), 'figure')} of {len(runs)} in {_files(directory, runs)} have fewer than "
            f"{RECORDINGS} recorded runs (the fewest {fewest}): {count(remaining, 'recording')} to make")
    else:
        say(f"no figure of this machine ({keys[0]}) is in {directory}/ yet: {count(remaining, 'recording')} "
            "to make")
    shown = f"{UPDATE}=1 {shlex.join(command)}"
    say(f"each recording is one run of: {shown}")
    per_run, profiled = profile
    if profiled:
        left_out = (f", which has no report of {', '.join(unprofiled)}: their time is not in it, so the "
                    "recordings take longer" if unprofiled else "")
        say(f"estimated time: about {duration(remaining * per_run)} ({remaining} x {duration(per_run)}, the "
            f"tests' time in the cost profile of {count(profiled, 'report')} of an earlier run{left_out}; "
            "start-up comes on top)")
    else:
        say(f"estimated time: {remaining} x one recording's, stated when the first ends (no cost profile of an "
            "earlier run was given: --estimate-from REPORT.xml|DIR)")

    env = {**os.environ, UPDATE: "1"}
    started, done, limit = time.monotonic(), 0, remaining + EXTRA
    waived: set[Figure] = set()
    while remaining:
        if done == limit:
            say(f"stopped after {done} recordings: the history of some figures started again when a recording "
                f"was beyond their gate (a real change, or a figure noisier than its gate), so {remaining} more "
                f"would be needed; look at them with dlperf history {_files(directory, runs)}, then resume with: "
                f"{resume}")
            return 1
        done += 1
        say(f"recording {done} of {done + remaining - 1}")
        began = time.monotonic()
        try:
            code = run_command(command, env)
        except KeyboardInterrupt:
            say(f"interrupted in recording {done} after {duration(time.monotonic() - began)}; the runs it "
                f"recorded are kept; resume with: {resume}")
            return INTERRUPTED
        took = time.monotonic() - began
        if code:
            status = code if code > 0 else 128 - code  # killed by signal -code, as a shell reports it
            say(f"recording {done} failed with exit status {status} after {duration(took)}; the runs it recorded "
                f"are kept; fix what failed, then resume with: {resume}")
            return status
        after = read_runs(directory, keys)
        recorded = {f for f, r in after.items() if runs.get(f) != r}
        if not recorded:
            raise RecordingError(
                f"recording {done} ran {shown} to the end but added no run to any figure of this machine in "
                f"{directory}/ ({', '.join(keys)}): the command must run pytest on tests that use the dlperf "
                "fixture, from the folder whose baselines/ it writes (else give --baseline-dir), with "
                f"{UPDATE} reaching pytest (tox: pass_env = DLPERF_*)")
        others = set(after) - recorded - waived
        if others:
            say(f"kept as they are and not waited for: {count(len(others), 'figure')} in these files that this "
                f"command does not record (other tests', profiles' or selections', or removed tests'): "
                f"{_examples(others)}")
            waived |= others
        runs = after
        remaining = recordings_needed({f: r for f, r in after.items() if f in recorded})
        more = f"{remaining} more to make, about {duration(remaining * took)}" if remaining else "none more to make"
        say(f"recording {done} done in {duration(took)}: {count(len(recorded), 'figure')} recorded; {more}; "
            f"{duration(time.monotonic() - started)} elapsed")
    say(f"done: every figure this command records has {RECORDINGS} or more recorded runs; review the diff of "
        f"{directory}/ and commit it")
    return 0
