"""Issue 59's gate table: the changed tests' figures, each gate before and after.  (Not a pytest test.)

A figure's gate (the change for the worse it catches 19 times in 20 in one new run) rests on its recorded
runs' spread. Before: a committed baseline file's three recordings, as ``calibration.py --sections gates``
reads them (a run of each framework's figures at the suite's level, after the run's shift). After: the same
file with the changed tests' entries replaced by three recordings of the new settings (``--after``, a
baseline file written by ``pytest --update-baselines --baseline-dir``), so each figure is judged among as
many figures as before. A figure the new settings no longer make, or one new, reads "-" on that side.

    python bench/gate_table.py --before BEFORE.json --after AFTER.json --tests TEST_PREFIX ...
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibration  # noqa: E402


def gates_of(path: Path, hardware: str, changed: tuple[str, ...]) -> dict[tuple[str, str], float]:
    """Each changed test's figure -> its gate (inf: beyond a halving) in the file at ``path``."""
    data = calibration.of_file(hardware, "baseline file", path)
    recorded, centre = calibration.centres(data)
    out: dict[tuple[str, str], float] = {}
    for framework in sorted({data.framework(k) for k in centre}):
        result = data.judge(recorded, centre, only=calibration.of_framework(data, framework))
        for v in result["after"]:
            # suite_trials judges each baseline entry as a test of its own: the entry's key is the verdict's test
            if v.test.startswith(changed) and v.kind in calibration.KINDS and v.metric != "compile_time_total":
                out[(v.test, v.metric)] = math.inf if v.gate is None else v.gate
    return out


def replaced(before: Path, after: Path, changed: tuple[str, ...], folder: Path) -> Path:
    """``before`` with the changed tests' entries taken from ``after`` instead."""
    data = json.loads(before.read_text())
    data["entries"] = {k: v for k, v in data["entries"].items() if not k.startswith(changed)}
    data["entries"].update({k: v for k, v in json.loads(after.read_text())["entries"].items()
                            if k.startswith(changed)})
    out = folder / "after.json"
    out.write_text(json.dumps(data))
    return out


def cell(gate: float | None) -> str:
    return "-" if gate is None else "beyond a halving" if math.isinf(gate) else f"{gate:.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="a committed baseline file (before the change)")
    ap.add_argument("--after", type=Path, required=True, help="a baseline file of three recordings after it")
    ap.add_argument("--tests", nargs="+", required=True, help="node id prefixes of the tests whose settings changed")
    args = ap.parse_args()
    changed = tuple(args.tests)
    hardware = json.loads(args.before.read_text())["hardware_key"]
    with tempfile.TemporaryDirectory() as folder:
        old = gates_of(args.before, hardware, changed)
        new = gates_of(replaced(args.before, args.after, changed, Path(folder)), hardware, changed)
    print(f"gates against {args.before.name} (before) and with {args.after.name}'s recordings (after)\n")
    print("| figure | metric | before | after | lost (points) |")
    print("|---|---|---|---|---|")
    for key, metric in sorted(set(old) | set(new)):
        a, b = old.get((key, metric)), new.get((key, metric))
        lost = f"{(b - a) * 100:+.1f}" if a is not None and b is not None and not math.isinf(a + b) else ""
        print(f"| `{key.split('::', 1)[1]}` | {metric} | {cell(a)} | {cell(b)} | {lost} |")


if __name__ == "__main__":
    main()
