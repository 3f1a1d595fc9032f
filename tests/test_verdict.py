"""Verdicts and gates, without pytest-in-pytest: the numbers a CI failure rests on."""

from __future__ import annotations

import math
import random

import pytest

from pytest_dlperf.judging.baselines import Baseline
from pytest_dlperf.judging.gates import (FAMILY_ALPHA, Pool, family_alpha, floor_for, log_spread, pools, resolve,
                                         t_quantile)
from pytest_dlperf.judging.verdict import IMPROVEMENT, INCONCLUSIVE, MISSING, OK, REGRESSION, compare, failure_message
from pytest_dlperf.result import HIGHER, LOWER, metric_from

#: Five recorded runs that vary about 1% run to run.
STEADY = (99.0, 100.5, 100.0, 101.0, 99.5)


def baseline(runs, direction=HIGHER, software=None) -> Baseline:
    return Baseline(value=runs[-1], unit="u", direction=direction, samples=(runs[-1],), iqr=0.0,
                    software=software or {}, recorded="2026-01-01T00:00:00Z", runs=tuple(runs))


def verdict(now, runs=STEADY, direction=HIGHER, tolerance=0.10, **kwargs):
    unit = "samples/s" if direction == HIGHER else "s"
    name = "throughput" if direction == HIGHER else "step_time"
    return compare("t.py::test", "fp32", metric_from(name, [now], unit, direction), baseline(runs, direction),
                   tolerance, **kwargs)


# ------------------------------------------------------------------ direction and the floor


@pytest.mark.parametrize("direction, factor, status", [
    (HIGHER, 0.70, REGRESSION),   # throughput fell 30%
    (HIGHER, 1.30, IMPROVEMENT),  # throughput rose 30%
    (LOWER, 1.30, REGRESSION),    # step time rose 30%
    (LOWER, 0.70, IMPROVEMENT),   # step time fell 30%
    (HIGHER, 0.95, OK),           # within the 10% tolerance either way
    (LOWER, 1.05, OK),
])
def test_direction_decides_which_way_is_worse(direction, factor, status) -> None:
    v = verdict(100.0 * factor, direction=direction)
    assert v.status == status
    assert v.delta == pytest.approx(100.0 * factor / v.baseline - 1.0)


def test_a_quiet_figure_is_gated_at_its_tolerance() -> None:
    """Runs 1% apart: the noise bound is under the 10% floor, so the tolerance is the gate."""
    assert verdict(89.0).status == REGRESSION
    assert verdict(91.0).status == OK
    assert verdict(89.0).gate == pytest.approx(0.10)


# ------------------------------------------------------------------ each figure's own noise


def test_a_figure_that_drifts_gets_a_wide_gate_and_a_quiet_one_a_tight_gate() -> None:
    drifting = (80.0, 100.0, 120.0, 90.0, 110.0)  # about 15% run to run
    v = verdict(75.0, drifting)
    assert v.gate > 0.5
    assert v.status == INCONCLUSIVE  # beyond the tolerance, not beyond its noise: shown, never failing
    assert verdict(75.0).status == REGRESSION  # the same value against the quiet history


def test_the_gate_is_the_prediction_bound_of_the_recorded_runs() -> None:
    runs = (100.0, 104.0, 97.0, 102.0, 99.0, 101.0)
    s, df = log_spread(runs)
    alpha = 0.01
    expected = math.expm1(t_quantile(1 - alpha / 2, df) * s * math.sqrt(1 + 1 / len(runs)))
    v = verdict(100.0, runs, tolerance=0.01, alpha=alpha)
    assert v.gate == pytest.approx(expected)
    assert v.noise == pytest.approx(s)
    assert v.runs == 6


def test_one_recorded_run_and_nothing_to_pool_means_the_noise_is_unknown() -> None:
    v = verdict(60.0, (100.0,))
    assert v.gate is None and v.detectable is None
    assert v.status == INCONCLUSIVE
    assert "noise unknown (1 recorded run)" in v.line()
    assert verdict(95.0, (100.0,)).status == OK  # within the tolerance is no change, noise or not


def test_the_pool_widens_a_quiet_looking_figure_but_never_narrows_one() -> None:
    pool = pools([("throughput", "torch", runs) for runs in [(100, 110, 90), (50, 55, 45), (10, 11, 9)]])
    assert pool[("throughput", "torch")].df == 6
    lucky = (100.0, 100.5)  # two runs that agree by luck, of a kind that spreads 10%
    assert verdict(80.0, lucky, pool=pool[("throughput", "torch")]).gate > 0.3  # not the lucky 0.4% spread
    # a figure noisier than its pool keeps its own spread and degrees of freedom
    noisy = (100.0, 130.0, 80.0)
    quiet_pool = Pool(0.001, 100)
    assert verdict(60.0, noisy, pool=quiet_pool).gate == verdict(60.0, noisy).gate
    # one run: the pool does not vouch for it
    assert verdict(60.0, (100.0,), pool=pool[("throughput", "torch")]).status == INCONCLUSIVE


def test_more_figures_in_the_run_widen_each_gate() -> None:
    runs = (100.0, 103.0, 97.0, 101.0, 99.0)
    one, many = verdict(100.0, runs, tolerance=0.01, alpha=family_alpha(1)), \
        verdict(100.0, runs, tolerance=0.01, alpha=family_alpha(250))
    assert many.gate > one.gate
    assert family_alpha(250) == pytest.approx(FAMILY_ALPHA / 250)
    assert family_alpha(0) == FAMILY_ALPHA


