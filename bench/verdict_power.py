"""How often do the verdicts cry wolf, and do they catch a real slowdown?  (Not a pytest test.)

A benchmark of ``pytest_dlperf.judging.verdict.compare`` itself, with the real PyTorch core
timed in-process by the plugin's own harness (``TorchTrainingLoop`` + ``measure``) at
the smoke profile's shapes (resnet18, 64 px, batch 16, 5 rounds x 4 steps).

Each trial measures three runs, each on a freshly built training loop (as each test
run gets a fresh child process): a *baseline*; an *A/A candidate* with no change; and
an *injected candidate* whose every training step is made slower by ``--slowdown``
(15% on CPU, 10% on GPU) of the median step time this trial's baseline measured. The
slowdown is real work inside ``step()``: a host busy-wait on CPU (where the step is
synchronous), extra matrix multiplications queued on the device's stream on GPU (where
a host wait would hide behind the asynchronous queue). The two candidates alternate
their order from trial to trial so drift of the machine hits both alike.

Both candidates are compared with the baseline by ``verdict.compare`` at the profile's
default tolerance (``settings.DEFAULT_TOLERANCE``), on ``throughput`` (per round): the
speed figure a test judges (step time is its reciprocal and is not judged separately).
``peak_host_memory`` is left out: in one process it is the peak of the whole script,
not of one run. ``--rounds`` and ``--steps-per-round`` override the profile's (the first
as ``--dlperf-rounds`` does in a test run), to see whether longer runs help.

Prints per-trial lines, a summary table (false-alarm rate, detection rate, median
observed deltas, the cost of one verdict in microseconds), the same rates for a sweep
of tolerances computed from the same samples, and the load average. Exits 1 when the
false-alarm rate is above 0 or the detection rate below 100% at the tolerance used.

    python bench/verdict_power.py                      # CPU, 10 trials, smoke tolerance
    python bench/verdict_power.py --trials 20 --save verdict_power.json
    python bench/verdict_power.py --load verdict_power.json --tolerance 0.10   # re-decide, no training
    python bench/verdict_power.py --device cuda --profile full                 # 10% slowdown on the GPU
    python bench/verdict_power.py --paired --trials 20                          # the paired mode, below

``--paired``: the A/B and ratio claims' mechanism instead (``pytest_dlperf.processes.paired``). Each trial is
one interleaved group of four variants of the same scenario, each in ``--processes`` persistent
children: the reference, an unchanged copy (A/A), and two copies whose every step is slowed by
5% and 10% of its own duration (``bench/slowed_child.py``: a host busy-wait, real work in the
step). Each copy's paired ratio over the reference is decided by ``stats.decide`` at
``--threshold`` (default 5%, the A/B default): a false alarm is an A/A "regression", a detection a
slowed copy's "regression". The cost of a paired comparison is set against two sequential runs of
the same scenario (``runner.run_scenario``), timed once at the start.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pytest_dlperf.judging import verdict
from pytest_dlperf.judging.baselines import Baseline, BaselineStore
from pytest_dlperf.profiles import scenario_for
from pytest_dlperf.result import Metric, metric_from
from pytest_dlperf.scenario import Scenario
from pytest_dlperf.plugin.settings import DEFAULT_TOLERANCE

#: Measured per run: throughput is what a test judges (``session.CHECKED_METRICS``); the step
#: time only sizes the injected slowdown.
MEASURED = ("throughput", "step_time")
JUDGED = ("throughput",)
SWEEP = (0.05, 0.08, 0.10, 0.12, 0.15, 0.20)
SOFTWARE = {"framework": "torch"}


# ---------------------------------------------------------------- measuring


def build_loop(s: Scenario) -> Any:
    import torch

    from pytest_dlperf.child.cores.torch_core import TorchTrainingLoop

    torch.manual_seed(s.seed)
    return TorchTrainingLoop(s)


def spin_injector(extra_s: float) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Host busy-wait after each step: on CPU the step's work is done when it returns."""

    def wrap(step: Callable[[], Any]) -> Callable[[], Any]:
        def slowed() -> Any:
            loss = step()
            end = time.perf_counter() + extra_s
            while time.perf_counter() < end:
                pass
            return loss

        return slowed

    return wrap


