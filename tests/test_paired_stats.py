"""Paired-ratio statistics: Hodges-Lehmann estimate, Wilcoxon signed-rank CI, and the decision rule."""

from __future__ import annotations

import ast
import itertools
import json
import math
import random
import statistics
from fractions import Fraction
from pathlib import Path

import pytest

from pytest_dlperf.judging import stats as stats_module
from pytest_dlperf.judging.outcomes import IMPROVEMENT, INCONCLUSIVE, OK, REGRESSION
from pytest_dlperf.judging.stats import (PairedRatio, _signed_rank_counts, _signed_rank_k, decide, decided_at,
                                         paired_ratio)


def naive_walsh(d):
    return sorted((a + b) / 2.0 for a, b in itertools.combinations_with_replacement(d, 2))


def from_logs(d):
    """Candidate/reference throughputs whose log ratios are ``d`` (reference varies, as real runs do)."""
    reference = [100.0 + 7.0 * i for i in range(len(d))]
    return [r * math.exp(x) for r, x in zip(reference, d)], reference


def test_module_stays_pure_python() -> None:
    tree = ast.parse(Path(stats_module.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"numpy", "scipy"}, imported


# --- Hodges-Lehmann estimate -------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 7, 10, 15])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimate_is_median_of_walsh_averages(seed: int, n: int) -> None:
    rng = random.Random(seed * 100 + n)
    d = [rng.gauss(-0.05, 0.03) for _ in range(n)]
    result = paired_ratio(*from_logs(d))
    assert math.log(result.estimate) == pytest.approx(statistics.median(naive_walsh(d)), abs=1e-12)
    assert result.n == n
    assert result.ratios == pytest.approx([math.exp(x) for x in d], rel=1e-12)
    assert result.low <= result.estimate <= result.high


@pytest.mark.parametrize(
    "candidate, reference, expected",
    [
        ([2.0, 2.0], [1.0, 1.0], 2.0),
        ([1.0, 2.0, 4.0], [1.0, 1.0, 1.0], 2.0),  # Walsh averages of 0, L, 2L have median L
        ([1.0, 1.0, 8.0], [1.0, 1.0, 1.0], 2.0**0.75),  # 0,0,0,1.5L,1.5L,3L -> 0.75L (not the ratio median 1)
        # logs a<b<c of 0.5, 0.9, 3: sorted Walsh a, (a+b)/2, b, (a+c)/2, (b+c)/2, c -> median (b + (a+c)/2) / 2
        ([50.0, 90.0, 300.0], [100.0, 100.0, 100.0], (0.9 * (0.5 * 3.0) ** 0.5) ** 0.5),
    ],
)
def test_estimate_known_small_inputs(candidate, reference, expected) -> None:
    assert paired_ratio(candidate, reference).estimate == pytest.approx(expected, rel=1e-12)


def test_swapping_sides_inverts_the_ratio() -> None:
    rng = random.Random(7)
    d = [rng.gauss(0.1, 0.05) for _ in range(12)]
    cand, ref = from_logs(d)
    forward, backward = paired_ratio(cand, ref), paired_ratio(ref, cand)
    assert forward.estimate * backward.estimate == pytest.approx(1.0, rel=1e-12)
    assert forward.low * backward.high == pytest.approx(1.0, rel=1e-12)
    assert forward.high * backward.low == pytest.approx(1.0, rel=1e-12)


# --- null distribution of T+ and the CI index k -----------------------------------------------


def brute_force_counts(n: int) -> list[int]:
    counts = [0] * (n * (n + 1) // 2 + 1)
    for signs in itertools.product((0, 1), repeat=n):
        counts[sum(rank for rank, plus in zip(range(1, n + 1), signs) if plus)] += 1
    return counts


@pytest.mark.parametrize("n", range(1, 15))
def test_signed_rank_distribution_matches_enumeration(n: int) -> None:
    counts = brute_force_counts(n)
    assert list(_signed_rank_counts(n)) == counts
    total = 2**n
    for confidence in (0.5, 0.75, 0.8, 0.9, 0.95, 0.99):  # at 0.5 and 0.75 the CDF can hit alpha/2 exactly
        half_alpha = (1 - Fraction(str(confidence))) / 2
        cdf = list(itertools.accumulate(counts))
        expected = max((k for k in range(1, len(counts) + 1) if Fraction(cdf[k - 1], total) <= half_alpha),
                       default=0)
        assert _signed_rank_k(n, confidence) == expected, (n, confidence)


def test_known_critical_values() -> None:
    # Two-sided 5% critical values of T from the standard tables are k - 1.
    table = {6: 0, 7: 2, 8: 3, 9: 5, 10: 8, 15: 25, 20: 52, 25: 89, 30: 137}
    assert {n: _signed_rank_k(n, 0.95) - 1 for n in table} == table
    assert [_signed_rank_k(n, 0.95) for n in range(1, 6)] == [0] * 5


@pytest.mark.parametrize("n", [6, 10, 15, 20])
def test_signed_rank_cdf_matches_scipy_exact(n: int) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    counts = _signed_rank_counts(n)
    cdf = list(itertools.accumulate(counts))
    for t in range(len(counts)):
        plus, left = set(), t  # ranks 1..n carrying a plus sign, summing to t (greedy works for 1..n)
        for rank in range(n, 0, -1):
            if rank <= left:
                plus.add(rank)
                left -= rank
        x = [rank if rank in plus else -rank for rank in range(1, n + 1)]
        res = scipy_stats.wilcoxon(x, alternative="less", method="exact")
        assert res.statistic == t
        assert cdf[t] / 2**n == pytest.approx(res.pvalue, rel=1e-12), (n, t)


# --- the confidence interval ------------------------------------------------------------------


@pytest.mark.parametrize("n", [8, 12, 20, 40])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_interval_is_the_set_of_shifts_wilcoxon_does_not_reject(seed: int, n: int) -> None:
    """Shifts just inside a bound keep p >= alpha; just outside (the next Walsh gap) p < alpha."""
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(seed * 1000 + n)
    d = [rng.gauss(-0.08, 0.05) for _ in range(n)]
    result = paired_ratio(*from_logs(d), confidence=0.95)
    walsh = naive_walsh(d)
    alpha = 0.05

    def p(shift: float) -> float:
        return scipy_stats.wilcoxon([x - shift for x in d], alternative="two-sided", method="exact").pvalue

    lo = min(range(len(walsh)), key=lambda j: abs(walsh[j] - math.log(result.low)))
    hi = min(range(len(walsh)), key=lambda j: abs(walsh[j] - math.log(result.high)))
    assert math.log(result.low) == pytest.approx(walsh[lo], abs=1e-12)
    assert math.log(result.high) == pytest.approx(walsh[hi], abs=1e-12)
    assert lo + hi == len(walsh) - 1  # W_(k) and W_(M-k+1)
    assert p((walsh[lo] + walsh[lo + 1]) / 2) >= alpha
    assert p((walsh[lo - 1] + walsh[lo]) / 2) < alpha
    assert p((walsh[hi - 1] + walsh[hi]) / 2) >= alpha
    assert p((walsh[hi] + walsh[hi + 1]) / 2) < alpha


@pytest.mark.parametrize("n", [2, 5, 6])
def test_tiny_samples_get_the_full_range(n: int) -> None:
    d = [0.01 * (i + 1) * (-1) ** i for i in range(n)]
    result = paired_ratio(*from_logs(d))
    assert result.low == pytest.approx(min(result.ratios), rel=1e-12)
    assert result.high == pytest.approx(max(result.ratios), rel=1e-12)


def test_coverage_by_simulation() -> None:
    rng = random.Random(20240601)
    true_ratio, trials, covered = 0.9, 400, 0
    for _ in range(trials):
        reference = [rng.uniform(900.0, 1100.0) for _ in range(20)]
        candidate = [r * true_ratio * math.exp(rng.gauss(0.0, 0.03)) for r in reference]
        result = paired_ratio(candidate, reference)
        covered += result.low <= true_ratio <= result.high
    assert 0.92 * trials <= covered <= 0.98 * trials, covered


# --- the decision rule ------------------------------------------------------------------------


def made(estimate: float, low: float, high: float) -> PairedRatio:
    return PairedRatio(ratios=(estimate,) * 10, estimate=estimate, low=low, high=high, confidence=0.95)


@pytest.mark.parametrize(
    "ratio, expected",
    [
        (made(0.85, 0.80, 0.90), REGRESSION),
        (made(1.20, 1.10, 1.30), IMPROVEMENT),
        (made(0.85, 0.70, 1.02), INCONCLUSIVE),  # beyond the threshold, but the interval includes no change
        (made(1.20, 0.99, 1.40), INCONCLUSIVE),
        (made(0.95, 0.93, 0.97), OK),  # interval excludes 1, but no change as large as the threshold fits
        (made(1.05, 1.03, 1.07), OK),
        (made(0.90, 0.85, 0.95), INCONCLUSIVE),  # at the threshold, with slowdowns beyond it in the interval
        (made(1.00, 0.95, 1.05), OK),
        (made(0.99, 0.88, 1.10), INCONCLUSIVE),  # too wide to say either way: more process pairs would
    ],
)
def test_decide_constructed_cases(ratio: PairedRatio, expected: str) -> None:
    assert decide(ratio, 0.10) == expected


def test_decide_on_measured_pairs() -> None:
    rng = random.Random(3)
    reference = [rng.uniform(900.0, 1100.0) for _ in range(20)]
    slower = paired_ratio([r * 0.85 * math.exp(rng.gauss(0, 0.01)) for r in reference], reference)
    faster = paired_ratio([r * 1.25 * math.exp(rng.gauss(0, 0.01)) for r in reference], reference)
    assert decide(slower, 0.05) == REGRESSION
    assert decide(faster, 0.05) == IMPROVEMENT
    # Six pairs, one of them faster: estimate well below 0.9 but the (full-range) CI contains 1.
    noisy = paired_ratio([70.0, 75.0, 80.0, 85.0, 105.0, 78.0], [100.0] * 6)
    assert noisy.estimate < 0.9 and noisy.low < 1 < noisy.high
    assert decide(noisy, 0.10) == INCONCLUSIVE


def test_process_pairs_are_the_unit_of_the_interval() -> None:
    """Every process pair carries its own offset: with it, the rounds-only interval is far too narrow,
    the per-unit t interval is not. 4 process pairs of 8 rounds, offsets sd 3%, rounds sd 1%."""
    rng = random.Random(2)
    covered_units = covered_rounds = 0
    for _ in range(200):
        offsets = [rng.gauss(0, 0.03) for _ in range(4)]
        units = [i % 4 for i in range(32)]
        logs = [offsets[u] + rng.gauss(0, 0.01) for u in units]
        candidate = [100 * math.exp(x) for x in logs]
        with_units = paired_ratio(candidate, [100.0] * 32, units=units)
        rounds_only = paired_ratio(candidate, [100.0] * 32)
        assert with_units.units == 4 and rounds_only.units == 1
        covered_units += with_units.low <= 1 <= with_units.high
        covered_rounds += rounds_only.low <= 1 <= rounds_only.high
    assert covered_units >= 0.90 * 200
    assert covered_rounds <= 0.6 * 200


def test_units_must_match_the_pairs() -> None:
    with pytest.raises(ValueError, match="one unit per pair"):
        paired_ratio([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], units=[0, 1])


@pytest.mark.parametrize("threshold", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_decide_validates_threshold(threshold: float) -> None:
    with pytest.raises(ValueError, match="threshold must be between 0 and 1"):
        decide(made(0.5, 0.4, 0.6), threshold)


# --- input validation and serialisation -------------------------------------------------------


@pytest.mark.parametrize(
    "candidate, reference, message",
    [
        ([1.0, 2.0, 3.0], [1.0, 2.0], "one reference per candidate measurement, got 3 candidate and 2 reference"),
        ([1.0], [1.0], "at least 2 pairs, got 1"),
        ([], [], "at least 2 pairs, got 0"),
        ([1.0, 0.0], [1.0, 1.0], r"candidate value #1 is 0\.0: throughputs must be positive and finite"),
        ([1.0, 1.0], [-2.0, 1.0], r"reference value #0 is -2\.0: throughputs must be positive"),
        ([1.0, float("nan")], [1.0, 1.0], "candidate value #1 is nan"),
        ([1.0, 1.0], [1.0, float("inf")], "reference value #1 is inf"),
    ],
)
def test_bad_input_is_rejected_clearly(candidate, reference, message) -> None:
    with pytest.raises(ValueError, match=message):
        paired_ratio(candidate, reference)


@pytest.mark.parametrize("confidence", [0.0, 1.0, 1.5])
def test_confidence_is_validated(confidence: float) -> None:
    with pytest.raises(ValueError, match="confidence must be between 0 and 1"):
        paired_ratio([1.0, 2.0], [1.0, 1.0], confidence=confidence)


def test_round_trip_and_description() -> None:
    rng = random.Random(11)
    result = paired_ratio([rng.uniform(80, 90) for _ in range(9)], [rng.uniform(95, 105) for _ in range(9)],
                          confidence=0.9)
    data = json.loads(json.dumps(result.to_dict()))
    assert set(data) == {"ratios", "estimate", "low", "high", "confidence", "units"}
    assert PairedRatio.from_dict(data) == result
    assert made(0.912, 0.897, 0.925).describe() == \
        "0.912x [0.897, 0.925] (95% CI, 10 pairs, 1 process pair: rounds' noise only)"
    assert result.describe().endswith("(90% CI, 9 pairs, 1 process pair: rounds' noise only)")


def test_a_group_is_decided_once_no_ratio_is_inconclusive() -> None:
    rule = decided_at(0.10)
    assert rule({"a": made(0.85, 0.80, 0.90), "b": made(1.00, 0.95, 1.05)}) is True
    assert rule({"a": made(0.85, 0.80, 0.90), "b": made(0.99, 0.88, 1.10)}) is False
    assert rule({}) is True
    only_a = decided_at(0.10, ["a"])  # a group holding several claims decides each on its own variants
    assert only_a({"a": made(0.85, 0.80, 0.90), "b": made(0.99, 0.88, 1.10)}) is True
    assert only_a({"a": made(0.95, 0.80, 1.10), "b": made(1.00, 0.95, 1.05)}) is False


def test_a_group_of_several_claims_is_decided_when_each_is() -> None:
    from pytest_dlperf.judging.stats import all_decided, claim_decided

    rule = all_decided(decided_at(0.10, ["tf32"]), claim_decided(1.8, ["amp"]))
    clear_amp, open_amp = made(2.5, 2.2, 2.8), made(1.9, 1.6, 2.2)
    clear_tf32, open_tf32 = made(1.00, 0.95, 1.05), made(0.95, 0.80, 1.10)
    assert rule({"tf32": clear_tf32, "amp": clear_amp}) is True
    assert rule({"tf32": open_tf32, "amp": clear_amp}) is False
    assert rule({"tf32": clear_tf32, "amp": open_amp}) is False


def test_a_claim_is_decided_when_its_interval_lies_on_one_side_of_the_floor() -> None:
    from pytest_dlperf.judging.stats import claim_decided

    decided = claim_decided(1.8)
    assert decided({"amp": PairedRatio((2.0,) * 4, 2.0, 1.9, 2.1, 0.9, units=4)})
    assert decided({"amp": PairedRatio((1.5,) * 4, 1.5, 1.4, 1.6, 0.9, units=4)})
    assert not decided({"amp": PairedRatio((1.8,) * 4, 1.8, 1.6, 2.0, 0.9, units=4)})
    assert claim_decided(1.8, ["amp"])({"amp": PairedRatio((2.0,) * 4, 2.0, 1.9, 2.1, 0.9, units=4),
                                        "tf32": PairedRatio((1.0,) * 4, 1.0, 0.7, 2.0, 0.9, units=4)})
