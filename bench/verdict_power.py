"""How often do the verdicts cry wolf, and do they catch a real slowdown?  (Not a pytest test.)

Two modes, each the plugin's own rule on real training children (torch, the smoke profile's
ResNet-18 unless told otherwise), with slowdowns injected as real work inside every training step
(``bench/slowed_child.py``: the host waits for a fixed fraction of each step's own duration,
after synchronising the device).

**Stored mode** (the default): what ``dlperf.check`` does against a stored baseline, with the run
as the unit of evidence. Each run is one fresh training child (``runner.run_scenario``), as a test
run is; its figure is the run-level throughput (the median of its rounds), which is what baselines
record. The runs are taken in cycles: first ``--history`` cycles of one unchanged run each, then one
cycle per trial of an unchanged run and runs slowed by 5% and 10% (in an order that rotates from
cycle to cycle, so drift of the machine hits all alike). Trial ``t`` judges that cycle's three runs
with ``verdict.compare`` against the unchanged runs of the ``--history`` cycles before it (a
sliding window, as a baseline's history of ``--update-baselines`` runs), at the profile's tolerance
and two per-figure levels: 0.05 (one figure judged alone) and the Bonferroni level of a suite of
``--family`` figures (what the plugin uses). It also counts how often the A/A run falls inside the
95% prediction interval its history gives (the gate's noise bound at alpha 0.05): the interval's
coverage. The cost of a stored comparison is one run.

**Paired mode** (``--paired``): the A/B and ratio claims' mechanism (``pytest_dlperf.processes.paired``).
Each trial is one interleaved group of four variants of the same scenario, each in ``--processes``
persistent children: the reference, an unchanged copy (A/A), and copies slowed by 5% and 10%. Each
copy's paired ratio over the reference is decided by ``stats.decide`` at ``--threshold`` (default 5%,
the A/B default): a false alarm is an A/A "regression", a detection a slowed copy's "regression".
The cost of a paired comparison is set against two sequential runs of the same scenario.

    python bench/verdict_power.py --trials 20 --save stored.json     # stored mode
    python bench/verdict_power.py --load stored.json --family 100    # re-decide, no training
    python bench/verdict_power.py --paired --trials 20 --generations 4 --pairs 32
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
from pathlib import Path
from typing import Any, Sequence

from pytest_dlperf.judging import verdict
from pytest_dlperf.judging.baselines import Baseline
from pytest_dlperf.judging.gates import FAMILY_ALPHA, Gate, family_alpha
from pytest_dlperf.judging.noise import own_spread
from pytest_dlperf.plugin.options import DEFAULT_TOLERANCE
from pytest_dlperf.profiles import scenario_for
from pytest_dlperf.result import metric_from
from pytest_dlperf.scenario import Scenario

BENCH = str(Path(__file__).resolve().parent)
SOFTWARE = {"framework": "torch"}
#: The suite's judged figures on a 2-core CPU run (about 250): the family the plugin's level divides by.
SUITE_FAMILY = 250


def slowed(s: Scenario, label: str, slowdown: float) -> Scenario:
    """``s`` run by bench/slowed_child.py, slowed by ``slowdown``; the value is written to one length so
    every variant's environment (and so its stack's alignment) is the same size."""
    return s.replace(label=label, env={**s.env, "DLPERF_BENCH_SLOWDOWN": f"{slowdown:.3f}", "PYTHONPATH": BENCH})


# ---------------------------------------------------------------- stored mode

STORED_VARIANTS = (("aa", 0.0), ("slowed_5", 0.05), ("slowed_10", 0.10))


def stored_runs(args: argparse.Namespace, s: Scenario, describe: str) -> dict[str, Any]:
    """Every run's throughput, cycle by cycle (see the module's docstring)."""
    from pytest_dlperf.processes.devicelock import device_lock
    from pytest_dlperf.processes.runner import run_scenario

    workdir = Path(tempfile.mkdtemp(prefix="dlperf-stored-power-"))
    data: dict[str, Any] = {"describe": describe, "history": args.history, "tolerance": args.tolerance,
                            "cycles": []}
    for cycle in range(args.history + args.trials):
        kinds = [STORED_VARIANTS[0]] if cycle < args.history else list(STORED_VARIANTS)
        shift = cycle % len(kinds)
        row: dict[str, Any] = {"load": os.getloadavg()[0]}
        for label, slowdown in kinds[shift:] + kinds[:shift]:
            start = time.perf_counter()
            with device_lock(["cpu"] if s.device == "cpu" else ["0"], timeout=3600,
                             owner="bench/verdict_power.py"):  # as a test run holds it
                result = run_scenario(slowed(s, label, slowdown), workdir, module="slowed_child")
            row[label] = {"throughput": result.metrics["throughput"].value, "wall_s": time.perf_counter() - start}
        data["cycles"].append(row)
        if args.save:  # after every cycle, so a long run interrupted keeps what it measured
            args.save.write_text(json.dumps(data, indent=1))
        print(f"cycle {cycle + 1}/{args.history + args.trials} (load {row['load']:.2f}): " + ", ".join(
            f"{label} {row[label]['throughput']:.2f}" for label, _ in kinds), flush=True)
    return data


def stored_trials(data: dict[str, Any]) -> list[tuple[list[float], dict[str, float]]]:
    """(history, {variant: throughput}) per trial: the unchanged runs of the cycles before it."""
    cycles, history = data["cycles"], data["history"]
    unchanged = [c["aa"]["throughput"] for c in cycles]
    return [(unchanged[t - history:t], {label: cycles[t][label]["throughput"] for label, _ in STORED_VARIANTS})
            for t in range(history, len(cycles))]


def judge_stored(history: list[float], value: float, tolerance: float, alpha: float) -> str:
    runs = tuple(history)
    baseline = Baseline(value=statistics.median(runs), unit="samples/s", direction="higher", samples=runs,
                        iqr=0.0, software=SOFTWARE, recorded="", runs=runs)
    metric = metric_from("throughput", [value], "samples/s")
    return verdict.compare("bench", "candidate", metric, baseline, tolerance, SOFTWARE, alpha=alpha).status


def stored_report(data: dict[str, Any], describe: str, family: int) -> int:
    trials = stored_trials(data)
    n = len(trials)
    tolerance = data["tolerance"]
    levels = [("one figure", FAMILY_ALPHA), (f"suite of {family}", family_alpha(family, "residual"))]
    print(f"\nstored mode: {describe}; history of {data['history']} runs, tolerance {tolerance:.0%}, {n} trials")
    print(f"{'level':<16} {'alpha':>8} {'A/A slower':>10} {'A/A faster':>10} {'A/A inconcl.':>12} "
          f"{'5% caught':>9} {'10% caught':>10}")
    for name, alpha in levels:
        out = {label: [judge_stored(h, v[label], tolerance, alpha) for h, v in trials] for label, _ in STORED_VARIANTS}
        aa = out["aa"]
        print(f"{name:<16} {alpha:>8.2g} {aa.count(verdict.REGRESSION):>7}/{n:<2}"
              f" {aa.count(verdict.IMPROVEMENT):>7}/{n:<2} {aa.count(verdict.INCONCLUSIVE):>9}/{n:<2}"
              f" {out['slowed_5'].count(verdict.REGRESSION):>6}/{n:<2}"
              f" {out['slowed_10'].count(verdict.REGRESSION):>7}/{n:<2}")
    inside, widths = 0, []
    for history, values in trials:
        spread = own_spread(history)
        if not spread.df:
            continue
        bound = Gate(0.0, spread.sd, spread.df, len(history), 0.025).bound  # a two-sided 95% interval
        widths.append(math.expm1(bound))
        inside += abs(math.log(values["aa"] / statistics.geometric_mean(history))) <= bound
    if widths:
        print(f"95% prediction interval of one more run: held the A/A run in {inside}/{len(widths)} trials; "
              f"median half-width {statistics.median(widths):.1%}")
    changes = {label: [math.log(v[label] / statistics.geometric_mean(h)) for h, v in trials]
               for label, _ in STORED_VARIANTS}
    print("median change against the history: " + ", ".join(
        f"{label} {math.expm1(statistics.median(c)):+.1%}" for label, c in changes.items()))
    wall = statistics.median(c[label]["wall_s"] for c in data["cycles"] for label, _ in STORED_VARIANTS if label in c)
    print(f"cost: one stored comparison is one run, {wall:.0f} s (median); the history's runs are paid once")
    aa_alarms = sum(judge_stored(h, v["aa"], tolerance, family_alpha(family, "residual")) == verdict.REGRESSION
                    for h, v in trials)
    return 0 if aa_alarms == 0 else 1


# ---------------------------------------------------------------- paired mode

PAIRED_VARIANTS = (("aa", 0.0), ("slowed_5", 0.05), ("slowed_10", 0.10))
PAIRED_SWEEP = (0.03, 0.05, 0.06, 0.08, 0.10)


def paired_trials(args: argparse.Namespace, s: Scenario, describe: str) -> dict[str, Any]:
    from pytest_dlperf.processes.devicelock import device_lock
    from pytest_dlperf.processes.paired import Variant, run_paired
    from pytest_dlperf.processes.runner import run_scenario
    from pytest_dlperf.judging.stats import decide

    workdir = Path(tempfile.mkdtemp(prefix="dlperf-paired-power-"))
    start = time.perf_counter()
    for label in ("seq_a", "seq_b"):
        run_scenario(s.replace(label=label), workdir)
    sequential_s = time.perf_counter() - start
    print(f"two sequential runs of the scenario: {sequential_s:.1f} s", flush=True)
    # The reference runs the very same child as the unchanged copy (module, environment, its size): a
    # process's environment and argv move its stack's alignment, which alone can shift a CPU figure by
    # a few percent.
    variants = [Variant(slowed(s, label, slowdown), module="slowed_child")
                for label, slowdown in (("reference", 0.0), *PAIRED_VARIANTS)]
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

    Pair ``i`` is taken by process ``i % processes`` of every variant (``schedule.schedule``), of its
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
    parser.add_argument("--trials", type=int, default=20, help="trials (stored: cycles after the history)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--profile", default="smoke", choices=tuple(DEFAULT_TOLERANCE))
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--steps-per-round", type=int, default=None, help="default: the profile's")
    parser.add_argument("--save", type=Path, help="write the measured figures here (JSON)")
    parser.add_argument("--load", type=Path, help="decide on figures saved earlier instead of training")
    parser.add_argument("--history", type=int, default=5, help="stored mode: recorded runs a trial is judged by")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="stored mode: default options.DEFAULT_TOLERANCE of the profile")
    parser.add_argument("--family", type=int, default=SUITE_FAMILY,
                        help=f"stored mode: judged figures in the suite the level is set for (default {SUITE_FAMILY})")
    parser.add_argument("--paired", action="store_true", help="the paired, interleaved mode (see above)")
    parser.add_argument("--pairs", type=int, default=20, help="paired mode: pairs of rounds per trial")
    parser.add_argument("--processes", type=int, default=2, help="paired mode: processes per variant")
    parser.add_argument("--generations", type=int, default=1,
                        help="paired mode: successive sets of fresh processes sharing the pairs")
    parser.add_argument("--threshold", type=float, default=0.05, help="paired mode: decision threshold")
    args = parser.parse_args(argv)
    if args.trials < 1 or args.history < 2:
        parser.error("--trials must be at least 1 and --history at least 2")
    if args.load:
        data = json.loads(args.load.read_text())
        describe = data["describe"] + f" (loaded from {args.load})"
        data["tolerance"] = args.tolerance or data.get("tolerance")
        return paired_report(data, describe) if args.paired else stored_report(data, describe, args.family)
    overrides = {k: v for k, v in (("steps_per_round", args.steps_per_round),) if v}
    s = scenario_for(args.profile, "torch", args.model, device=args.device, **overrides)
    describe = (f"{s.model} {s.precision} batch {s.batch_size} {s.image_size}px, {s.rounds} rounds x "
                f"{s.steps_per_round} steps, {s.device}, {os.cpu_count()} CPUs")
    print(describe, flush=True)
    if args.paired:
        data = {"describe": describe, **paired_trials(args, s, describe)}
        if args.save:
            args.save.write_text(json.dumps(data, indent=1))
        return paired_report(data, describe)
    args.tolerance = args.tolerance or DEFAULT_TOLERANCE[args.profile]
    return stored_report(stored_runs(args, s, describe), describe, args.family)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