def matmul_injector(device: str, extra_s: float) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Extra matmuls on the device's stream, calibrated to take ``extra_s`` per step."""
    import torch

    n = 1024 if device == "cuda" else 256
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(5):
        a @ b
    sync()
    reps = 50
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    per_matmul = (time.perf_counter() - start) / reps
    count = max(1, round(extra_s / per_matmul))

    def wrap(step: Callable[[], Any]) -> Callable[[], Any]:
        def slowed() -> Any:
            loss = step()
            for _ in range(count):
                torch.mm(a, b)
            return loss

        return slowed

    return wrap


def measure_once(s: Scenario, inject: Callable[[Callable[[], Any]], Callable[[], Any]] | None) -> dict[str, Metric]:
    from pytest_dlperf.child.measure import measure

    loop = build_loop(s)
    if inject is not None:
        loop.step = inject(loop.step)  # the harness calls loop.step(): the slowdown is inside the timed step
    metrics, _, _ = measure(loop, s)
    return {name: metrics[name] for name in MEASURED}


# ---------------------------------------------------------------- deciding


def as_baseline(metrics: dict[str, Metric]) -> dict[str, Baseline]:
    """Through the real baseline store: staged, written to JSON, read back."""
    with tempfile.TemporaryDirectory() as tmp:
        store = BaselineStore(Path(tmp))
        for m in metrics.values():
            store.stage("bench", {}, "bench", m, SOFTWARE)
        store.flush()
        fresh = BaselineStore(Path(tmp))
        found = {name: fresh.lookup("bench", "bench", name) for name in metrics}
    return {name: b for name, b in found.items() if b is not None}


@dataclass
class Trial:
    baseline: dict[str, list[float]]
    same: dict[str, list[float]]
    slowed: dict[str, list[float]]
    injected_s: float


def judged_metrics(samples: dict[str, list[float]]) -> dict[str, Metric]:
    """The figures a verdict is taken on (``JUDGED``), as metrics."""
    units = {"throughput": ("samples/s", "higher")}
    return {name: metric_from(name, samples[name], *units[name]) for name in JUDGED}


def decide(baseline: dict[str, list[float]], candidate: dict[str, list[float]],
           tolerance: float) -> list[verdict.Verdict]:
    base = as_baseline(judged_metrics(baseline))
    return [verdict.compare("bench", "candidate", m, base[name], tolerance, SOFTWARE)
            for name, m in judged_metrics(candidate).items()]


def outcome(verdicts: Sequence[verdict.Verdict]) -> str:
    statuses = {v.status for v in verdicts}
    return verdict.REGRESSION if verdict.REGRESSION in statuses else (
        verdict.IMPROVEMENT if verdict.IMPROVEMENT in statuses else verdict.OK)


def rates(trials: Sequence[Trial], tolerance: float) -> tuple[int, int]:
    """(false alarms, detections) over the trials at this tolerance."""
    alarms = sum(outcome(decide(t.baseline, t.same, tolerance)) == verdict.REGRESSION for t in trials)
    caught = sum(outcome(decide(t.baseline, t.slowed, tolerance)) == verdict.REGRESSION for t in trials)
    return alarms, caught


def verdict_cost_us(trial: Trial, tolerance: float, calls: int) -> dict[str, float]:
    """Median wall time of one ``compare`` call per metric (summaries and rank test included)."""
    base = as_baseline(judged_metrics(trial.baseline))
    out = {}
    for name, metric in judged_metrics(trial.slowed).items():
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            verdict.compare("bench", "candidate", metric, base[name], tolerance, SOFTWARE)
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times) * 1e6
    return out


# ---------------------------------------------------------------- reporting


def fmt_verdicts(vs: Sequence[verdict.Verdict]) -> str:
    parts = []
    for v in vs:
        p = f" p={v.p_value:.3f}" if v.p_value is not None else ""
        parts.append(f"{v.metric} {v.delta:+.1%} tol {v.tolerance:.0%}{p} {v.status}")
    return "; ".join(parts)


