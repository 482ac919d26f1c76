"""Olympic mean: MLPerf's drop-the-fastest-and-the-slowest average, failed runs included."""

from __future__ import annotations

import math

import pytest

from trainperf.convergence.olympic import olympic_mean


def test_drops_the_fastest_and_the_slowest() -> None:
    result = olympic_mean([4, 1, 100, 3, 2])
    assert result["olympic_mean_s"] == 3.0
    assert result["kept_s"] == [2.0, 3.0, 4.0]
    assert result["dropped_s"] == {"fastest": 1.0, "slowest": 100.0}
    assert result["mean_s"] == 22.0
    assert result["count"] == 5 and result["failed"] == 0
    assert "olympic_mean_s_absent_reason" not in result


@pytest.mark.parametrize("times", [[], [5.0], [5.0, 6.0]])
def test_fewer_than_three_runs_is_absent(times: list[float]) -> None:
    result = olympic_mean(times)
    assert result["olympic_mean_s"] is None
    assert "at least 3" in result["olympic_mean_s_absent_reason"]
    assert result["count"] == len(times)
    assert result["mean_s"] == (sum(times) / len(times) if times else None)


@pytest.mark.parametrize("failure", [None, math.inf])
def test_one_failed_run_is_the_slowest_dropped(failure: float | None) -> None:
    result = olympic_mean([10.0, failure, 12.0, 11.0, 14.0])
    assert result["failed"] == 1
    assert result["olympic_mean_s"] == pytest.approx((11.0 + 12.0 + 14.0) / 3)
    assert result["dropped_s"] == {"fastest": 10.0, "slowest": None}
    assert result["mean_s"] == pytest.approx(47.0 / 4)


def test_two_failed_runs_make_the_result_absent() -> None:
    result = olympic_mean([10.0, None, 12.0, math.inf, 14.0])
    assert result["olympic_mean_s"] is None
    assert result["failed"] == 2
    assert "2 of 5 runs did not reach the target" in result["olympic_mean_s_absent_reason"]
    assert result["mean_s"] == 12.0


@pytest.mark.parametrize("bad", [-1.0, math.nan, -math.inf])
def test_not_a_duration_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="run 1"):
        olympic_mean([1.0, bad, 3.0])
