import numpy as np
import pytest

from trainperf.measure.policy import (
    STOP_CI,
    STOP_FIXED,
    STOP_MAX_STEPS,
    STOP_TIME,
    WARMUP_BUDGET,
    WARMUP_STABLE,
    AdaptivePolicy,
    FixedPolicy,
    PolicyError,
    parse_policy,
)
from trainperf.measure.timed_steps import measure_steps


class SeriesTimer:
    """A timer whose windows last as long as a synthetic series says (no real time)."""

    def __init__(self, series):
        self.series = iter(series)
        self.done: list[float] = []
        self.open = False

    def start(self):
        self.open = True

    def stop(self):
        self.open = False
        self.done.append(next(self.series))

    def durations(self):
        return list(self.done)

    def reset(self):
        self.done.clear()


def run_series(policy, series):
    timer = SeriesTimer(series)
    calls = []

    def step():
        calls.append(1)

    clock_state = {"t": 0.0}

    def clock():
        return clock_state["t"]

    original_stop = timer.stop

    def stop():
        original_stop()
        clock_state["t"] += timer.done[-1]

    timer.stop = stop
    record = measure_steps(step, policy, timer, clock=clock)
    return record, len(calls)


@pytest.mark.parametrize("warmup,measured", [(0, 1), (3, 7), (10, 100)])
def test_fixed_policy_runs_exactly_w_plus_n_steps(warmup, measured):
    record, calls = run_series(FixedPolicy(warmup, measured), iter(lambda: 0.01, None))
    assert calls == warmup + measured
    assert len(record.warmup_s) == warmup
    assert len(record.step_s) == measured
    assert record.stop_reason == STOP_FIXED


def test_adaptive_stops_on_ci_for_a_stable_series():
    rng = np.random.default_rng(0)
    series = [5.0] + list(0.1 + rng.normal(0, 0.001, 10_000))
    record, calls = run_series(AdaptivePolicy(), series)
    assert record.warmup_reason == WARMUP_STABLE
    assert len(record.warmup_s) == 7  # step 0 plus two windows of 3
    assert record.stop_reason == STOP_CI
    assert 10 <= len(record.step_s) <= 20


def test_adaptive_warmup_waits_for_drift_to_end():
    # 40 steps shrinking from 1.0 s (say, a cache warming up), then flat at 0.1 s.
    settling = list(np.geomspace(1.0, 0.1, 40))
    series = settling + [0.1] * 1000
    record, _ = run_series(AdaptivePolicy(drift=0.02, max_seconds=1e9), series)
    assert record.warmup_reason == WARMUP_STABLE
    assert len(record.warmup_s) >= 35  # not fooled while the time still falls
    assert record.stop_reason == STOP_CI


def test_adaptive_noisy_series_ends_on_a_budget():
    rng = np.random.default_rng(3)
    noisy = list(0.1 * rng.lognormal(0, 1.0, 100_000))
    record, _ = run_series(AdaptivePolicy(max_steps=200, max_seconds=1e9), noisy)
    assert record.stop_reason == STOP_MAX_STEPS
    assert len(record.step_s) == 200

    record, _ = run_series(AdaptivePolicy(max_steps=100_000, max_seconds=5.0), noisy)
    assert record.stop_reason == STOP_TIME
    # the loop aims its checks at the budget instead of overshooting it by a quarter
    assert record.measure_elapsed_s < 5.0 * 1.25


def test_adaptive_warmup_budget_for_a_drifting_series():
    drifting = list(np.linspace(1.0, 2.0, 1000))  # never settles
    record, _ = run_series(
        AdaptivePolicy(drift=0.001, max_warmup_steps=20, max_seconds=1e9), drifting
    )
    assert record.warmup_reason == WARMUP_BUDGET
    assert len(record.warmup_s) == 20


def test_parse_policy_forms():
    assert parse_policy("fixed:10:100") == FixedPolicy(10, 100)
    assert parse_policy("adaptive") == AdaptivePolicy()
    p = parse_policy("adaptive:0.02:500:15")
    assert (p.ci_target, p.max_steps, p.max_seconds) == (0.02, 500, 15.0)
    assert str(p) == "adaptive:0.02:500:15"


@pytest.mark.parametrize(
    "text",
    ["fixed", "fixed:10", "fixed:1:0", "adaptive:2", "adaptive:0.01:2", "bogus", "fixed:-1:3"],
)
def test_parse_policy_rejects(text):
    with pytest.raises(PolicyError, match="steps"):
        parse_policy(text)


def test_an_adaptive_policy_of_few_steps_measures_them_all():
    # A run's share of a small budget: at least MAX_STEPS when that is under 10.
    p = parse_policy("adaptive:0.01:5:3")
    assert (p.max_steps, p.min_steps) == (5, 5)
    assert parse_policy("adaptive").min_steps == 10


@pytest.mark.parametrize(
    "steps,timeout_s",
    [
        # 600 + 2 x (1.25 x 20 + 120 x (2 + 10 + 2)): the default adaptive, shared by 3 runs
        ("adaptive:0.01:334:20", 4010.0),
        ("fixed:10:100", 600 + 2 * 120 * 111),
        ("fixed:0:1", 600 + 2 * 120 * 2),
    ],
)
def test_default_timeout_bounds_what_the_policy_can_spend(steps, timeout_s):
    from trainperf.measure.policy import default_timeout_s

    assert default_timeout_s(parse_policy(steps)) == timeout_s


def test_default_timeout_is_at_most_a_year():
    """A budget of 1e300 s would be a timeout no process group can hold."""
    from trainperf.core.limits import TIMEOUT_S_MAX
    from trainperf.measure.policy import default_timeout_s

    assert default_timeout_s(parse_policy("adaptive:0.01:334:1e300")) == TIMEOUT_S_MAX


@pytest.mark.parametrize("text", ["fixed:٣:٣", "fixed:3:3\n", "adaptive\n", "adaptive:0.01:٣٣٤:20"])
def test_a_policy_is_ascii_digits_and_nothing_after_it(text):
    """Python's \\d takes other scripts' digits and "$" a final newline: the same policy
    would be stored under two spellings, one of them not one line."""
    with pytest.raises(PolicyError) as info:
        parse_policy(text)
    assert "\n" not in str(info.value) and "is not valid" in str(info.value)
