"""Where does a process's own offset come from, and does rebuilding the model re-roll it? (#44)

    python bench/offset_origin.py [--processes 8] [--builds 4] [--rounds 6] [--steps 10] [--out FILE]

Each process times the example project's step (examples/own_step/tiny_lm.py): it builds the model,
optimizer and batch ``--builds`` times in turn (the previous build dropped first), and each build is
warmed up and timed for ``--rounds`` rounds of ``--steps`` steps. The log step time then splits into
three parts: rounds within a build, builds within a process, and processes. A part that a condition
removes is where the offset lives:

- ``free``: one compute thread, no pinning, address-space randomisation on (the plugin's counted and
  A/B children run like this);
- ``no-aslr``: the same under ``setarch -R``: every process maps its libraries and first buffers at the
  same addresses, so an offset that comes from where things land in memory shrinks between processes;
- ``pinned``: the same pinned to one CPU (``taskset``): an offset from where the scheduler puts the
  thread shrinks;
- ``hugepages``: glibc's allocator backed by transparent huge pages (``glibc.malloc.hugetlb=1``): an
  offset from page placement and TLB reach shrinks;
- ``two-threads``: two compute threads on the two-core VM, the child's default there: what thread
  placement between two cores adds.

Conditions alternate process by process, so the machine's drift falls on all alike. Each part's spread
is estimated with the classical nested random-effects moments, with a 90% interval from the chi-square
of its mean square (the process part's interval is the between-process mean square's).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

STEP_FILE = Path(__file__).resolve().parents[1] / "examples" / "own_step" / "tiny_lm.py"
WARMUP = 3
CONDITIONS: dict[str, tuple[list[str], dict[str, str], int]] = {
    "free": ([], {}, 1),
    "no-aslr": (["setarch", platform.machine(), "-R"], {}, 1),
    "pinned": (["taskset", "-c", "1"], {}, 1),
    "hugepages": ([], {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, 1),
    "two-threads": ([], {}, 2),
}


def child(args: argparse.Namespace) -> None:
    import gc

    import torch

    torch.set_num_threads(args.threads)
    spec = importlib.util.spec_from_file_location("tiny_lm", STEP_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    builds: list[list[float]] = []
    for b in range(args.builds):
        step = module.make_step(SimpleNamespace(seed=b, device="cpu", batch_size=16))
        for _ in range(WARMUP):
            step()
        rounds = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            for _ in range(args.steps):
                step()
            rounds.append((time.perf_counter() - started) / args.steps)
        builds.append(rounds)
        del step
        gc.collect()
    print(json.dumps(builds))


def spawn(args: argparse.Namespace, condition: str) -> list[list[float]]:
    prefix, env, threads = CONDITIONS[condition]
    command = [*prefix, sys.executable, __file__, "--child", "--builds", str(args.builds),
               "--rounds", str(args.rounds), "--steps", str(args.steps), "--threads", str(threads)]
    out = subprocess.run(command, capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": str(threads), **env}).stdout
    return json.loads(out.strip().splitlines()[-1])


def chi2_interval(sd: float, df: float) -> tuple[float, float]:
    from scipy.stats import chi2

    return sd * math.sqrt(df / chi2.ppf(0.95, df)), sd * math.sqrt(df / chi2.ppf(0.05, df))


def components(processes: list[list[list[float]]]) -> dict[str, tuple[float, float, float, float]]:
    """Per part (round, build, process): its sd on the log scale, the mean square's df, and a 90% interval."""
    logs = [[[math.log(t) for t in rounds] for rounds in builds] for builds in processes]
    p, b, r = len(logs), len(logs[0]), len(logs[0][0])
    build_means = [[statistics.fmean(rounds) for rounds in builds] for builds in logs]
    process_means = [statistics.fmean(means) for means in build_means]
    ms_round = sum((x - m) ** 2 for builds, means in zip(logs, build_means)
                   for rounds, m in zip(builds, means) for x in rounds) / (p * b * (r - 1))
    ms_build = r * sum((m - pm) ** 2 for means, pm in zip(build_means, process_means)
                       for m in means) / (p * (b - 1))
    ms_process = b * r * statistics.variance(process_means)
    out = {}
    for name, sd2, ms, df, scale in (
            ("round", ms_round, ms_round, p * b * (r - 1), 1),
            ("build", (ms_build - ms_round) / r, ms_build, p * (b - 1), r),
            ("process", (ms_process - ms_build) / (b * r), ms_process, p - 1, b * r)):
        sd = math.sqrt(max(sd2, 0.0))
        low, high = chi2_interval(math.sqrt(ms / scale), df)
        out[name] = (sd, df, low, high)
    spread = statistics.stdev(process_means)
    out["process means"] = (spread, p - 1, *chi2_interval(spread, p - 1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--builds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    names = args.conditions.split(",")
    unknown = [n for n in names if n not in CONDITIONS]
    if unknown:
        parser.error(f"unknown conditions {unknown}; choose from {list(CONDITIONS)}")
    lines = [f"# offset origin: tiny_lm step, {args.processes} processes per condition, {args.builds} builds x "
             f"{args.rounds} rounds x {args.steps} steps each, python {sys.version.split()[0]}, "
             f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"]
    data: dict[str, list[list[list[float]]]] = {n: [] for n in names}
    started = time.monotonic()
    for i in range(args.processes):
        for name in names if i % 2 == 0 else reversed(names):
            data[name].append(spawn(args, name))
            means = [statistics.fmean(b) * 1e3 for b in data[name][-1]]
            print(f"process {i} {name:12s} build means (ms/step): " + " ".join(f"{m:.2f}" for m in means), flush=True)
    lines.append(f"# {time.monotonic() - started:.0f} s; sd on the log scale (~ relative), 90% interval of the "
                 "part's mean square in brackets")
    lines.append(f"{'condition':12s} {'ms/step':>8s}  {'round':>22s}  {'build':>22s}  {'process':>22s}  "
                 f"{'process means':>22s}")
    for name in names:
        c = components(data[name])
        mean = statistics.fmean(t for builds in data[name] for rounds in builds for t in rounds) * 1e3
        cells = [f"{c[k][0]:6.2%} [{c[k][2]:5.2%},{c[k][3]:6.2%}]" for k in ("round", "build", "process",
                                                                          "process means")]
        lines.append(f"{name:12s} {mean:8.2f}  " + "  ".join(f"{x:>22s}" for x in cells))
    lines.append("# raw: " + json.dumps(data))
    print("\n".join(lines[1:-1]))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
