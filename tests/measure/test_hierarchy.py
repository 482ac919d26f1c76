"""Statistics across runs, checked on two-level simulations with known variance components."""

import math

import numpy as np
import pytest

from trainperf.measure.hierarchy import (
    Components,
    coefficient_of_variation,
    mean_interval,
    optimal_steps_per_run,
    ratio_interval,
    runs_needed,
    variance_components,
)
from trainperf.measure.stats import mean_ci95

TRUE = 100.0  # samples/s


def two_level(rng, runs, steps, between, within, mean=TRUE):
    """Per-step throughputs of ``runs`` runs: x_ij = mean + b_i + e_ij (sds as fractions)."""
    offsets = rng.normal(0, between * mean, runs)
    return [rng.normal(mean + b, within * mean, steps) for b in offsets]


def run_estimates(groups):
    # The run estimate of trainperf: B / median(step time) = median of B / step time.
    return [float(np.median(g)) for g in groups]


def test_between_run_interval_covers_the_truth_about_95_percent():
    rng = np.random.default_rng(7)
    trials, covered, covered_one_process = 1000, 0, 0
    for _ in range(trials):
        groups = two_level(rng, runs=5, steps=21, between=0.05, within=0.10)
        interval = mean_interval(run_estimates(groups))
        covered += interval.low <= TRUE <= interval.high
        # What one process reports about itself: a t interval over its own steps.
        own = mean_ci95(groups[0])
        covered_one_process += own.low <= TRUE <= own.high
    assert 0.93 <= covered / trials <= 0.97
    # The reason runs exist: one process's interval ignores the between-run spread.
    assert covered_one_process / trials < 0.6


def test_interval_needs_two_runs_and_narrows_with_more():
    assert mean_interval([100.0]) is None
    rng = np.random.default_rng(1)
    widths = []
    for runs in (3, 10, 40):
        found = [
            mean_interval(run_estimates(two_level(rng, runs, 15, 0.05, 0.05))).relative_half_width
            for _ in range(200)
        ]
        widths.append(np.mean(found))
    assert widths[0] > widths[1] > widths[2]
    assert mean_interval([10.0, 10.0, 10.0]).relative_half_width == 0


def test_variance_components_recover_the_known_spreads():
    rng = np.random.default_rng(3)
    groups = two_level(rng, runs=60, steps=200, between=0.04, within=0.10)
    found = variance_components(groups)
    assert found.between_cv == pytest.approx(0.04, rel=0.25)
    assert found.within_cv == pytest.approx(0.10, rel=0.05)
    assert found.f_p_value < 1e-6  # the runs do differ


def test_runs_that_differ_only_by_step_noise_pass_the_f_test():
    rng = np.random.default_rng(4)
    p_values = [
        variance_components(two_level(rng, 5, 30, between=0.0, within=0.1)).f_p_value
        for _ in range(300)
    ]
    # Under the null hypothesis the p-value is uniform: about 1% fall below 0.01.
    assert np.mean(np.array(p_values) < 0.01) < 0.04
    one = variance_components([[1.0, 2.0]])
    single_values = variance_components([[1.0], [2.0]])
    assert one is None and single_values is None


def test_unbalanced_runs_use_the_unbalanced_anova():
    groups = [[1.0, 2.0, 3.0], [5.0, 6.0], [2.0, 2.0, 2.0, 2.0]]
    found = variance_components(groups)
    x = np.concatenate(groups)
    means = np.array([np.mean(g) for g in groups])
    n = np.array([len(g) for g in groups])
    msw = sum(((np.array(g) - np.mean(g)) ** 2).sum() for g in groups) / (x.size - 3)
    msb = (n * (means - x.mean()) ** 2).sum() / 2
    n0 = (x.size - (n**2).sum() / x.size) / 2
    assert found.within_sd == pytest.approx(math.sqrt(msw))
    assert found.between_sd == pytest.approx(math.sqrt((msb - msw) / n0))


