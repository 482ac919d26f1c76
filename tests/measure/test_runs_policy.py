"""Run policies: how many runs measure a case, and each run's share of the step budget."""

import pytest

from trainperf.measure.policy import parse_policy
from trainperf.measure.runs import (
    MIN_RUNS,
    STOP_FIXED_RUNS,
    STOP_MAX_RUNS,
    STOP_RUNS_CI,
    STOP_RUNS_TIME,
    AdaptiveRuns,
    FixedRuns,
    RunsError,
    parse_runs,
    share_steps,
)


@pytest.mark.parametrize(
    "value, policy",
    [
        (1, FixedRuns(1)),
        ("5", FixedRuns(5)),
        ("adaptive", AdaptiveRuns()),
        ("adaptive:0.05", AdaptiveRuns(0.05)),
        ("adaptive:0.01:20:600", AdaptiveRuns(0.01, 20, 600.0)),
    ],
)
def test_parse(value, policy):
    assert parse_runs(value) == policy
    assert parse_runs(str(policy)) == policy  # round trip


@pytest.mark.parametrize(
    "value, message",
    [
        (0, "must be at least 1"),
        ("-2", "must be at least 1"),
        ("abc", r"not valid: allowed N \(a positive integer\) or adaptive"),
        ("adaptive:x", "not valid"),
        ("adaptive:1.5", "TARGET must be between 0 and 1"),
        ("adaptive:0.02:2", "MAX_RUNS must be at least 3"),
        ("adaptive:0.02:5:0", "MAX_SECONDS positive"),
    ],
)
def test_bad_policies_say_what_is_allowed(value, message):
    with pytest.raises(RunsError, match=message):
        parse_runs(value)


def test_fixed_runs_stop_at_their_count():
    policy = FixedRuns(2)
    assert policy.planned == 2 and policy.target is None
    assert policy.done([10.0], 5.0) is None
    assert policy.done([10.0, 11.0], 1e9) == STOP_FIXED_RUNS


def test_adaptive_runs_need_the_minimum_then_the_target_or_a_budget():
    policy = AdaptiveRuns(target=0.02, max_runs=5, max_seconds=100)
    assert policy.planned == MIN_RUNS == 3
    assert policy.done([100.0, 100.0], 1.0) is None  # below the minimum, even if tight
    assert policy.done([100.0, 100.5, 99.5], 30.0) == STOP_RUNS_CI
    noisy = [100.0, 120.0, 90.0]
    assert policy.done(noisy, 30.0) is None  # ±27%: another run, 40 s of 100 expected
    assert policy.done(noisy, 80.0) == STOP_RUNS_TIME  # one more would end past 100 s
    assert policy.done([*noisy, 110.0, 95.0], 50.0) == STOP_MAX_RUNS


def test_fixed_steps_are_shared_measured_steps_not_warmup():
    assert share_steps("fixed:10:100", FixedRuns(1)) == "fixed:10:100"
    assert share_steps("fixed:10:100", FixedRuns(3)) == "fixed:10:34"
    assert share_steps("fixed:2:8", AdaptiveRuns()) == "fixed:2:3"
    assert share_steps("fixed:0:1", FixedRuns(5)) == "fixed:0:1"


def test_adaptive_steps_share_steps_and_seconds():
    shared = parse_policy(share_steps("adaptive:0.02:500:15", AdaptiveRuns()))
    assert (shared.ci_target, shared.max_steps, shared.max_seconds) == (0.02, 167, 5.0)
    few = parse_policy(share_steps("adaptive:0.02:15:9", FixedRuns(3)))
    assert (few.max_steps, few.min_steps, few.max_seconds) == (5, 5, 3.0)
    tiny = parse_policy(share_steps("adaptive:0.01:10:6", FixedRuns(10)))
    assert tiny.max_steps == 3  # never below what a within-run variance needs
