"""The whole suite's error budget: ``tox -m perf`` makes several pytest runs, each judging at the
``dlperf_alpha`` pyproject.toml gives it, so together they may raise a false alarm with at most 5%."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

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
    assert runs >= 10, f"found {runs} pytest runs of the suite in tox -m perf: the count misreads tox.ini"
    assert runs * alpha <= SUITE_ALPHA, (f"{runs} runs at dlperf_alpha {alpha} may raise a false alarm with "
                                         f"{runs * alpha:.1%}: give each at most {SUITE_ALPHA / runs:.4f}")
