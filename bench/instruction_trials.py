"""Trials of the instruction count as a user runs it: the example project, counted, judged by pytest.

    python bench/instruction_trials.py [--trials 20] [--extra-mb 18] [--parallel 2] [--out FILE]
                                       [--project DIR --only aa|extra]

The example project (examples/own_step) is copied to a temporary folder; three
``pytest --update-baselines --dlperf-measure=instructions`` runs record its figure, then ``--trials``
runs of the same code (A/A) and ``--trials`` runs with ``TINY_LM_EXTRA_COPY_MB`` (an extra tensor copy in
every step) are judged against them, each a whole pytest run. Instruction counts do not depend on
what else the machine runs, so trials run ``--parallel`` at a time. Prints each trial's count, change
and exit status, the A/A spread of the count over every run, and how many of each kind failed.
``--project`` continues in a folder an earlier call made (its three recorded runs kept), ``--only``
runs one kind of trial there; the summary covers every trial log in the folder.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The summary table's row of the figure: observed, baseline, delta, catches (19 in 20), verdict.
ROW = re.compile(r"::tiny_lm\s+instructions_per_step\s+([0-9.e+]+) instructions\s+(\S+)(?: instructions)?\s+(\S+)"
                 r"\s+(\S+)\s+(.+?)\s*$")
#: The exact count, from the line the plugin prints when the scenario is done.
COUNT = re.compile(r"tiny_lm: done in .*?: ([0-9,]+) instructions per step")


def run(project: Path, name: str, extra_mb: float, *args: str) -> dict[str, object]:
    # a lock folder per trial: counted runs may overlap (counts do not depend on the load), timed ones never
    locks = project / "tmp" / f"locks-{name}"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "TINY_LM_EXTRA_COPY_MB": str(extra_mb),
           "TMPDIR": str(project / "tmp"), "DLPERF_LOCK_DIR": str(locks)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--dlperf-measure=instructions",
                           f"--basetemp={project / 'tmp' / name}", *args],
                          cwd=project, env=env, capture_output=True, text=True, check=False)
    (project / f"{name}.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    entry = read_log(project / f"{name}.log")
    if entry is None:
        raise SystemExit(f"{name}: no instructions_per_step row in its output (exit {done.returncode}):\n"
                         f"{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return entry


SUMMARY = re.compile(r"=+ .*?(\d+ (passed|failed)).* in ([0-9.]+)s")


def read_log(log: Path) -> dict[str, object] | None:
    """A trial's outcome from its pytest output: the count's row and pytest's last line."""
    lines = log.read_text(encoding="utf-8").splitlines()
    row = next((ROW.search(line) for line in lines if ROW.search(line)), None)
    summary = next((SUMMARY.search(line) for line in reversed(lines) if SUMMARY.search(line)), None)
    if row is None or summary is None:
        return None
    exact = next((COUNT.search(line) for line in lines if COUNT.search(line)), None)
    count = float(exact.group(1).replace(",", "")) if exact else float(row.group(1))
    return {"name": log.stem, "code": 1 if "failed" in summary.group(0) else 0, "count": count,
            "delta": row.group(3), "detects": row.group(4), "verdict": row.group(5), "seconds": float(summary.group(3))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--extra-mb", type=float, default=18.0)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--project", type=Path, help="an earlier call's project folder, its records kept")
    parser.add_argument("--only", choices=("aa", "extra"))
    args = parser.parse_args()
    if args.project:
        project = args.project
        work = project.parent
    else:
        work = Path(tempfile.mkdtemp(prefix="dlperf-instruction-trials-"))
        project = work / "project"
        shutil.copytree(REPO / "examples" / "own_step", project, ignore=shutil.ignore_patterns("baselines"))
        (project / "tmp").mkdir()
        for i in (1, 2, 3):
            run(project, f"record{i}", 0.0, "--update-baselines")
    plan = [(f"{kind}{i:02d}", mb) for kind, mb in (("aa", 0.0), ("extra", args.extra_mb))
            if args.only in (None, kind) for i in range(args.trials)
            if not (project / f"{kind}{i:02d}.log").exists()]  # a continued folder keeps its finished trials
    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(lambda p: run(project, p[0], p[1]), plan))
    records, trials = [], []
    for log in sorted(project.glob("*.log")):
        entry = read_log(log)
        if entry is not None:
            (records if log.stem.startswith("record") else trials).append(entry)
    aa = [r for r in trials if str(r["name"]).startswith("aa")]
    extra = [r for r in trials if str(r["name"]).startswith("extra")]
    lines = [f"# instruction trials of the example project: {len(aa)} A/A and {len(extra)} with an extra "
             f"{args.extra_mb:g} MB copy per step, judged against {len(records)} recorded runs, python "
             f"{sys.version.split()[0]}, in {work}"]
    for r in records + trials:
        lines.append(f"{r['name']:9} exit {r['code']}  {r['count']:,.0f} instructions  delta {r['delta']:>7}  "
                     f"detects {r['detects']:>6}  {r['verdict']}  ({r['seconds']:.0f} s)")
    counts = [float(r["count"]) for r in records + aa]  # type: ignore[arg-type]
    logs = [math.log(c) for c in counts]
    lines.append(f"A/A: {len(counts)} runs, spread (sd of log count) {statistics.stdev(logs):.5%}, "
                 f"range {min(counts):,.0f} - {max(counts):,.0f}")
    if extra:
        injected = statistics.median(float(r["count"]) for r in extra) / statistics.median(counts) - 1  # type: ignore[arg-type]
        lines.append(f"injected work: median +{injected:.3%} instructions per step")
    lines.append(f"A/A runs failed: {sum(r['code'] != 0 for r in aa)} of {len(aa)}; "
                 f"injected runs failed: {sum(r['code'] != 0 for r in extra)} of {len(extra)}")
    lines.append(f"seconds per counted pytest run: median {statistics.median(float(r['seconds']) for r in trials):.0f} "
                 f"({args.parallel} at a time)")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
