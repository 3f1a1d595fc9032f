"""How often the paired interval contains the truth, re-read from recorded verdict-power trials.

Each trial file under bench/results/ (``bench/verdict_power.py --paired``) holds, per comparison,
every pair's candidate/reference ratio and the process pair (unit) that took it. This recomputes the
interval with :func:`pytest_dlperf.judging.stats.paired_ratio` as the suite computes it now (units:
t over per-unit means) and as it did before (units ignored: Wilcoxon over pairs), and counts how
often each contains the truth: 1 for the unchanged copy (A/A), 1/1.05 and 1/1.10 for the copies
slowed by 5% and 10% of every step.

    python bench/interval_coverage.py bench/results/cpu2-kvm-verdict-power-paired*.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_dlperf.judging.stats import decide, paired_ratio  # noqa: E402

TRUTH = {"aa": 1.0, "slowed_5": 1 / 1.05, "slowed_10": 1 / 1.10}


def main(paths: list[str]) -> None:
    counts: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    outcomes: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for path in paths:
        data = json.loads(Path(path).read_text())
        design = f"{data['processes']} processes x {data.get('generations') or 1} generations"
        for trial in data["trials"]:
            for name, truth in TRUTH.items():
                if name not in trial:
                    continue
                ratios = trial[name]["ratios"]
                units = trial.get("units") or [i % data["processes"] for i in range(len(ratios))]
                for method, unit_arg in (("process pairs", units), ("pairs (before)", None)):
                    r = paired_ratio(ratios, [1.0] * len(ratios), 0.95, unit_arg)
                    c = counts[(name, design, method)]
                    c[0] += r.low <= truth <= r.high
                    c[1] += 1
                    if unit_arg is not None:
                        outcomes[(name, design)][decide(r, 0.05)] += 1
    print(f"{'comparison':<10} {'design':<30} {'interval over':<16} covered")
    for (name, design, method), (hit, total) in sorted(counts.items()):
        print(f"{name:<10} {design:<30} {method:<16} {hit}/{total} ({hit / total:.0%})")
    print(f"\n{'comparison':<10} {'design':<30} decisions at the 5% threshold (intervals over process pairs)")
    for (name, design), seen in sorted(outcomes.items()):
        print(f"{name:<10} {design:<30} " + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())))


if __name__ == "__main__":
    main(sys.argv[1:])
