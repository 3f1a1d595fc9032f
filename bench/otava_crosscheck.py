"""Cross-check of dlperf's change-point detector against Apache Otava's (issue #32).

The same series go to three detectors; each series' change points are printed side by side, then
a summary of detections (series with a known step) and false alarms (series without one):

- ``dlperf``: ``pytest_dlperf.reports.changepoints.change_points`` with its defaults (E-divisive,
  permutation test with 999 shuffles, p <= 0.001, at least 4 runs each side of a change);
- ``otava``: Otava's default analysis (``Series.analyze(AnalysisOptions())``, what ``otava analyze``
  runs): E-divisive candidates in windows of 50, each kept by a Student t test at p <= 0.01, then
  merged until every change has p <= 0.001 (Fleming et al. 2023, "Hunter");
- ``otava-perm``: Otava's own E-divisive with its permutation tester at dlperf's settings (999
  shuffles, p <= 0.001, seed 0): the algorithm both implement, with matched parameters.

A detection is a change point within +-1 run of the true step; a false alarm is any change point
in a series without one. Real series: every figure of baselines/*.json with at least 5 runs (read
as ``dlperf history`` reads them), and histories built from the lab data (git history's
bench/results/, read by ``lab.py``): the 25 stored-runs cycles of the former bench/verdict_power.py
(A/A, and A/A spliced with the runs slowed by 5% and 10%), and the ten H100 trials (5 rounds of the
baseline, then 5 of the A/A copy or of the 10%-slowed copy).

    tox -e otava        # runs: python bench/otava_crosscheck.py bench/results/otava-crosscheck.txt

The optional argument is a file that gets a copy of what is printed.
"""

from __future__ import annotations

import glob
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from otava.change_point_divisive.calculator import PairDistanceCalculator
from otava.change_point_divisive.detector import ChangePointDetector
from otava.change_point_divisive.significance_test import PermutationsSignificanceTester
from otava.series import AnalysisOptions, Metric, Series

from pytest_dlperf.reports.changepoints import MAX_PVALUE, PERMUTATIONS, change_points, q_grid
from pytest_dlperf.reports.history import read_series

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SEED = 32
NOISES = (0.01, 0.03, 0.05)
LENGTHS = (10, 20, 40)
STEPS = (0.0, 0.05, 0.10, 0.20)
REPEATS = 8  # per (noise, length, step): 3 * 3 * 4 * 8 = 288 series


def run_dlperf(x: np.ndarray) -> list[tuple[int, float, float | None]]:
    return [(i, p, None) for i, p in change_points(x)]


def run_otava(x: np.ndarray) -> list[tuple[int, float, float | None]]:
    series = Series("s", None, time=list(range(len(x))), metrics={"m": Metric()},
                    data={"m": [float(v) for v in x]}, attributes={})
    found = series.analyze(AnalysisOptions()).change_points["m"]  # one list per metric
    return [(int(c.index), float(c.pvalue()), c.forward_change_percent()) for c in found]


def run_otava_perm(x: np.ndarray) -> list[tuple[int, float, float | None]]:
    tester = PermutationsSignificanceTester(max_pvalue=MAX_PVALUE, permutations=PERMUTATIONS,
                                            calculator=PairDistanceCalculator, seed=0)
    found = ChangePointDetector(tester, PairDistanceCalculator).get_change_points(np.asarray(x, float))
    return [(int(c.index), float(c.stats.pvalue), None) for c in found]


DETECTORS = {"dlperf": run_dlperf, "otava": run_otava, "otava-perm": run_otava_perm}


def synthetic() -> list[dict]:
    """Log-normal noise around 100; a step multiplies the level by 1 +- step (sign at random) from
    a run drawn uniformly with at least 4 runs on each side (dlperf's minimum level)."""
    rng = np.random.default_rng(SEED)
    out = []
    for noise in NOISES:
        for n in LENGTHS:
            for step in STEPS:
                for r in range(REPEATS):
                    level = np.full(n, 100.0)
                    at = None
                    if step:
                        at = int(rng.integers(4, n - 3))
                        level[at:] *= 1 + step * rng.choice((-1, 1))
                    x = level * np.exp(rng.normal(0.0, noise, n))
                    out.append({"name": f"syn sd{noise:.0%} n{n} step{step:.0%} #{r}", "x": x, "step_at": at,
                                "group": ("synthetic", f"{noise:.0%}", f"{step:.0%}" if step else "none", n)})
    return out