def test_fieller_ratio_aa_false_positives_are_about_five_percent():
    rng = np.random.default_rng(11)
    trials, significant = 2000, 0
    for _ in range(trials):
        a = run_estimates(two_level(rng, 3, 15, between=0.08, within=0.1))
        b = run_estimates(two_level(rng, 3, 15, between=0.08, within=0.1))
        significant += ratio_interval(a, b).decision() != "no significant difference"
    # Nominal 5%; Welch's degrees of freedom make it a little conservative at 3 runs a side.
    assert 0.02 <= significant / trials <= 0.07


def test_fieller_ratio_finds_a_real_difference_and_is_reciprocal():
    rng = np.random.default_rng(12)
    slow = run_estimates(two_level(rng, 4, 15, between=0.03, within=0.1))
    fast = run_estimates(two_level(rng, 4, 15, between=0.03, within=0.1, mean=1.5 * TRUE))
    forward, backward = ratio_interval(slow, fast), ratio_interval(fast, slow)
    assert forward.decision() == "faster" and backward.decision() == "slower"
    assert forward.low < 1.5 < forward.high
    assert forward.ratio == pytest.approx(np.mean(fast) / np.mean(slow))
    assert forward.low == pytest.approx(1 / backward.high)
    assert forward.high == pytest.approx(1 / backward.low)


def test_fieller_degenerate_and_too_few_runs():
    same = ratio_interval([10.0, 10.0, 10.0], [20.0, 20.0, 20.0])
    assert (same.low, same.high) == (2.0, 2.0) and same.decision() == "faster"
    assert ratio_interval([10.0], [11.0, 12.0]) is None


def test_runs_needed_is_the_smallest_count_reaching_the_precision():
    from scipy import stats

    def half_width(runs, cv):
        return stats.t.ppf(0.975, runs - 1) * cv / math.sqrt(runs)

    for cv, precision in ((0.05, 0.02), (0.2, 0.05), (0.01, 0.02)):
        runs = runs_needed(cv, precision)
        assert half_width(runs, cv) <= precision
        assert runs == 3 or half_width(runs - 1, cv) > precision
    assert runs_needed(0.0, 0.02) == 3
    with pytest.raises(ValueError):
        runs_needed(0.1, 0)


def test_optimal_steps_per_run_follows_the_cost_and_variance_ratio():
    components = Components(grand_mean=100, within_sd=10, between_sd=2, f_p_value=0.001)
    # sqrt(c_run / c_step * sigma_w^2 / sigma_b^2) = sqrt(5 / 0.05 * 25) = 50
    assert optimal_steps_per_run(components, run_overhead_s=5.0, step_s=0.05) == 50
    quiet = Components(grand_mean=100, within_sd=10, between_sd=0, f_p_value=0.9)
    assert optimal_steps_per_run(quiet, 5.0, 0.05) is None
    assert coefficient_of_variation([1.0]) is None
    assert coefficient_of_variation([9.0, 11.0]) == pytest.approx(math.sqrt(2) / 10)


def test_a_rate_interval_never_goes_below_zero_and_keeps_its_half_width():
    # Two runs far apart: t(0.975, 1) = 12.7 puts the unclamped low end at about -535.
    interval = mean_interval([100.0, 200.0])
    half = 12.706 * math.sqrt(2 * 50.0**2) / math.sqrt(2)
    assert interval.low == 0.0 and interval.high == pytest.approx(150.0 + half, rel=1e-3)
    assert interval.relative_half_width == pytest.approx(half / 150.0, rel=1e-3)  # not cut
    # A ratio of throughputs cannot be below 0 either: the other side's mean is near zero.
    ratio = ratio_interval([100.0, 101.0, 99.0], [1.0, 30.0, 2.0])
    assert ratio.bounded and ratio.low == 0.0 and ratio.high > ratio.ratio
