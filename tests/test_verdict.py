"""Verdicts and the rank test, without pytest-in-pytest: the numbers a CI failure rests on."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from pytest_dlperf.judging.baselines import Baseline
from pytest_dlperf.result import HIGHER, LOWER, metric_from
from pytest_dlperf.judging.stats import mann_whitney_p, median_standard_error
from pytest_dlperf.summary import summarize
from pytest_dlperf.judging.verdict import (
    IMPROVEMENT,
    MAX_WIDENING,
    MISSING,
    OK,
    REGRESSION,
    compare,
    failure_message,
    rank_test_can_decide,
)


def baseline(samples, direction=HIGHER, software=None) -> Baseline:
    s = summarize(samples)
    return Baseline(value=s.median, unit="u", direction=direction, samples=tuple(samples), iqr=s.iqr,
                    software=software or {}, recorded="2026-01-01T00:00:00Z")


def verdict(now, then, direction=HIGHER, tolerance=0.10, **kwargs):
    unit = "samples/s" if direction == HIGHER else "s"
    name = "throughput" if direction == HIGHER else "step_time"
    return compare("t.py::test", "fp32", metric_from(name, now, unit, direction), baseline(then, direction),
                   tolerance, **kwargs)


TIGHT = [99.0, 99.5, 100.0, 100.5, 101.0]


def scaled(samples, factor):
    return [v * factor for v in samples]


# ------------------------------------------------------------------ direction


@pytest.mark.parametrize(
    "direction, factor, status",
    [
        (HIGHER, 0.70, REGRESSION),   # throughput fell 30%
        (HIGHER, 1.30, IMPROVEMENT),  # throughput rose 30%
        (LOWER, 1.30, REGRESSION),    # step time rose 30%
        (LOWER, 0.70, IMPROVEMENT),   # step time fell 30%
        (HIGHER, 0.95, OK),           # within the 10% tolerance either way
        (LOWER, 1.05, OK),
    ],
)
def test_direction_decides_which_way_is_worse(direction, factor, status) -> None:
    v = verdict(scaled(TIGHT, factor), TIGHT, direction)
    assert v.status == status
    assert v.delta == pytest.approx(factor - 1.0)
    assert v.p_value == pytest.approx(2 / math.comb(10, 5)) or status == OK  # fully separated 5 vs 5


def test_the_boundary_is_the_tolerance() -> None:
    assert verdict(scaled(TIGHT, 0.89), TIGHT).status == REGRESSION
    assert verdict(scaled(TIGHT, 0.91), TIGHT).status == OK


# ------------------------------------------------------------------ noise


def test_tolerance_widens_with_the_spread_of_either_side() -> None:
    noisy = [80.0, 90.0, 100.0, 110.0, 120.0]  # half-IQR 10% of the median
    now = scaled(TIGHT, 0.80)  # 20% worse, fully separated from TIGHT
    assert verdict(now, TIGHT).status == REGRESSION
    # The baseline's own noise: 3 standard errors of its median, sqrt(pi/2) * (20% / 1.349) / sqrt(5) each,
    # combined with TIGHT's (half-IQR 0.5%), about 25%.
    expected = 3 * math.hypot(median_standard_error(0.10, 5), median_standard_error(0.005, 5))
    assert expected == pytest.approx(0.25, abs=0.005)
    v = verdict(now, noisy)
    assert v.tolerance == pytest.approx(expected)
    assert v.status == OK
    v = verdict([64.0, 72.0, 80.0, 88.0, 96.0], TIGHT)  # the candidate's noise counts too
    assert v.tolerance == pytest.approx(expected)
    assert v.status == OK


def test_more_rounds_tighten_the_verdict_never_loosen_it() -> None:
    """The same spread over more rounds is a more precise median: a 20% drop hidden by 5 noisy rounds
    is caught with 40, where widening by the rounds' spread alone would have stayed at 30%."""
    rng = random.Random(7)
    few_base, few_now = ([100.0 * f * rng.uniform(0.8, 1.2) for _ in range(5)] for f in (1.0, 0.8))
    many_base, many_now = ([100.0 * f * rng.uniform(0.8, 1.2) for _ in range(40)] for f in (1.0, 0.8))
    few, many = verdict(few_now, few_base), verdict(many_now, many_base)
    assert many.tolerance < few.tolerance
    assert many.tolerance == pytest.approx(0.10, abs=0.03)
    assert many.status == REGRESSION
    assert median_standard_error(0.10, 40) == pytest.approx(median_standard_error(0.10, 10) / 2)
    assert median_standard_error(0.10, 0) == 0.0


def test_widening_is_capped_so_a_noisy_run_can_still_fail() -> None:
    wild = [100.0, 110.0, 140.0, 170.0, 200.0]  # half-IQR 21% of the median: 3x would be 64%
    v = verdict([50.0, 55.0, 60.0, 65.0, 70.0], wild, tolerance=0.10)
    assert v.tolerance == pytest.approx(MAX_WIDENING * 0.10)
    assert v.delta == pytest.approx(60 / 140 - 1)
    assert v.status == REGRESSION


def test_a_change_the_rank_test_cannot_tell_from_noise_is_not_a_regression() -> None:
    # Median 39% lower, beyond even the capped tolerance, but two of five rounds beat the baseline.
    v = verdict([60.0, 60.5, 61.0, 102.0, 103.0], TIGHT, tolerance=0.10)
    assert v.delta < -MAX_WIDENING * 0.10
    assert v.p_value is not None and v.p_value > 0.05
    assert v.status == OK


def test_too_few_rounds_for_the_rank_test_leave_the_tolerance_to_decide() -> None:
    v = verdict([69.0, 70.0, 71.0], [99.0, 100.0, 101.0])
    assert v.p_value is None  # 3 vs 3 cannot go below p = 0.1
    assert v.status == REGRESSION


