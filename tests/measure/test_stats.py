import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from trainperf.measure.stats import drift, instability_reasons, mean_ci95, summarize


def test_mean_ci95_matches_student_t_by_hand():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    ci = mean_ci95(values)
    # mean 3, s = sqrt(2.5), t(0.975, 4) = 2.7764451
    half = 2.7764451051977987 * math.sqrt(2.5) / math.sqrt(5)
    assert ci.mean == pytest.approx(3.0)
    assert ci.low == pytest.approx(3.0 - half)
    assert ci.high == pytest.approx(3.0 + half)
    assert ci.relative_half_width == pytest.approx(half / 3.0)


def test_mean_ci95_is_unbounded_below_three_values():
    ci = mean_ci95([1.0, 1.1])
    assert math.isinf(ci.relative_half_width)


def test_summarize_known_data():
    step_s = [0.5, 0.5, 0.25, 1.0]  # per-step throughput with B=10: 20, 20, 40, 10
    s = summarize(step_s, samples_per_step=10)
    assert s.steps_measured == 4
    assert s.step_s_median == pytest.approx(0.5)
    assert s.samples_per_s_median == pytest.approx(20.0)
    # mean throughput = 40 samples / 2.25 s, not the mean of per-step rates (22.5)
    assert s.samples_per_s_mean == pytest.approx(40 / 2.25)
    assert s.cv == pytest.approx(np.std(step_s, ddof=1) / np.mean(step_s))
    # per-step rates 20, 20, 40, 10: median 20, |dev| 0, 0, 20, 10 -> MAD 5
    assert s.jitter == pytest.approx(1.4826 * 5)
    low, high = s.samples_per_s_ci95
    ci = mean_ci95(step_s)
    assert (low, high) == (pytest.approx(10 / ci.high), pytest.approx(10 / ci.low))


def test_an_interval_reaching_zero_seconds_has_no_throughput_interval():
    step_s = [0.1, 0.1, 2.0]  # three widely spread steps: the interval reaches below 0 s
    s = summarize(step_s, samples_per_step=10)
    assert mean_ci95(step_s).low < 0
    assert s.samples_per_s_ci95 is None and "no upper bound" in s.samples_per_s_ci95_absent_reason
    assert s.ci95_relative == pytest.approx(mean_ci95(step_s).relative_half_width)


@pytest.mark.parametrize("steps", [[0.5], [0.5, 0.7]])
def test_too_few_steps_give_no_interval_and_say_why(steps):
    """Below 3 steps no interval exists: None with the reason, never an infinity (which
    would reach stored and printed JSON)."""
    s = summarize(steps, samples_per_step=4)
    document = s.as_dict()
    assert document["samples_per_s_ci95"] is None and document["ci95_relative"] is None
    assert f"only {len(steps)} measured step" in document["ci95_absent_reason"]
    assert all(not isinstance(v, float) or math.isfinite(v) for v in document.values())
    assert (document["cv"] is None) == (len(steps) == 1)
    assert ("cv_absent_reason" in document) == (len(steps) == 1)


def test_throughput_interval_brackets_the_mean():
    rng = np.random.default_rng(0)
    step_s = 0.1 + rng.normal(0, 0.002, 200)
    s = summarize(step_s, 32)
    low, high = s.samples_per_s_ci95
    assert low < s.samples_per_s_mean < high
    assert s.ci95_relative < 0.01


def test_summarize_rejects_empty():
    with pytest.raises(ValueError):
        summarize([], 1)


def test_drift_detects_a_trend_and_ignores_noise():
    rng = np.random.default_rng(1)
    flat = 1.0 + rng.normal(0, 0.01, 100)
    change, p = drift(flat)
    assert abs(change) < 0.01 and p > 0.01
    rising = np.concatenate([np.full(50, 1.0), np.full(50, 1.2)]) + rng.normal(0, 0.01, 100)
    change, p = drift(rising)
    assert change == pytest.approx(0.2, abs=0.02)
    assert p < 1e-6
    assert p == pytest.approx(scipy_stats.mannwhitneyu(rising[:50], rising[50:]).pvalue)


def test_instability_reasons():
    rng = np.random.default_rng(2)
    stable = 0.1 + rng.normal(0, 0.0005, 100)
    assert instability_reasons(stable, summarize(stable, 8), ci_target=0.01) == []
    noisy = 0.1 * rng.lognormal(0, 0.4, 100)
    reasons = instability_reasons(noisy, summarize(noisy, 8), ci_target=0.01)
    assert any("coefficient of variation" in r for r in reasons)
    assert any("wider than the target" in r for r in reasons)
    few = [0.1, 0.1]
    assert any("only 2" in r for r in instability_reasons(few, summarize(few, 8)))
