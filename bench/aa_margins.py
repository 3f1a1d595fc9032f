"""Per A/A run of bench/aa_suite.sh: verdict counts, failed tests, the median and largest change of a
figure against its recorded runs, and the three figures closest to their gates (|log change| /
log(1 + gate): 1.0 is where a figure would be called a regression or an improvement)."""

from __future__ import annotations

import collections
import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def margins(report: Path) -> str:
    root = ET.parse(report).getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    verdicts = collections.Counter(v for n, v in props.items() if n.endswith(".verdict"))
    failed = [c.get("name") for c in root.iter("testcase")
              if c.find("failure") is not None or c.find("error") is not None]
    changes, closest = [], []
    for name, gate in props.items():
        if not name.endswith(".detectable"):
            continue
        stem = name[: -len(".detectable")]
        try:
            value, base = float(props[stem]), float(props[stem + ".baseline"])
        except (KeyError, TypeError, ValueError):
            continue
        if value <= 0 or base <= 0:
            continue
        change = math.log(value / base)
        changes.append(abs(math.expm1(change)))
        if gate != "unknown":
            closest.append((abs(change) / math.log1p(float(gate)), stem.split("::")[-1][len("dlperf."):],
                            math.expm1(change), float(gate)))
    changes.sort()
    closest.sort(reverse=True)
    lines = [f"{report.name} {dict(verdicts)} failed {failed} median |change| "
             f"{changes[len(changes) // 2]:.1%}, largest {changes[-1]:.1%}"]
    lines += [f"   {share:.2f} of its gate: {figure} {change:+.1%} (gate {gate:.1%})"
              for share, figure, change, gate in closest[:3]]
    return "\n".join(lines)


if __name__ == "__main__":
    for path in sorted(Path(sys.argv[1]).glob("aa-*.xml")):
        print(margins(path))
