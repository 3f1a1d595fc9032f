"""Each performance test's time in a run of the suite, for the budgets tests/test_suite_budget.py holds them to.

    python .ci/suite_times.py reports/perf-*.xml            # merges into tests/data/suite-times.json

A test's time is its JUnit testcase time (the whole test with its children) in the report where it ran, not
where it was skipped (a test skipped in every report is recorded as skipped); the ISA-capped reruns' reports
are left out (a rerun is another run of tests already timed). Tests the given reports did not run keep their
recorded entries, so the quick tier's reports of a ``tox -m ci`` refresh those tests alone. Each entry names
the machine (the report's hardware key, or ``--machine``) and the date: the budgets scale with the machine type.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Sequence

from pytest_dlperf.child.environment import hardware_key

TIMES = Path(__file__).resolve().parents[1] / "tests" / "data" / "suite-times.json"


def nodeid(case: ET.Element) -> str:
    return case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")


def read(report: Path, machine: str = "") -> dict[str, dict[str, Any]]:
    """The tests in ``report``, each with its time, machine (the report's hardware key, else ``machine``) and
    date, and whether it was skipped."""
    root = ET.parse(report).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    date = (suite.get("timestamp", "") if suite is not None else "")[:10]
    machine = next((p.get("value", "") for p in root.iter("property")
                    if p.get("name", "").endswith("::dlperf.hardware") and p.get("value", "").startswith("cpu-")),
                   machine)
    found = {}
    for case in root.iter("testcase"):
        found[nodeid(case)] = {"seconds": round(float(case.get("time", 0)), 1), "machine": machine, "date": date,
                               **({"skipped": True} if case.find("skipped") is not None else {})}
    return found


def merge(reports: Sequence[Path], recorded: dict[str, Any], machine: str = "") -> dict[str, Any]:
    tests = dict(recorded.get("tests", {}))
    for report in reports:
        if "isa-capped" in report.name:
            continue
        for test, entry in read(report, machine).items():
            if not entry["machine"]:
                raise SystemExit(f"{report}: no figure in it names the machine (a CPU hardware key); give the "
                                 "machine it ran on with --machine KEY, e.g. this one's: "
                                 + hardware_key("cpu"))
            # a test runs in one framework's environment and is skipped in the others'
            if not entry.get("skipped") or test not in tests or tests[test].get("skipped"):
                tests[test] = entry
    return {"tests": dict(sorted(tests.items()))}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="suite_times.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="JUnit files of the suite's pytest runs")
    parser.add_argument("--out", type=Path, default=TIMES, help=f"the times file (default {TIMES})")
    parser.add_argument("--machine", default="", help="the hardware key of the machine the reports ran on, for "
                        "reports that hold no figure naming it (e.g. a run of the engine tests alone)")
    args = parser.parse_args(argv)
    missing = [str(r) for r in args.reports if not r.is_file()]
    if missing:
        parser.error(f"no such report: {', '.join(missing)}")
    recorded = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    merged = merge(args.reports, recorded, args.machine)
    fd, tmp = tempfile.mkstemp(dir=args.out.parent, prefix=args.out.name + ".")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(merged, out, indent=1)
        out.write("\n")
    os.replace(tmp, args.out)
    print(f"{args.out}: {len(merged['tests'])} tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