@pytest.mark.parametrize("n1, n2, can", [(3, 3, False), (3, 4, False), (4, 4, True), (5, 5, True),
                                         (2, 20, True), (1, 30, False), (1, 50, True), (0, 5, False)])
def test_rank_test_is_used_only_where_it_can_reach_significance(n1, n2, can) -> None:
    assert rank_test_can_decide(n1, n2) is can


# ------------------------------------------------------------------ reporting


def test_missing_baseline() -> None:
    v = compare("t.py::test", "fp32", metric_from("throughput", TIGHT, "samples/s"), None, 0.1)
    assert v.status == MISSING and v.baseline is None and v.delta is None and v.p_value is None
    assert "no baseline" in v.line()


def test_improvement_and_regression_lines_carry_the_numbers() -> None:
    up = verdict(scaled(TIGHT, 1.25), TIGHT)
    assert up.line().startswith("improvement: fp32 throughput 125 samples/s vs baseline 100 (+25.0%, tolerance 10.0%")
    down = verdict(scaled(TIGHT, 0.5), TIGHT, software={"framework_version": "2.1"})
    message = failure_message("t.py::test", [up, down])
    first = message.splitlines()[0]
    assert first.startswith("regression: fp32 throughput 50 samples/s vs baseline 100 (-50.0%, tolerance 10.0%, p=0.008")
    assert "--update-baselines" in message


def test_software_change_is_named_only_when_the_verdict_is_not_ok() -> None:
    then = baseline(TIGHT, software={"framework_version": "2.0", "python": "3.11"})
    m = metric_from("throughput", scaled(TIGHT, 0.5), "samples/s")
    v = compare("t", "fp32", m, then, 0.1, {"framework_version": "2.1", "python": "3.11"})
    assert v.software_note == "software changed since the baseline: framework_version 2.0 -> 2.1"
    same = compare("t", "fp32", metric_from("throughput", TIGHT, "samples/s"), then, 0.1, {"framework_version": "2.1"})
    assert same.status == OK and same.software_note == ""


# ------------------------------------------------------------------ the rank test


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ([1, 2, 3], [4, 5, 6], 0.1),                    # 2 / C(6, 3)
        ([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], 2 / 252),   # 2 / C(10, 5)
        ([1, 2, 3, 4], [5, 6, 7, 8], 2 / 70),
        ([1, 3, 5, 7], [2, 4, 6, 8], 0.6857142857142857),  # U = 6: 2 * 24/70
        ([5.0], [1.0, 2.0, 3.0], 0.5),
        ([1.0, 2.0], [1.5, 2.5], 2 / 3),             # U = 1: 2 * 2/6
    ],
)
def test_exact_p_values(a, b, expected) -> None:
    assert mann_whitney_p(a, b) == pytest.approx(expected, rel=1e-12)
    assert mann_whitney_p(b, a) == pytest.approx(expected, rel=1e-12)  # two-sided: symmetric


def test_no_samples_means_no_evidence() -> None:
    assert mann_whitney_p([], [1.0]) == 1.0
    assert mann_whitney_p([1.0, 1.0], [1.0, 1.0]) == 1.0  # all tied


def scipy_p(a, b, method):
    stats = pytest.importorskip("scipy.stats")
    return stats.mannwhitneyu(a, b, alternative="two-sided", method=method, use_continuity=True).pvalue


def _cases(seed: int):
    rng = random.Random(seed)
    for n1, n2 in itertools.product((2, 3, 5, 8), (3, 5, 7, 12)):
        shift = rng.choice((0.0, 0.5, 1.5))
        yield [rng.gauss(0, 1) for _ in range(n1)], [rng.gauss(shift, 1) for _ in range(n2)]


def test_exact_distribution_matches_scipy() -> None:
    for a, b in _cases(1):
        assert mann_whitney_p(a, b) == pytest.approx(scipy_p(a, b, "exact"), rel=1e-9, abs=1e-12), (a, b)


def test_normal_approximation_with_ties_matches_scipy() -> None:
    rng = random.Random(2)
    for n1, n2 in ((5, 5), (6, 9), (20, 20), (4, 30)):
        a = [round(rng.gauss(0, 1), 1) for _ in range(n1)]  # rounding makes ties
        b = [round(rng.gauss(0.7, 1), 1) for _ in range(n2)]
        a[0] = b[0]  # at least one tie across the samples
        assert mann_whitney_p(a, b) == pytest.approx(scipy_p(a, b, "asymptotic"), rel=1e-9), (a, b)


def test_large_samples_use_the_normal_approximation_like_scipy() -> None:
    rng = random.Random(3)
    a = [rng.gauss(0, 1) for _ in range(20)]
    b = [rng.gauss(0.8, 1) for _ in range(20)]  # 40 samples, no ties: beyond the exact table
    assert mann_whitney_p(a, b) == pytest.approx(scipy_p(a, b, "asymptotic"), rel=1e-9)


@pytest.mark.parametrize("run, marker, explicit, expected", [
    (0.10, None, None, 0.10),   # the run's tolerance alone
    (0.10, 0.50, None, 0.50),   # a marker widens a tighter run tolerance
    (0.60, 0.50, None, 0.60),   # ... and never narrows a wider one (CI's 50% stays 50%+)
    (0.60, 0.50, 0.05, 0.05),   # dlperf.check(tolerance=...) wins over both
])
def test_a_tolerance_marker_widens_the_run_tolerance_and_an_explicit_one_wins(run, marker, explicit, expected):
    from pytest_dlperf.markers import effective_tolerance

    assert effective_tolerance(run, marker, explicit) == expected