def real() -> list[dict]:
    out = []
    for s in read_series(sorted(glob.glob(str(ROOT / "baselines" / "*.json")))):
        if len(s.points) >= 5:
            _, nodeid, _, metric = s.key
            test = Path(nodeid.split("::")[0]).stem + (nodeid[nodeid.find("["):] if "[" in nodeid else "")
            out.append({"name": f"{test} {metric}", "x": np.array([p.value for p in s.points]), "step_at": None,
                        "group": ("baselines", f"{len(s.points)} runs", "none", len(s.points))})
    stored = json.loads((lab.results_dir() / "cpu2-intel-verdict-power-stored-runs.json").read_text())
    aa = [c["aa"]["throughput"] for c in stored["cycles"]]
    out.append({"name": "stored-runs aa throughput", "x": np.array(aa), "step_at": None,
                "group": ("cpu2 stored runs", "25 cycles", "none", len(aa))})
    for slowed, pct in (("slowed_5", "5%"), ("slowed_10", "10%")):
        x = aa[:13] + [c[slowed]["throughput"] for c in stored["cycles"][13:]]
        out.append({"name": f"stored-runs aa 1-13, {slowed} 14-25", "x": np.array(x), "step_at": 13,
                    "group": ("cpu2 stored runs", "25 cycles", pct, len(x))})
    h100 = json.loads((lab.results_dir() / "h100-verdict-power.json").read_text())
    for t, trial in enumerate(h100["trials"]):
        for other, pct in (("same", "none"), ("slowed", "10%")):
            x = trial["baseline"]["throughput"] + trial[other]["throughput"]
            out.append({"name": f"h100 trial {t}: baseline x5, {other} x5", "x": np.array(x),
                        "step_at": None if pct == "none" else 5, "group": ("h100 trials", "10 rounds", pct, len(x))})
    return out


def q_difference(cases: list[dict]) -> float:
    """The largest difference between dlperf's Q (q_grid) and Otava's (its calculator's Q matrix,
    ``Q[t - 1, k - 2]`` for the sides [0, t) and [t, k)) over every split with sides of 2 runs or more."""
    worst = 0.0
    for case in cases:
        x = np.asarray(case["x"], float)
        ours, theirs = q_grid(x[None], 2)[0], PairDistanceCalculator(x)._get_Q_vals(0, len(x))
        t, k = np.nonzero(np.isfinite(ours))
        worst = max(worst, float(np.max(np.abs(ours[t, k] - theirs[t - 1, k - 2]) / np.abs(x).mean())))
    return worst


def show(found: list[tuple[int, float, float | None]]) -> str:
    parts = [f"{i}(p={p:.2g}" + (f", {m:+.1f}%)" if m is not None else ")") for i, p, m in found]
    return " ".join(parts) or "-"


def hit(case: dict, found: list[tuple[int, float, float | None]]) -> bool:
    if case["step_at"] is None:
        return bool(found)  # a false alarm
    return any(abs(i - case["step_at"]) <= 1 for i, _, _ in found)


def main() -> None:
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    cases = synthetic() + real()
    names = list(DETECTORS)
    say(f"dlperf: p <= {MAX_PVALUE}, {PERMUTATIONS} shuffles, >= 4 runs each side; otava: defaults "
        f"(window {AnalysisOptions().window_len}, p <= {AnalysisOptions().max_pvalue}, t test); "
        f"otava-perm: Otava's permutation tester, p <= {MAX_PVALUE}, {PERMUTATIONS} shuffles, seed 0")
    say(f"energy statistic Q, dlperf against Otava, every split of every series: largest difference "
        f"{q_difference(cases):.1e} (relative to the series' mean)")
    say("change points as index(p, change): index = first run on the new level, 0-based")
    say()
    say(f"{'series':64} {'n':>3} {'step':>4}  " + "  |  ".join(names))
    tally: dict[tuple, list[int]] = defaultdict(lambda: [0] * (len(names) + 1))
    for case in cases:
        results = [DETECTORS[d](case["x"]) for d in names]
        at = "-" if case["step_at"] is None else str(case["step_at"])
        say(f"{case['name'][:64]:64} {len(case['x']):>3} {at:>4}  " + "  |  ".join(show(r) for r in results))
        source, noise, step, n = case["group"]
        for key in [(source, noise, step)] + ([(source, f"n={n}", step)] if source == "synthetic" else []):
            row = tally[key]
            row[0] += 1
            for k, r in enumerate(results):
                row[k + 1] += hit(case, r)
    say()
    say("Summary: step rows count detections (a change point within +-1 run of the step); "
        "'none' rows count series with any change point (false alarms)")
    say(f"{'source':18} {'noise/length':13} {'step':>5} {'series':>6}  " + "  ".join(f"{d:>12}" for d in names))
    order = sorted(tally.items(), key=lambda kv: (kv[0][0] != "synthetic", kv[0][1].startswith("n=")))
    for (source, noise, step), row in order:
        cells = "  ".join(f"{c:>4} ({c / row[0]:4.0%})" for c in row[1:])
        say(f"{source:18} {noise:13} {step:>5} {row[0]:>6}  {cells}")
    if len(sys.argv) > 1:
        Path(sys.argv[1]).parent.mkdir(parents=True, exist_ok=True)
        Path(sys.argv[1]).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
