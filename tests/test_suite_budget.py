"""The whole suite's error budget: ``tox -m perf`` makes several pytest runs, each judging at the
``dlperf_alpha`` pyproject.toml gives it, so together they may raise a false alarm with at most 5%."""

from __future__ import annotations

import configparser
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE_ALPHA = 0.05


def _tox() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    return parser


def _envs(label: str, tox: configparser.ConfigParser) -> list[str]:
    lines = tox["tox"]["labels"].strip().splitlines()
    labels = {key.strip(): envs for key, envs in (line.split("=", 1) for line in lines)}
    return [name.strip() for name in labels[label].split(",")]


def _section(env: str, tox: configparser.ConfigParser) -> configparser.SectionProxy | None:
    """The testenv section that defines ``env``, brace factors included (``perf-{tf,mxnet}-slow``)."""
    for name in tox.sections():
        if not name.startswith("testenv:"):
            continue
        pattern = re.sub(r"\\\{([^}]*)\\\}", lambda m: "(" + m.group(1).replace("\\,", "|").replace(",", "|") + ")",
                         re.escape(name[len("testenv:"):]))
        if re.fullmatch(pattern, env):
            return tox[name]
    return None


def pytest_runs_judging_stored_figures(label: str) -> int:
    """The pytest runs of the suite a tox label makes: its envs' ``pytest perf_tests`` commands and their
    ISA-capped reruns (A/B environments judge by their own rule, not the stored figures' budget)."""
    tox = _tox()
    runs = 0
    for env in _envs(label, tox):
        section = _section(env, tox)
        if section is None or env.startswith("ab-"):
            continue
        commands = section.get("commands", "")
        runs += len(re.findall(r"^\s*(?:pytest perf_tests|\{\[isa_capped\]run\})", commands, re.M))
    return runs


def test_the_suite_raises_a_false_alarm_with_at_most_five_percent() -> None:
    alpha = float(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["dlperf_alpha"])
    runs = pytest_runs_judging_stored_figures("perf")
    assert runs >= 9, f"found {runs} pytest runs of the suite in tox -m perf: the count misreads tox.ini"
    assert runs * alpha <= SUITE_ALPHA, (f"{runs} runs at dlperf_alpha {alpha} may raise a false alarm with "
                                         f"{runs * alpha:.1%}: give each at most {SUITE_ALPHA / runs:.4f}")


# The suite's time: every performance test within a budget (its JUnit time, children included) on a 2-core
# AVX-512 machine, the type the budgets are set for; a machine type that runs the suite slower has its
# recorded times held to budgets as much longer. A recorded run is tests/data/suite-times.json, refreshed with
# ``python .ci/suite_times.py reports/perf-*.xml`` after a run of the suite (tox -m ci: the quick tier).
BUDGET_S = {"quick": 60.0, "slow": 150.0}
#: The ISA level at the end of a hardware key -> how much longer than the AVX-512 type that type runs the suite.
SLOWER = {"avx2": 2.0, "avx512": 1.0, "avx512bf16": 1.0, "amx": 1.0}
#: Tests over their budget, not yet resized, and why; an entry that fits its budget again must go.
OVER_BUDGET: dict[str, str] = {}
TIMES = ROOT / "tests" / "data" / "suite-times.json"
REFRESH = "run the suite (tox -m ci, or tox -m perf for both tiers), then python .ci/suite_times.py reports/perf-*.xml"


def collected(marker: str) -> set[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "perf_tests", "-m", marker,
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    tests = {line for line in done.stdout.splitlines() if line.startswith("perf_tests/") and "::" in line}
    assert tests, f"collecting perf_tests -m {marker!r} found nothing:\n{done.stdout}\n{done.stderr}"
    return tests


@pytest.fixture(scope="module")
def tiers() -> dict[str, str]:
    return {**{t: "quick" for t in collected("not slow")}, **{t: "slow" for t in collected("slow")}}


@pytest.fixture(scope="module")
def recorded() -> dict[str, dict]:
    return json.loads(TIMES.read_text(encoding="utf-8"))["tests"]


def budget(tier: str, machine: str) -> float:
    level = machine.rsplit("-", 1)[-1]
    assert level in SLOWER, f"{machine}: no budget scale for ISA level {level!r}; known: {sorted(SLOWER)}"
    return BUDGET_S[tier] * SLOWER[level]


def test_every_performance_test_has_a_recorded_time(tiers, recorded):
    unrecorded = sorted(t for t in tiers if t not in recorded)
    assert not unrecorded, f"{len(unrecorded)} tests have no recorded time: {REFRESH}\n" + "\n".join(unrecorded)


def test_every_performance_test_fits_its_tiers_budget(tiers, recorded):
    over = {t: f"{e['seconds']:.0f} s on {e['machine']} ({e['date']}), budget {budget(tiers[t], e['machine']):.0f} s "
               f"({tiers[t]} tier)"
            for t, e in recorded.items() if t in tiers and e["seconds"] > budget(tiers[t], e["machine"])}
    new = {t: why for t, why in over.items() if t not in OVER_BUDGET}
    assert not new, "over their budget (resize them: fewer rounds, a smaller model, a shorter cap):\n" + "\n".join(
        f"{t}: {why}" for t, why in new.items())
    gone = sorted(t for t in OVER_BUDGET if t not in tiers)
    assert not gone, "OVER_BUDGET names tests no longer collected: " + ", ".join(gone)
    fitted = sorted(t for t in OVER_BUDGET if t in recorded and t not in over)
    assert not fitted, "within their budget now, so no longer OVER_BUDGET: " + ", ".join(fitted)


def test_recorded_times_are_of_tests_that_still_exist(tiers, recorded):
    gone = sorted(t for t in recorded if t not in tiers)
    assert not gone, f"recorded times of tests no longer collected ({REFRESH}, or delete them):\n" + "\n".join(gone)
