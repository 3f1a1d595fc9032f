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
  placement between two cores adds;
- ``one-build``: as ``free``, but the model is built once and its rounds are cut into blocks the size of
  a build: if blocks of one build differ as much as builds do, what differs between builds is when they
  ran, not where their tensors landed.

Each round also records the process's CPU time and the VM's steal time (``/proc/stat``): a round slower
because the host took the CPU away shows steal, and one slower while it held the CPU does not.

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
#: condition: (command prefix, environment, compute threads, rebuild the model for each block of rounds)
CONDITIONS: dict[str, tuple[list[str], dict[str, str], int, bool]] = {
    "free": ([], {}, 1, True),
    "no-aslr": (["setarch", platform.machine(), "-R"], {}, 1, True),
    "pinned": (["taskset", "-c", "1"], {}, 1, True),
    "hugepages": ([], {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, 1, True),
    "two-threads": ([], {}, 2, True),
    "one-build": ([], {}, 1, False),
}


def steal_seconds() -> float:
    """The VM's steal time so far, all CPUs (``/proc/stat``), in seconds; 0 where the kernel has none."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def child(args: argparse.Namespace) -> None:
    import gc

    import torch

    torch.set_num_threads(args.threads)
    spec = importlib.util.spec_from_file_location("tiny_lm", STEP_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    builds: list[list[float]] = []
    cpu: list[list[float]] = []
    steal: list[list[float]] = []
    step = None
    for b in range(args.builds):
        if step is None or args.rebuild:
            step = None
            gc.collect()
            step = module.make_step(SimpleNamespace(seed=b, device="cpu", batch_size=16))
            for _ in range(WARMUP):
                step()
        rounds, cpus, steals = [], [], []
        for _ in range(args.rounds):
            started, cpu_started, steal_started = time.perf_counter(), time.process_time(), steal_seconds()
            for _ in range(args.steps):
                step()
            wall = time.perf_counter() - started
            rounds.append(wall / args.steps)
            cpus.append((time.process_time() - cpu_started) / wall)
            steals.append((steal_seconds() - steal_started) / wall)
        builds.append(rounds)
        cpu.append(cpus)
        steal.append(steals)
    print(json.dumps({"seconds": builds, "cpu": cpu, "steal": steal}))


def spawn(args: argparse.Namespace, condition: str) -> dict[str, list[list[float]]]:
    prefix, env, threads, rebuild = CONDITIONS[condition]
    command = [*prefix, sys.executable, __file__, "--child", "--builds", str(args.builds),
               "--rounds", str(args.rounds), "--steps", str(args.steps), "--threads", str(threads),
               *(["--rebuild"] if rebuild else [])]
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


def correlation(xs: list[float], ys: list[float]) -> float:
    return statistics.correlation(xs, ys) if len(set(xs)) > 1 else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--builds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--rebuild", action="store_true", help=argparse.SUPPRESS)
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
    shares: dict[str, dict[str, list[float]]] = {n: {"cpu": [], "steal": []} for n in names}
    started = time.monotonic()
    for i in range(args.processes):
        for name in names if i % 2 == 0 else reversed(names):
            got = spawn(args, name)
            data[name].append(got["seconds"])
            for part in ("cpu", "steal"):
                shares[name][part] += [x for block in got[part] for x in block]
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
    lines.append("# per round: the process's CPU time and the VM's steal time (all CPUs) as shares of its wall "
                 "time, and their correlation with the round's log step time")
    lines.append(f"{'condition':12s} {'cpu median':>10s} {'cpu p10':>8s} {'steal median':>12s} {'steal p90':>9s} "
                 f"{'r(cpu)':>7s} {'r(steal)':>8s}")
    for name in names:
        logs = [math.log(t) for builds in data[name] for rounds in builds for t in rounds]
        cpu, steal = shares[name]["cpu"], shares[name]["steal"]
        deciles = statistics.quantiles(cpu, n=10), statistics.quantiles(steal, n=10)
        lines.append(f"{name:12s} {statistics.median(cpu):10.1%} {deciles[0][0]:8.1%} "
                     f"{statistics.median(steal):12.2%} {deciles[1][-1]:9.2%} {correlation(cpu, logs):7.2f} "
                     f"{correlation(steal, logs):8.2f}")
    lines.append("# raw: " + json.dumps({"seconds": data, "shares": shares}))
    print("\n".join(lines[1:-1]))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