def test_a_suite_with_no_change_fails_at_most_its_family_level() -> None:
    """A/A suites under the model's own assumption (log-normal run-to-run noise, each figure its own
    spread): 400 suites of 100 figures, each with 5 recorded runs. Bonferroni holds the chance that
    a suite fails anywhere to 5%; the bound allows the binomial spread of 400 suites."""
    rng = random.Random(11)
    figures, suites = 100, 400
    alpha = family_alpha(figures)
    failed = 0
    for _ in range(suites):
        for _ in range(figures):
            sd = rng.uniform(0.005, 0.2)
            runs = tuple(100 * math.exp(rng.gauss(0, sd)) for _ in range(5))
            now = 100 * math.exp(rng.gauss(0, sd))
            if verdict(now, runs, tolerance=0.0001, alpha=alpha).status == REGRESSION:
                failed += 1
                break
    assert failed / suites <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / suites)


def test_a_large_change_is_caught_across_a_whole_suite() -> None:
    """The other side: a 20% throughput loss against ten recorded runs 2% apart, at a 250-figure
    suite's level (five runs alone put the gate near 30%: recording more runs is what tightens it)."""
    rng = random.Random(5)
    caught = sum(verdict(80.0 * math.exp(rng.gauss(0, 0.02)),
                         tuple(100 * math.exp(rng.gauss(0, 0.02)) for _ in range(10)),
                         alpha=family_alpha(250)).status == REGRESSION for _ in range(200))
    assert caught >= 190


def test_t_quantiles_match_the_tables() -> None:
    assert t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-3)
    assert t_quantile(0.975, 7) == pytest.approx(2.3646, abs=1e-3)
    assert t_quantile(0.995, 30) == pytest.approx(2.7500, abs=1e-3)
    assert t_quantile(0.025, 10) == pytest.approx(-2.2281, abs=1e-3)
    scipy_stats = pytest.importorskip("scipy.stats")
    for p, df in [(1 - 0.0001, 3), (1 - 1e-5, 40), (0.9, 2), (0.999, 8)]:
        assert t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-6)


def test_identical_runs_prove_an_exact_figure_only_from_five() -> None:
    """Two runs at an accuracy of 1.0 may both sit at the ceiling: their noise is unknown; five say exact."""
    assert verdict(0.85, (1.0, 1.0)).status == INCONCLUSIVE
    assert verdict(0.85, (1.0,) * 5).status == REGRESSION


def test_resolve_weighs_the_pool_at_most_prior_df() -> None:
    gate = resolve(0.05, (100.0, 100.0), Pool(0.1, 1000), 0.05)
    assert gate.df == 1 + 8 and gate.noise == pytest.approx(0.1 * math.sqrt(8 / 9))


# ------------------------------------------------------------------ one gate resolver


@pytest.mark.parametrize("metric, run, marker, explicit, expected", [
    ("throughput", 0.10, None, None, 0.10),   # the run's tolerance alone
    ("throughput", 0.10, 0.50, None, 0.50),   # a marker widens a tighter run tolerance
    ("throughput", 0.60, 0.50, None, 0.60),   # ... and never narrows a wider one
    ("throughput", 0.60, 0.50, 0.05, 0.05),   # dlperf.check(tolerance=...) wins over both
    ("compile_time", 0.05, None, None, 0.25),  # compile times are never held tighter than 25%
    ("peak_host_memory", 0.05, None, None, 0.05),
    ("accuracy_top1", 0.10, None, None, 0.03),  # accuracies are not held to a tolerance sized for timing
    ("accuracy_top1", 0.10, 0.08, None, 0.08),  # ... a marker still widens them
    ("accuracy_top5", 0.10, None, 0.01, 0.01),
])
def test_the_floor_follows_one_precedence(metric, run, marker, explicit, expected):
    assert floor_for(metric, run, marker, explicit) == expected


# ------------------------------------------------------------------ reporting


def test_missing_baseline() -> None:
    v = compare("t.py::test", "fp32", metric_from("throughput", [100.0], "samples/s"), None, 0.1)
    assert v.status == MISSING and v.baseline is None and v.delta is None and v.p_value is None
    assert "no baseline" in v.line()


def test_regression_lines_carry_the_numbers_and_the_gate() -> None:
    up = verdict(125.0)
    assert up.line().startswith("improvement: fp32 throughput 125 samples/s vs baseline 100 (+25.0%, gate 10.0%")
    down = verdict(50.0, software={"framework_version": "2.1"})
    message = failure_message("t.py::test", [up, down])
    first = message.splitlines()[0]
    assert first.startswith("regression: fp32 throughput 50 samples/s vs baseline 100 (-50.0%, gate 10.0% "
                            "(tolerance 10.0%, run-to-run")
    assert "p=" in first and "--update-baselines" in message


def test_software_change_is_named_only_when_the_figure_changed() -> None:
    then = baseline(STEADY, software={"framework_version": "2.0", "python": "3.11"})
    v = compare("t", "fp32", metric_from("throughput", [50.0], "samples/s"), then, 0.1,
                {"framework_version": "2.1", "python": "3.11"})
    assert v.software_note == "software changed since the baseline: framework_version 2.0 -> 2.1"
    same = compare("t", "fp32", metric_from("throughput", [100.0], "samples/s"), then, 0.1,
                   {"framework_version": "2.1"})
    assert same.status == OK and same.software_note == ""
