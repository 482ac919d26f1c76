import math

import pytest

from trainperf.case.schedule import ScheduleError, parse_schedule


def test_piecewise_switches_at_each_boundary():
    s = parse_schedule("piecewise:0.1@0,0.01@30,0.001@60")
    assert s.lr_at(0, 90) == 0.1
    assert s.lr_at(29.999, 90) == 0.1
    assert s.lr_at(30, 90) == 0.01
    assert s.lr_at(59.5, 90) == 0.01
    assert s.lr_at(60, 90) == 0.001
    assert s.lr_at(90, 90) == 0.001
    assert s.base_lr == 0.1


def test_piecewise_accepts_fractional_epochs_and_spaces():
    s = parse_schedule(" piecewise: 0.2@0, 0.02@1.5 ")
    assert s.lr_at(1.49, 3) == 0.2 and s.lr_at(1.5, 3) == 0.02


def test_cosine_endpoints_and_midpoint():
    s = parse_schedule("cosine")
    assert s.lr_at(0, 90) == pytest.approx(0.1)
    assert s.lr_at(45, 90) == pytest.approx(0.05)
    assert s.lr_at(90, 90) == pytest.approx(0.0, abs=1e-12)
    assert s.lr_at(100, 90) == pytest.approx(0.0, abs=1e-12)  # clamped past the end
    assert parse_schedule("cosine:0.4").lr_at(0, 10) == pytest.approx(0.4)


def test_constant():
    s = parse_schedule("constant:0.05")
    assert s.lr_at(0, 5) == s.lr_at(4.9, 5) == 0.05


def test_warmup_ramps_linearly_from_zero_to_the_scheduled_lr():
    s = parse_schedule("piecewise:0.4@0,0.04@10", warmup_epochs=5)
    assert s.lr_at(0, 20) == 0.0
    assert s.lr_at(1, 20) == pytest.approx(0.08)
    assert s.lr_at(2.5, 20) == pytest.approx(0.2)
    assert s.lr_at(5, 20) == pytest.approx(0.4)
    assert s.lr_at(10, 20) == pytest.approx(0.04)
    ramp = [s.lr_at(e / 10, 20) for e in range(51)]
    assert ramp == sorted(ramp)


def test_warmup_scales_the_cosine_curve():
    s = parse_schedule("cosine:0.2", warmup_epochs=2)
    cosine = 0.2 * (1 + math.cos(math.pi * 1 / 10)) / 2
    assert s.lr_at(1, 10) == pytest.approx(cosine / 2)
    assert s.lr_at(2, 10) == pytest.approx(parse_schedule("cosine:0.2").lr_at(2, 10))


def test_describe():
    s = parse_schedule("piecewise:0.1@0,0.01@30", warmup_epochs=2.5)
    assert s.describe() == {
        "name": "piecewise",
        "boundaries": [0.0, 30.0],
        "lrs": [0.1, 0.01],
        "warmup_epochs": 2.5,
    }
    assert parse_schedule("cosine").describe()["lrs"] == [0.1]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "step:0.1",
        "piecewise",
        "piecewise:",
        "piecewise:0.1",
        "piecewise:0.1@5",
        "piecewise:0.1@0,0.01@0",
        "piecewise:0.1@0,0.01@30,0.001@20",
        "piecewise:x@0",
        "piecewise:0.1@soon",
        "piecewise:0@0",
        "piecewise:-0.1@0",
        "piecewise:0.1@0,inf@3",
        "cosine:0",
        "cosine:abc",
        "constant",
        "constant:",
        "constant:nan",
    ],
)
def test_bad_text_says_what_is_allowed(text):
    with pytest.raises(ScheduleError, match="allowed: piecewise") as info:
        parse_schedule(text)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("warmup", [-1.0, math.nan])
def test_bad_warmup(warmup):
    with pytest.raises(ScheduleError, match="warmup_epochs"):
        parse_schedule("cosine", warmup)