def run_trials(args: argparse.Namespace, s: Scenario) -> list[Trial]:
    trials = []
    for k in range(args.trials):
        base = measure_once(s, None)
        step_median = base["step_time"].value
        extra = args.slowdown * step_median
        inject = (spin_injector(extra) if args.inject == "spin" else matmul_injector(s.device, extra))
        if k % 2 == 0:
            same, slowed = measure_once(s, None), measure_once(s, inject)
        else:
            slowed, same = measure_once(s, inject), measure_once(s, None)
        t = Trial({n: list(m.samples) for n, m in base.items()}, {n: list(m.samples) for n, m in same.items()},
                  {n: list(m.samples) for n, m in slowed.items()}, extra)
        trials.append(t)
        print(f"trial {k + 1}/{args.trials}: baseline {base['throughput'].value:.2f} samples/s, "
              f"step {step_median * 1e3:.1f} ms, injected {extra * 1e3:.1f} ms/step, "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
        print(f"    A/A      {fmt_verdicts(decide(t.baseline, t.same, args.tolerance))}", flush=True)
        print(f"    injected {fmt_verdicts(decide(t.baseline, t.slowed, args.tolerance))}", flush=True)
    return trials


def deltas(trials: Sequence[Trial], which: str, metric: str) -> list[float]:
    out = []
    for t in trials:
        base = statistics.median(t.baseline[metric])
        out.append((statistics.median(getattr(t, which)[metric]) - base) / base)
    return out


def median_delta(trials: Sequence[Trial], which: str, metric: str) -> float:
    return statistics.median(deltas(trials, which, metric))


def report(args: argparse.Namespace, trials: Sequence[Trial], describe: str, loads: list[float]) -> int:
    n = len(trials)
    alarms, caught = rates(trials, args.tolerance)
    cost = verdict_cost_us(trials[0], args.tolerance, args.calls)
    print()
    print(f"{describe}; {n} trials; slowdown injected: {args.slowdown:.0%} of the baseline's median step "
          f"time ({args.inject}); tolerance {args.tolerance:.0%}")
    rows = [
        ("false-alarm rate (A/A -> regression)", f"{alarms}/{n} = {alarms / n:.0%}"),
        ("detection rate (injected -> regression)", f"{caught}/{n} = {caught / n:.0%}"),
        ("median delta A/A throughput", f"{median_delta(trials, 'same', 'throughput'):+.1%}"),
        ("median delta injected throughput", f"{median_delta(trials, 'slowed', 'throughput'):+.1%}"),
        ("median delta injected step_time", f"{median_delta(trials, 'slowed', 'step_time'):+.1%}"),
    ]
    rows += [(f"one verdict, {name} ({len(trials[0].baseline[name])} vs {len(trials[0].slowed[name])} samples)",
              f"{us:.0f} us (median of {args.calls} calls)") for name, us in cost.items()]
    rows.append(("load average (1 min) start / end", f"{loads[0]:.2f} / {loads[-1]:.2f}"))
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    print()
    print("  same samples, other tolerances (widening by spread and rank test as in verdict.py):")
    print(f"  {'tolerance':>9}  {'false alarms':>12}  {'detected':>8}")
    good = []
    for tol in sorted(set(SWEEP) | {args.tolerance}):
        a, c = rates(trials, tol)
        mark = "  <- used" if tol == args.tolerance else ""
        print(f"  {tol:>9.0%}  {a:>5}/{n:<6}  {c:>4}/{n:<3}{mark}")
        if a == 0 and c == n:
            good.append(tol)
    if good:
        print(f"  tolerances with no false alarm and every slowdown caught: {', '.join(f'{t:.0%}' for t in good)}")
    else:
        print("  no tolerance in the sweep gets both numbers right on these samples")
    drift = max(abs(d) for d in deltas(trials, "same", "throughput"))
    injected = deltas(trials, "slowed", "throughput")
    print(f"  run-to-run drift (largest A/A throughput delta, either way): {drift:.1%}; "
          f"injected throughput deltas {min(injected):+.1%} .. {max(injected):+.1%}")
    if max(injected) >= -drift:
        print("  the injected slowdown is within this machine's run-to-run drift: no threshold on a stored\n"
              "  baseline can catch it every time without false alarms here (longer rounds do not remove drift\n"
              "  between runs; a quieter machine does)")
    ok = alarms == 0 and caught == n
    print(f"\n{'PASS' if ok else 'FAIL'}: false alarms {alarms}/{n}, detected {caught}/{n} "
          f"at tolerance {args.tolerance:.0%}")
    return 0 if ok else 1


# ---------------------------------------------------------------- paired mode

PAIRED_VARIANTS = (("aa", 0.0), ("slowed_5", 0.05), ("slowed_10", 0.10))
PAIRED_SWEEP = (0.03, 0.05, 0.06, 0.08, 0.10)


def paired_trials(args: argparse.Namespace, s: Scenario, describe: str) -> dict[str, Any]:
    from pytest_dlperf.processes.devicelock import device_lock
    from pytest_dlperf.processes.paired import Variant, run_paired
    from pytest_dlperf.processes.runner import run_scenario
    from pytest_dlperf.judging.stats import decide

    bench = str(Path(__file__).resolve().parent)
    workdir = Path(tempfile.mkdtemp(prefix="dlperf-paired-power-"))
    start = time.perf_counter()
    for label in ("seq_a", "seq_b"):
        run_scenario(s.replace(label=label), workdir)
    sequential_s = time.perf_counter() - start
    print(f"two sequential runs of the scenario: {sequential_s:.1f} s", flush=True)
    # The reference runs the very same child as the unchanged copy (module, environment, its size): a
    # process's environment and argv move its stack's alignment, which alone can shift a CPU figure by
    # a few percent; only the slowdown's value differs between the variants, written to equal length.
    variants = []
    for label, slowdown in (("reference", 0.0), *PAIRED_VARIANTS):
        variants.append(Variant(s.replace(label=label, env={**s.env, "DLPERF_BENCH_SLOWDOWN": f"{slowdown:.3f}",
                                                            "PYTHONPATH": bench}),
                                module="slowed_child"))
    trials = []
    for t in range(args.trials):
        start = time.perf_counter()
        with device_lock(["cpu"], timeout=3600, owner="bench/verdict_power.py --paired"):  # as a test run holds it
            group = run_paired(variants, pairs=args.pairs, processes=args.processes, workdir=workdir,
                               generations=args.generations)
        wall = time.perf_counter() - start
        # which process pair took each pair of rounds (generation x process): the units of process luck
        units = [group.schedule[i * len(variants)][1] for i in range(len(group.schedule) // len(variants))]
        row = {"wall_s": wall, "load": os.getloadavg()[0], "units": units}
        for label, _ in PAIRED_VARIANTS:
            ratio = group.ratio(label)
            row[label] = {**ratio.to_dict(), "decision": decide(ratio, args.threshold)}
        trials.append(row)
        if args.save:  # after every trial, so a long run interrupted keeps what it measured
            args.save.write_text(json.dumps({"describe": describe, "sequential_s": sequential_s, "trials": trials,
                                             "threshold": args.threshold, "pairs": args.pairs,
                                             "processes": args.processes, "generations": args.generations},
                                            indent=1))
        print(f"trial {t + 1}/{args.trials} ({wall:.0f} s, load {row['load']:.2f}): " + "; ".join(
            f"{label} {group.ratio(label).describe()} -> {row[label]['decision']}" for label, _ in PAIRED_VARIANTS),
            flush=True)
    return {"sequential_s": sequential_s, "trials": trials, "threshold": args.threshold,
            "pairs": args.pairs, "processes": args.processes, "generations": args.generations}


def process_luck(trials: Sequence[dict[str, Any]], processes: int) -> None:
    """How much of a trial's error is each process's own luck, which more pairs cannot average away.

    Pair ``i`` is taken by process ``i % processes`` of every variant (``paired.schedule``), of its
    generation when there are several (a trial's ``units``: the process index of each pair). Per
    comparison, the spread of the per-process mean log ratios is set against what the spread of the
    rounds alone would give; the excess is the process pairs' own offset (one process's memory
    layout, its threads' placement), shown as the standard deviation of one process's offset.
    """
    if processes < 2:
        return
    observed, expected = [], []
    for t in trials:
        for label, _ in PAIRED_VARIANTS:
            logs = [math.log(r) for r in t[label]["ratios"]]
            units = t.get("units") or [i % processes for i in range(len(logs))]
            groups = [[x for x, u in zip(logs, units) if u == unit] for unit in sorted(set(units))]
            if min(len(g) for g in groups) < 2:
                continue
            means = [statistics.fmean(g) for g in groups]
            observed.append(statistics.variance(means))
            expected.append(statistics.fmean(statistics.variance(g) / len(g) for g in groups))
    if not observed:
        return
    between, rounds = statistics.fmean(observed), statistics.fmean(expected)
    per_process = math.sqrt(max(between - rounds, 0.0) / 2)  # a process pair's offset is two processes' luck
    print(f"process luck: per-process means of a comparison spread by {math.sqrt(between):.3f} (log ratio, sd), "
          f"{math.sqrt(rounds):.3f} expected from the rounds alone: one process's own offset ~{per_process:.3f} "
          f"(sd); with P processes per variant it moves a ratio by ~{per_process:.3f} x sqrt(2/P), whatever the pairs")


def paired_report(data: dict[str, Any], describe: str) -> int:
    from pytest_dlperf.judging.outcomes import IMPROVEMENT, REGRESSION
    from pytest_dlperf.judging.stats import PairedRatio, decide

    trials = data["trials"]
    n = len(trials)
    generations = data.get("generations", 1)
    fresh = f" x {generations} generations" if generations > 1 else ""
    print(f"\npaired mode: {describe}; {data['pairs']} pairs, {data['processes']} processes{fresh} per variant, "
          f"threshold {data['threshold']:.0%}, {n} trials")
    print(f"{'variant':<10} {'injected':>8} {'called slower':>13} {'median ratio':>12} {'ratio range':>15} "
          f"{'median CI width':>15}")
    for label, slowdown in PAIRED_VARIANTS:
        est = [t[label]["estimate"] for t in trials]
        width = [t[label]["high"] - t[label]["low"] for t in trials]
        slower = sum(t[label]["decision"] == REGRESSION for t in trials)
        print(f"{label:<10} {slowdown:>8.0%} {slower:>6}/{n:<6} {statistics.median(est):>12.3f} "
              f"{min(est):>7.3f}-{max(est):<7.3f} {statistics.median(width):>15.3f}")
    print("\nthe same samples decided at other thresholds (false alarms = A/A called slower or faster):")
    print(f"{'threshold':>9} {'A/A slower':>10} {'A/A faster':>10} {'5% caught':>9} {'10% caught':>10}")
    for threshold in PAIRED_SWEEP:
        decided = {label: [decide(PairedRatio.from_dict(t[label]), threshold) for t in trials]
                   for label, _ in PAIRED_VARIANTS}
        aa = decided["aa"]
        print(f"{threshold:>9.0%} {aa.count(REGRESSION):>7}/{n:<2} {aa.count(IMPROVEMENT):>7}/{n:<2} "
              f"{decided['slowed_5'].count(REGRESSION):>6}/{n:<2} {decided['slowed_10'].count(REGRESSION):>7}/{n:<2}")
    wall = statistics.median(t["wall_s"] for t in trials)
    per_comparison = wall / len(PAIRED_VARIANTS)
    print(f"cost: one trial (4 variants) {wall:.0f} s, i.e. {per_comparison:.0f} s per comparison against "
          f"{data['sequential_s']:.0f} s for two sequential runs ({per_comparison / data['sequential_s']:.1f}x)")
    process_luck(trials, data["processes"])
    false_alarms = sum(t["aa"]["decision"] == REGRESSION for t in trials)
    caught = sum(t["slowed_10"]["decision"] == REGRESSION for t in trials)
    return 0 if false_alarms == 0 and caught == n else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="trials (each: baseline, A/A, injected)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--profile", default="smoke", choices=tuple(DEFAULT_TOLERANCE))
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--rounds", type=int, default=None, help="default: the profile's")
    parser.add_argument("--steps-per-round", type=int, default=None, help="default: the profile's")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="default: settings.DEFAULT_TOLERANCE of the profile")
    parser.add_argument("--slowdown", type=float, default=None,
                        help="fraction of the step time; default 0.15 CPU, 0.10 GPU")
    parser.add_argument("--inject", choices=("spin", "matmul"), default=None,
                        help="default: spin on CPU, matmul on GPU")
    parser.add_argument("--calls", type=int, default=2000, help="compare() calls timed for the verdict cost")
    parser.add_argument("--save", type=Path, help="write the measured samples here (JSON)")
    parser.add_argument("--load", type=Path, help="decide on samples saved earlier instead of training")
    parser.add_argument("--paired", action="store_true", help="the paired, interleaved mode (see above)")
    parser.add_argument("--pairs", type=int, default=20, help="paired mode: pairs of rounds per trial")
    parser.add_argument("--processes", type=int, default=2, help="paired mode: processes per variant")
    parser.add_argument("--generations", type=int, default=1,
                        help="paired mode: successive sets of fresh processes sharing the pairs")
    parser.add_argument("--threshold", type=float, default=0.05, help="paired mode: decision threshold")
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    args.slowdown = args.slowdown or (0.10 if args.device == "cuda" else 0.15)
    args.inject = args.inject or ("matmul" if args.device == "cuda" else "spin")
    if args.device == "cuda" and args.inject == "spin":
        parser.error("--inject spin cannot slow an asynchronous GPU step; use matmul")

    if args.paired:
        if args.load:
            data = json.loads(args.load.read_text())
            return paired_report(data, data["describe"] + f" (loaded from {args.load})")
        overrides = {k: v for k, v in (("steps_per_round", args.steps_per_round),) if v}
        s = scenario_for(args.profile, "torch", args.model, device=args.device, **overrides)
        describe = (f"{s.model} {s.precision} batch {s.batch_size} {s.image_size}px, {s.steps_per_round}-step rounds, "
                    f"{s.device}, {os.cpu_count()} CPUs")
        data = {"describe": describe, **paired_trials(args, s, describe)}
        if args.save:
            args.save.write_text(json.dumps(data, indent=1))
        return paired_report(data, describe)

    loads = [os.getloadavg()[0]]
    if args.load:
        data = json.loads(args.load.read_text())
        trials = [Trial(**t) for t in data["trials"]]
        describe = data["describe"] + f" (loaded from {args.load})"
        args.slowdown, args.inject = data["slowdown"], data["inject"]
        args.tolerance = args.tolerance or data.get("tolerance") or DEFAULT_TOLERANCE[args.profile]
        loads = data.get("loads", loads)
    else:
        args.tolerance = args.tolerance or DEFAULT_TOLERANCE[args.profile]
        import torch

        from pytest_dlperf.child.cores.torch_core import apply_threads, configure_precision

        overrides = {k: v for k, v in (("rounds", args.rounds), ("steps_per_round", args.steps_per_round)) if v}
        s = scenario_for(args.profile, "torch", args.model, device=args.device, **overrides)
        apply_threads(s)
        configure_precision(s)
        where = torch.cuda.get_device_name() if s.device == "cuda" else f"CPU x{torch.get_num_threads()} threads"
        describe = (f"{s.model} {s.precision} batch {s.batch_size} {s.image_size}px, {s.rounds} rounds x "
                    f"{s.steps_per_round} steps, on {where}, torch {torch.__version__}")
        print(describe, flush=True)
        trials = run_trials(args, s)
        loads.append(os.getloadavg()[0])
        if args.save:
            args.save.write_text(json.dumps({
                "describe": describe, "tolerance": args.tolerance, "slowdown": args.slowdown,
                "inject": args.inject, "loads": loads,
                "trials": [t.__dict__ for t in trials]}, indent=1))
    return report(args, trials, describe, loads)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
