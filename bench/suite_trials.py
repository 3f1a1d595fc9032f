"""Run-level trials of the plugin's verdicts on whole recorded suite runs.  (Not a pytest test.)

Each recorded run of a suite (one ``--update-baselines`` run, or one judged run's report) is a
vector of figures from one process tree on one machine. A trial takes three runs as the baseline
(their values become a figure's recorded runs, one session each) and one other run as the new run,
and judges it with the plugin's own rule: each figure at its test's check
(:func:`pytest_dlperf.judging.verdict.compare` with the machine's noise model, the run's shift
unknown), then the run as a whole (:func:`pytest_dlperf.judging.run_shift.judge_run`). Four kinds:

- ``aa``: the run as it was: any failure is a false alarm;
- ``one_throughput_-20%``: one throughput figure (each in turn) 20% lower: caught when it fails,
  alone when nothing else does;
- ``one_memory_+8%``: one peak-memory figure 8% higher;
- ``framework_throughput_-30%``: every throughput of the run 30% lower: caught as a shift.

Sources: baseline files (each run of a figure's history is one run; runs without a session id are
placed by position), judged runs' logs (``-ra`` terminal tables: observed over the baseline
shown, times the centre of that baseline's runs) and judged runs' JUnit reports (a folder per run).

    python bench/suite_trials.py --baseline B.json --logs aa-*.log --baseline-of-logs B.json
    python bench/suite_trials.py --baseline B.json --reports run1/reports run2/reports --baseline-of-logs B.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from pytest_dlperf.judging import run_shift
from pytest_dlperf.judging.baselines import Baseline
from pytest_dlperf.judging.gates import family_alpha, tolerance_for
from pytest_dlperf.judging.noise import EXACT, MachineNoise, kind_of
from pytest_dlperf.judging.verdict import CHECKED_METRICS, EVENT_COUNTS, REGRESSION, compare
from pytest_dlperf.result import Metric

#: The profile's tolerance and the machine (its device class picks the stated priors): --tolerance, --hardware.
SETTINGS = {"tolerance": 0.10, "hardware": "cpu-trials"}


def runs_of_file(path: Path) -> tuple[dict[tuple[str, str], dict[str, Any]], list[dict[tuple[str, str], float]]]:
    """(figure facts, runs) of a baseline file: the i-th run from the latest of every figure is one run."""
    entries = json.loads(path.read_text())["entries"]
    facts, runs = {}, {}
    for key, metrics in entries.items():
        for name, rec in metrics.items():
            if name not in CHECKED_METRICS or name in EVENT_COUNTS:
                continue
            facts[(key, name)] = {"unit": rec.get("unit", ""), "direction": rec["direction"],
                                  "software": rec.get("software", {})}
            for back, run in enumerate(reversed(rec.get("runs") or [rec])):
                runs.setdefault(back, {})[(key, name)] = float(run["value"])
    return facts, [runs[i] for i in sorted(runs, reverse=True)]


ROW = re.compile(r"^(\S+::\S+)\s+(\S+)\s+([-+0-9.e]+) \S+\s+([-+0-9.e]+) \S+\s+[-+0-9.]+%")


def runs_of_logs(logs: list[Path], baseline: Path) -> list[dict[tuple[str, str], float]]:
    """Each judged run's figures: its observed / shown baseline, times the centre of ``baseline``'s runs."""
    entries = json.loads(baseline.read_text())["entries"]
    out = []
    for log in logs:
        run = {}
        for line in log.read_text().splitlines():
            m = ROW.match(line)
            if not m:
                continue
            short, metric, observed, shown = m.group(1), m.group(2), float(m.group(3)), float(m.group(4))
            key = next((k for k in entries if k.rsplit("@", 1)[0].endswith(short)), None)
            if key is None or metric not in entries[key] or shown <= 0:
                continue
            values = [float(r["value"]) for r in entries[key][metric].get("runs", [])]
            centre = math.exp(sum(math.log(v) for v in values) / len(values))
            run[(key, metric)] = centre * observed / shown
        out.append(run)
    return out


def runs_of_reports(folders: list[Path], baseline: Path) -> list[dict[tuple[str, str], float]]:
    """Each judged run's figures from its JUnit reports (one folder per run, e.g. a rehearsal's
    ``reports/``): the figures ``baseline`` holds, by its keys (``<test>::<label>@<profile>``), measured on
    its hardware (an ISA-capped rerun's figures have the same keys and go to another file)."""
    from pytest_dlperf.reports.junit import read_reports

    data = json.loads(baseline.read_text())
    entries, hardware = data["entries"], data.get("hardware_key")
    by_test: dict[str, list[str]] = {}
    for key in entries:
        by_test.setdefault(key.rsplit("::", 1)[0], []).append(key)
    out = []
    for folder in folders:
        run = {}
        for test in read_reports(sorted(folder.glob("perf-*.xml")), require_metrics=False):
            for m in test.metrics:
                if hardware and m.hardware and m.hardware != hardware:
                    continue
                key = next((k for k in by_test.get(test.test, []) if k.rsplit("::", 1)[1].split("@")[0] == m.label),
                           None)
                if key is not None and m.metric in entries[key] and m.value > 0:
                    run[(key, m.metric)] = m.value
        out.append(run)
    return out


ALPHA = [0.05]
#: The noise model of the last history judged.
MODELS: dict[tuple, MachineNoise] = {}


def judge(facts: dict, history: list[dict], new: dict, injected: dict[tuple[str, str], float],
          hardware: str | None = None, tolerance: float | None = None, family: float | None = None,
          only: Callable[[tuple[str, str]], bool] | None = None) -> dict[str, Any]:
    """The plugin's verdicts on ``new`` (scaled by ``injected``) against ``history`` as recorded runs, on
    ``hardware`` at the profile's ``tolerance`` and the run's level ``family`` (else :data:`SETTINGS`, :data:`ALPHA`);
    ``only``: the figures the run judges (a run of a few tests), the others teaching the noise model alone."""
    hardware = hardware or str(SETTINGS["hardware"])
    tolerance = tolerance if tolerance is not None else float(SETTINGS["tolerance"])
    family = family if family is not None else ALPHA[0]
    keys = [k for k in new if all(k in h for h in history)]
    entries: dict[str, dict[str, Any]] = {}
    for key, name in keys:
        f = facts[(key, name)]
        entries.setdefault(key, {})[name] = {
            "value": history[-1][(key, name)], "unit": f["unit"], "direction": f["direction"],
            "software": f["software"], "runs": [{"value": h[(key, name)], "session": f"s{i}"}
                                                for i, h in enumerate(history)]}
    built = (hardware, tuple(id(h) for h in history), tuple(keys))
    if built not in MODELS:  # the same history judged again with other figures made worse
        MODELS.clear()
        MODELS[built] = MachineNoise.build(hardware, entries)
    noise = MODELS[built]
    if only is not None:
        keys = [k for k in keys if only(k)]
    judged = sum(1 for key, name in keys if noise.figures.get((key, name)) and
                 noise.figures[(key, name)].kind != EXACT)
    alpha = family_alpha(judged, "check", family)
    verdicts = []
    for key, name in keys:
        f = facts[(key, name)]
        rec = entries[key][name]
        runs = tuple(r["value"] for r in rec["runs"])
        value = new[(key, name)] * injected.get((key, name), 1.0)
        fig = noise.figures.get((key, name))
        kind = fig.kind if fig else kind_of(name, f["unit"])
        framework = str(f["software"].get("framework", ""))
        metric = Metric(name=name, samples=(value,), unit=f["unit"], direction=f["direction"], estimate=value)
        base = Baseline(value=runs[-1], unit=f["unit"], direction=f["direction"], samples=(), iqr=0.0,
                        software=f["software"], recorded="", runs=runs)
        follows = noise.follows(key, name)
        v = compare(key, "", metric, base, tolerance_for(name, tolerance), f["software"],
                    spread=noise.spread(key, name, framework, kind), alpha=alpha,
                    shared=noise.unknown_shift(framework, kind, key, name), kind=kind)
        verdicts.append(v.__class__(**{**v.__dict__, "hardware": hardware, "follows_shift": follows}))
    shifts, after = run_shift.judge_run(verdicts, lambda hw: noise, "dlperf::run", family)
    return {"check": verdicts, "after": after, "shifts": shifts}


def failed(result: dict[str, Any]) -> set[tuple[str, str]]:
    bad = {(v.test, v.metric) for v in result["after"] if v.status == REGRESSION}
    bad |= {(v.test, v.metric) for v in result["check"] if v.status == REGRESSION}
    bad |= {("shift", v.metric) for v in result["shifts"] if v.status == REGRESSION}
    return bad


def each_figure(facts: dict, runs: list[dict]) -> Counter:
    """Leave-one-out over the runs (the others as the history), each figure made worse in turn: catches
    per kind and change, split by whether the figure follows its kind's shift. For a few runs of a GPU."""
    counts: Counter = Counter()
    for t, trial in enumerate(runs):
        history = [r for i, r in enumerate(runs) if i != t]
        base = judge(facts, history, trial, {})
        counts["aa trials"] += 1
        counts["aa failed"] += bool(failed(base))
        for v in base["after"]:
            for kind, factor in (("throughput", 0.8), ("throughput", 0.9), ("memory", 1.08), ("device_memory", 1.08)):
                if v.kind == kind:
                    label = f"{kind} x{factor} {'follows its shift' if v.follows_shift else 'stays put'}"
                    counts[f"{label}: figures"] += 1
                    counts[f"{label}: caught"] += (v.test, v.metric) in failed(
                        judge(facts, history, trial, {(v.test, v.metric): factor}))
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, action="append", default=[], help="a baseline file: its runs")
    ap.add_argument("--logs", type=Path, nargs="*", default=[], help="judged runs' terminal logs")
    ap.add_argument("--baseline-of-logs", type=Path, help="the baseline file the logs were judged against")
    ap.add_argument("--reports", type=Path, nargs="*", default=[],
                    help="judged runs' JUnit report folders (one per run), read by --baseline-of-logs's keys")
    ap.add_argument("--history", type=int, default=3)
    ap.add_argument("--combinations", type=int, default=10, help="baseline choices per trial run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--alpha", type=float, default=0.05, help="the run's family-wise level (ini dlperf_alpha)")
    ap.add_argument("--tolerance", type=float, default=0.10, help="the profile's tolerance (smoke 0.10, full 0.05)")
    ap.add_argument("--hardware", default="cpu-trials", help="a hardware key: gpu-... judges at the GPU priors")
    ap.add_argument("--each", action="store_true", help="every figure made worse in turn, leave-one-out")
    args = ap.parse_args()
    ALPHA[0] = args.alpha
    SETTINGS.update(tolerance=args.tolerance, hardware=args.hardware)
    rng = random.Random(args.seed)
    facts: dict = {}
    runs: list[dict] = []
    for path in args.baseline:
        f, r = runs_of_file(path)
        facts.update(f)
        runs += r
    if args.logs:
        runs += runs_of_logs(args.logs, args.baseline_of_logs)
    if args.reports:
        runs += runs_of_reports(args.reports, args.baseline_of_logs)
    print(f"{len(runs)} runs of {len(facts)} figures")
    if args.each:
        for name, n in sorted(each_figure(facts, runs).items()):
            print(f"{name}: {n}")
        return
    counts: Counter = Counter()
    gates: dict[str, list[float]] = {}
    for t, trial in enumerate(runs):
        others = [i for i in range(len(runs)) if i != t]
        choices = list(itertools.combinations(others, args.history))
        for chosen in rng.sample(choices, min(args.combinations, len(choices))):
            history = [runs[i] for i in chosen]
            aa = judge(facts, history, trial, {})
            counts["aa trials"] += 1
            counts["aa failed"] += bool(failed(aa))
            for v in aa["after"]:
                if v.gate is not None and v.kind in ("throughput", "memory", "device_memory", "speedup"):
                    gates.setdefault(v.kind, []).append(v.gate)
            for kind, factor, label in (("throughput", 0.8, "one_throughput_-20%"),
                                        ("memory", 1.08, "one_memory_+8%")):
                candidates = [(v.test, v.metric) for v in aa["after"] if v.kind == kind]
                if not candidates:
                    continue
                target = rng.choice(candidates)
                result = judge(facts, history, trial, {target: factor})
                bad = failed(result)
                counts[f"{label} trials"] += 1
                counts[f"{label} caught"] += target in bad
                counts[f"{label} caught alone"] += bad == {target}
            every = {(v.test, v.metric): 0.7 for v in aa["after"] if v.kind == "throughput"}
            result = judge(facts, history, trial, every)
            counts["framework_throughput_-30% trials"] += 1
            counts["framework_throughput_-30% caught as a shift"] += any(
                v.status == REGRESSION and v.kind == "throughput" for v in result["shifts"])
    for name, n in sorted(counts.items()):
        print(f"{name}: {n}")
    for kind, values in sorted(gates.items()):
        values.sort()
        print(f"{kind} gates after the shift: median {values[len(values) // 2]:.1%}, "
              f"10th-90th {values[len(values) // 10]:.1%}-{values[9 * len(values) // 10]:.1%}")


if __name__ == "__main__":
    main()
