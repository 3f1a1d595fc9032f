"""Does alternating two versions of a step inside one process remove each process's own offset? (#33)

    python bench/inprocess_alternation.py [--trials 20] [--rounds 10] [--steps 10] [--slowdown 0]
                                          [--threads 1] [--out FILE]

Both designs time the example project's step (examples/own_step/tiny_lm.py), the candidate the same
code as the reference (A/A) unless ``--slowdown`` makes its step that fraction longer:

- **one process**: the step module loaded twice under distinct names (as a revision and its base would
  be), each side warmed up, then ``--rounds`` rounds of ``--steps`` steps per side, alternating in ABBA
  order; the trial's estimate is the mean log ratio candidate/reference of its rounds;
- **two processes**: one process per side, run one after the other (which goes first alternates from
  trial to trial), each timing ``--rounds`` rounds of its own side after the same warm-up; the trial's
  estimate is the log ratio of the two mean round times. This is one process pair of the plugin's
  interleaved A/B, without its pacing.

The designs alternate trial by trial, so the machine's drift falls on both alike. Prints each trial and,
per design, the mean estimate and its spread (sd) over trials: the two-process spread holds each
process's own offset; the one-process spread is what is left when alternation removes it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

STEP_FILE = Path(__file__).resolve().parents[1] / "examples" / "own_step" / "tiny_lm.py"
WARMUP = 3


def _step(name: str, slowdown: float):
    """A fresh copy of the step module under ``name`` and its step, built with ``slowdown``."""
    spec = importlib.util.spec_from_file_location(name, STEP_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.environ["TINY_LM_SLOWDOWN"] = str(slowdown)
    try:
        return module.make_step(SimpleNamespace(seed=0, device="cpu", batch_size=16))
    finally:
        del os.environ["TINY_LM_SLOWDOWN"]


def _round(step, steps: int) -> float:
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - started


def child(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    if args.child == "both":
        sides = {"ref": _step("reference_tiny_lm", 0.0), "cand": _step("candidate_tiny_lm", args.slowdown)}
    else:
        sides = {args.child: _step(f"{args.child}_tiny_lm", args.slowdown if args.child == "cand" else 0.0)}
    for step in sides.values():
        for _ in range(WARMUP):
            step()
    times: dict[str, list[float]] = {side: [] for side in sides}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for side in order:
            times[side].append(_round(sides[side], args.steps))
    print(json.dumps(times))


def _spawn(args: argparse.Namespace, mode: str) -> dict[str, list[float]]:
    out = subprocess.run([sys.executable, __file__, "--child", mode, "--rounds", str(args.rounds),
                          "--steps", str(args.steps), "--slowdown", str(args.slowdown),
                          "--threads", str(args.threads)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--slowdown", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", choices=("both", "ref", "cand"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    lines = [f"# one process alternating both sides vs a process per side: tiny_lm step, {args.trials} trials "
             f"each, {args.rounds} rounds x {args.steps} steps per side, slowdown {args.slowdown:g}, "
             f"{args.threads} thread(s), python {sys.version.split()[0]}"]
    one, two = [], []
    for t in range(args.trials):
        both = _spawn(args, "both")
        one.append(statistics.fmean(math.log(c / r) for c, r in zip(both["cand"], both["ref"])))
        first, second = ("ref", "cand") if t % 2 == 0 else ("cand", "ref")
        runs = {first: _spawn(args, first)[first], second: _spawn(args, second)[second]}
        two.append(math.log(statistics.fmean(runs["cand"]) / statistics.fmean(runs["ref"])))
        lines.append(f"trial {t:2d}  one process {math.expm1(one[-1]):+.2%}  two processes ({first} first) "
                     f"{math.expm1(two[-1]):+.2%}")
        print(lines[-1], flush=True)
    for name, values in (("one process", one), ("two processes", two)):
        lines.append(f"{name}: mean {math.expm1(statistics.fmean(values)):+.2%}, "
                     f"sd of the trial estimate {statistics.stdev(values):.2%} (log), "
                     f"range {math.expm1(min(values)):+.2%} .. {math.expm1(max(values)):+.2%}")
    text = "\n".join(lines)
    print("\n".join(lines[-2:]))
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
