"""The tails of CPU figures the moderated t does not follow, and what heavier tails cost.  (Not a pytest test.)

    PYTHONPATH=src python bench/memory_tail.py > memory-tail-<date>.txt

With peak memory judged on its moderated degrees of freedom, the calibration (``bench/calibration.py``)
put 2.3% of the AVX-512 EPYC type's held-out peak memories beyond the model's two-sided 99% gate, every
one above its baseline. This script tables, on the same committed runs, per CPU data set:

- ``tail``: held-out values of each kind whose one-sided p for the worse is under 0.01, 0.001 and
  0.0001 (a calibrated model: 1%, 0.1% and 0.01% of them), with the largest such changes;
- ``caps``: a CPU peak memory judged on its moderated degrees of freedom (the model until 2026-11-29), and
  on at most 6, 5 (``noise.TAIL_DF``, the model since) and 4: the calibration cell per type, the memory
  gates (``gates`` of bench/calibration.py: median per baseline file), a memory 8% larger caught in a
  run of its framework (``memory``), the torch precision test's 9% alone, and the runs of one test that
  fail (``single``);
- ``throughput``: the same cells and the throughput gates with a CPU throughput's t on its moderated df
  (the model) and on at most 8, 7, 6 and 5.

The ``tail`` section is of the model without the memory rule.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibration  # noqa: E402
from pytest_dlperf.judging import noise  # noqa: E402

LEVELS = (0.01, 0.001, 0.0001)
CAPS = (None, 6.0, 5.0, 4.0)
THROUGHPUT_CAPS = (None, 8.0, 7.0, 6.0, 5.0)
CPU = noise.TAIL_DF["cpu"]
STATED = dict(CPU)


def hold(kind: str, cap: float | None) -> None:
    """A CPU figure of ``kind`` judged on at most ``cap`` degrees of freedom (None: its moderated df)."""
    CPU.pop(kind, None)
    if cap is not None:
        CPU[kind] = cap


def judged_on(cap: float | None) -> str:
    return "its moderated degrees of freedom" if cap is None else f"at most {cap:g} df"


def cells(sets: list[calibration.DataSet], kind: str) -> Iterator[str]:
    """The calibration cell of ``kind`` per CPU type, and its gates' median per baseline file."""
    for (cpu, found, _, stage), tally in sorted(calibration.calibrate(sets, lambda data, v: "").items()):
        if found == kind and stage == "after" and cpu.startswith("cpu"):
            yield f"calibration {cpu:<40} {tally.row()}"
    for (hardware, found, stage), gates in sorted(calibration.gates(sets).items()):
        if found == kind and stage == "after":
            median = calibration.percent(sorted(gates)[len(gates) // 2])
            yield f"gate        {hardware:<52} {len(gates):>3} figures, median {median}"


def tail(sets: list[calibration.DataSet]) -> list[str]:
    lines = []
    for data in sets:
        if not data.hardware.startswith("cpu"):
            continue
        counts: Counter = Counter()
        worst: dict[str, list[float]] = {}
        for held, chosen in data.histories():
            result = data.held_out(held, chosen)
            for v in calibration.held_out(result["after"]):
                counts[(v.kind, "n")] += 1
                for level in LEVELS:
                    counts[(v.kind, level)] += v.p_value < level
                if v.p_value < LEVELS[0]:
                    worst.setdefault(v.kind, []).append(v.observed / v.baseline - 1)
        for kind in ("throughput", "speedup", "memory"):
            n = counts[(kind, "n")]
            if n:
                shown = ", ".join(f"{c:+.1%}" for c in sorted(worst.get(kind, []), key=abs, reverse=True)[:6])
                lines.append(f"{data.hardware:<52} {kind:<11} {n:>5} "
                             + " ".join(f"{counts[(kind, level)]:>4} ({counts[(kind, level)] / n:>5.2%})"
                                        for level in LEVELS)
                             + (f"   largest: {shown}" if shown else ""))
    return lines


def main() -> None:
    sets = calibration.data_sets()
    hold("memory", None)
    hold("throughput", None)
    print("== tail: held-out values (each run against the recorded runs other than it, after the run's shift) "
          "whose one-sided p for the worse is under 0.01 / 0.001 / 0.0001")
    for line in tail(sets):
        print(line)
    for cap in CAPS:
        hold("memory", cap)
        print(f"\n== caps: peak memory judged on {judged_on(cap)}")
        for line in cells(sets, "memory"):
            print(line)
        for line in calibration.memory(sets, 1.08):
            print(f"8% larger   {line}")
        for v in calibration.one_test(sets[0], calibration.PRECISION_TEST, 1.09):
            print(f"one test, 9% larger, on {sets[0].hardware}: {v.status}; catches "
                  f"{calibration.percent(v.gate or math.inf)} 19 times in 20")
        for line in calibration.single_tests(sets):
            print(f"single      {line}")
    hold("memory", STATED["memory"])
    for cap in THROUGHPUT_CAPS:
        hold("throughput", cap)
        print(f"\n== throughput: a CPU throughput judged on {judged_on(cap)}")
        print("\n".join(cells(sets, "throughput")))
    hold("throughput", STATED.get("throughput"))


if __name__ == "__main__":
    main()
