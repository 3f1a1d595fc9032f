"""How often A/B mode's verdict fails a no-change comparison, and catches a slower one, by the spread of
its process pairs and the interval's confidence: the plugin's rule (:func:`decide`, :func:`decided_at`)
applied to simulated process pairs, with its sequential looks (two generations, then one more at a time
while inconclusive; two process pairs a generation).

    python bench/ab_looks.py [--trials 40000] [--threshold 0.05] [--spreads 0.03,0.066,0.10]
                             [--confidences 0.95,0.99]

Its output is quoted in docs/verdicts.md ("Paired decisions")."""

from __future__ import annotations

import argparse
import math

import numpy as np

from pytest_dlperf.judging.stats import AB_CONFIDENCE, PairedRatio, decide, t_quantile

THRESHOLD = 0.05
PAIRS_PER_GENERATION = 2


def verdict_rates(spread: float, ratio: float, confidence: float, max_generations: int, trials: int,
                  rng: np.random.Generator, threshold: float = THRESHOLD) -> dict[str, float]:
    """The share of ``trials`` comparisons ending in each verdict."""
    units = rng.normal(math.log(ratio), spread, (trials, max_generations * PAIRS_PER_GENERATION))
    counts: dict[str, int] = {}
    for row in units:
        for g in range(2, max_generations + 1):
            n = g * PAIRS_PER_GENERATION
            mean, sd = float(row[:n].mean()), float(row[:n].std(ddof=1))
            half = t_quantile(1 - (1 - confidence) / 2, n - 1) * sd / math.sqrt(n)
            verdict = decide(PairedRatio((), math.exp(mean), math.exp(mean - half), math.exp(mean + half),
                                         confidence, n), threshold)
            if verdict != "inconclusive":
                break
        counts[verdict] = counts.get(verdict, 0) + 1
    return {k: v / trials for k, v in sorted(counts.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40000)
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help="the A/B threshold decided at")
    parser.add_argument("--spreads", default="0.03,0.066,0.10", help="process pairs' spreads (sd of log ratio)")
    parser.add_argument("--confidences", default="0.95,0.99")
    args = parser.parse_args()
    rng = np.random.default_rng(20261128)
    print(f"threshold {args.threshold:.0%}, {args.trials} simulated comparisons per row; plugin's A/B confidence "
          f"{AB_CONFIDENCE:.0%}")
    print("spread  true ratio  confidence  max generations  regression  improvement  ok  inconclusive")
    for spread in (float(s) for s in args.spreads.split(",")):
        for ratio in (1.0, 0.945, 0.90):
            for confidence in (float(c) for c in args.confidences.split(",")):
                for most in (3, 6):
                    r = verdict_rates(spread, ratio, confidence, most, args.trials, rng, args.threshold)
                    print(f"{spread:6.3f}  {ratio:10.3f}  {confidence:10.2f}  {most:15d}  "
                          + "  ".join(f"{r.get(k, 0.0):.4f}" for k in ("regression", "improvement", "ok",
                                                                       "inconclusive")), flush=True)


if __name__ == "__main__":
    main()
