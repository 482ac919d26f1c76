"""A case's result from its runs (trainperf.case.result), on synthetic run documents."""

import statistics

import pytest

from trainperf.case import result as case_result
from trainperf.case.outcome import Outcome
from trainperf.measure.hierarchy import mean_interval
from trainperf.measure.runs import AdaptiveRuns, FixedRuns

CASE = {"model": "cifarnet", "batch_size": 8, "steps": "fixed:1:30", "runs": 3}


def run(number, step_s, **metrics):
    """A worker's ok document with these step times (batch 8)."""
    return {
        "result_schema": case_result.RUN_SCHEMA,
        "status": "ok",
        "case": CASE | {"steps": "fixed:1:10"},
        "device": {"type": "cpu", "name": "test cpu"},
        "metrics": {
            "samples_per_s_median": 8 / statistics.median(step_s),
            "step_s": list(step_s),
            "global_batch": 8,
            "steps_warmup": 1,
            "measure_elapsed_s": sum(step_s),
            "stop_reason": "fixed_steps",
            "cv": statistics.stdev(step_s) / statistics.mean(step_s),
            "train_flops_per_sample": 1e9,
        }
        | metrics,
        "error": None,
        "run_number": number,
    }


RUNS = [
    run(1, [0.10, 0.11, 0.10, 0.09, 0.10]),
    run(2, [0.08, 0.08, 0.09, 0.08, 0.08]),
    run(3, [0.10, 0.10, 0.10, 0.11, 0.10]),
]


def test_throughput_is_the_mean_of_the_runs_with_a_between_run_interval():
    result = case_result.combine(CASE, RUNS, "fixed_runs", FixedRuns(3))
    m = result["metrics"]
    estimates = [80.0, 100.0, 80.0]
    assert m["run_samples_per_s"] == pytest.approx(estimates)
    assert m["samples_per_s_median"] == pytest.approx(statistics.mean(estimates))
    expected = mean_interval(estimates)
    assert m["samples_per_s_ci95"] == pytest.approx([expected.low, expected.high])
    assert m["ci95_relative"] == pytest.approx(expected.relative_half_width)
    assert m["runs"] == 3 and m["runs_stop_reason"] == "fixed_runs" and m["runs_policy"] == "3"
    assert m["steps_measured"] == 15 and m["steps_warmup"] == 3
    all_steps = [t for r in RUNS for t in r["metrics"]["step_s"]]
    assert m["samples_per_s_mean"] == pytest.approx(8 * 15 / sum(all_steps))
    assert m["achieved_tflops"] == pytest.approx(m["samples_per_s_median"] * 1e9 / 1e12)
    assert m["between_run_cv"] > m["within_run_cv"] > 0  # run 2 is clearly faster
    assert m["runs_needed"] > 3
    assert result["case"] == CASE and result["status"] == "ok"
    assert result["result_schema"] == case_result.RESULT_SCHEMA


def test_runs_that_disagree_beyond_their_noise_make_it_unstable():
    disagree = [
        run(i + 1, [t * f for t in (0.1, 0.1001, 0.0999, 0.1, 0.1)])
        for i, f in enumerate((1.0, 1.2, 0.9))
    ]
    result = case_result.combine(CASE, disagree, "max_runs", AdaptiveRuns(0.02, 3, 100))
    reasons = result["metrics"]["unstable_reasons"]
    assert result["metrics"]["unstable"]
    assert any(r.startswith("runs disagree beyond their own step noise") for r in reasons)
    assert any(r.startswith("between-run 95% CI") and "target ±2.0%" in r for r in reasons)
    agree = [run(i + 1, [0.1, 0.1001, 0.0999, 0.1, 0.1]) for i in range(3)]
    calm = case_result.combine(CASE, agree, "ci_target", AdaptiveRuns())
    assert calm["metrics"]["unstable_reasons"] == []


def test_a_single_run_has_no_between_run_interval_and_says_so():
    result = case_result.combine(CASE | {"runs": 1}, RUNS[:1], "fixed_runs", FixedRuns(1))
    m = result["metrics"]
    assert m["samples_per_s_ci95"] is None and m["ci95_relative"] is None
    assert m["ci95_absent_reason"].startswith("a single run: no between-run interval")
    assert m["runs"] == 1 and m["runs_needed"] is None and m["between_run_cv"] is None


def test_energy_over_the_runs_that_read_it():
    metered = [
        run(1, [0.1] * 4, energy_j_total=40.0, average_power_w=100.0, energy_complete=True),
        run(2, [0.1] * 4, energy_j_total=48.0, average_power_w=120.0, energy_complete=True),
    ]
    for r in metered:
        r["metrics"]["measure_elapsed_s"] = 0.4
    m = case_result.combine(CASE, metered, "fixed_runs", FixedRuns(2))["metrics"]
    assert m["average_power_w"] == pytest.approx(88 / 0.8)
    assert m["energy_per_sample_j"] == pytest.approx(88 / 64)
    assert m["run_average_power_w"] == [100.0, 120.0] and m["energy_complete"]
    assert m["average_power_w_ci95"] is not None
    unmetered = [run(1, [0.1] * 4, energy_absent_reason="no RAPL", energy_complete=False)]
    m = case_result.combine(CASE, unmetered, "fixed_runs", FixedRuns(1))["metrics"]
    assert m["average_power_w"] is None and m["energy_absent_reason"] == "no RAPL"


def test_gpu_window_means_are_averaged_over_runs_or_absent_with_the_reason():
    sampled = [
        run(1, [0.1] * 4, sm_clock_mhz_mean=1800.0, gpu_power_w_mean=600.0),
        run(2, [0.1] * 4, sm_clock_mhz_mean=1700.0, gpu_power_w_mean=500.0),
    ]
    m = case_result.combine(CASE, sampled, "fixed_runs", FixedRuns(2))["metrics"]
    assert m["sm_clock_mhz_mean"] == 1750.0 and m["gpu_power_w_mean"] == 550.0
    assert "window_absent_reason" not in m
    gap = "gpu1: no clock or power sample"
    sampled[1]["metrics"] |= {"gpu_power_w_mean": None, "window_absent_reason": gap}
    m = case_result.combine(CASE, sampled, "fixed_runs", FixedRuns(2))["metrics"]
    assert m["gpu_power_w_mean"] is None and m["window_absent_reason"] == gap
    assert m["sm_clock_mhz_mean"] == 1750.0
    cpu = case_result.combine(CASE, RUNS, "fixed_runs", FixedRuns(3))["metrics"]
    assert "sm_clock_mhz_mean" not in cpu and "window_absent_reason" not in cpu


def gpu_run(number, capped=1.0, thermal=0.0, clock_cv=0.005, **metrics):
    """A run on an H100 at its power cap for ``capped`` of the window."""
    shares = {"sw_power_cap": capped} | ({"hw_thermal_slowdown": thermal} if thermal else {})
    return run(
        number,
        [0.1] * 4,
        throttled=bool(thermal),
        throttle_reasons=["hw_thermal_slowdown"] if thermal else [],
        clocks_event_shares=shares,
        power_capped_share=capped,
        violation_shares={"power_cap": capped, "thermal": 0.0},
        sm_clock_cv=clock_cv,
        **metrics,
    )


def test_a_gpu_at_its_power_cap_is_a_condition_not_instability():
    m = case_result.combine(CASE, [gpu_run(1), gpu_run(2, capped=0.5)], "fixed_runs", FixedRuns(2))
    m = m["metrics"]
    assert m["power_capped_share"] == 0.75 and m["clocks_event_shares"] == {"sw_power_cap": 0.75}
    assert m["violation_shares"] == {"power_cap": 0.75, "thermal": 0.0}
    assert m["throttled"] is False and m["sm_clock_cv"] == 0.005
    assert m["unstable"] is False and m["unstable_reasons"] == []


def test_a_thermal_slowdown_or_a_varying_clock_in_any_run_makes_the_result_unstable():
    runs = [gpu_run(1, thermal=0.6), gpu_run(2, clock_cv=0.08)]
    m = case_result.combine(CASE, runs, "fixed_runs", FixedRuns(2))["metrics"]
    assert m["throttled"] is True and m["throttle_reasons"] == ["hw_thermal_slowdown"]
    assert m["sm_clock_cv"] == 0.08
    assert m["unstable_reasons"] == [
        "thermal slowdown (hw_thermal_slowdown) 30% of the window",
        "SM clock varied 8.0% during the window (coefficient of variation, above 2%)",
    ]


def test_runs_stored_before_the_classification_stay_readable():
    # Runs of an earlier trainperf: a power cap was "throttled", nothing else was stored.
    old = [
        run(1, [0.1] * 4, throttled=True, throttle_reasons=["power_cap_violation", "sw_power_cap"]),
        run(2, [0.1] * 4, throttled=True, throttle_reasons=["hw_slowdown", "sw_power_cap"]),
    ]
    m = case_result.combine(CASE, old[:1], "fixed_runs", FixedRuns(1))["metrics"]
    assert m["throttled"] is False and m["unstable_reasons"] == []
    assert (
        m["power_capped_share"] is None and "not recorded" in m["power_capped_share_absent_reason"]
    )
    m = case_result.combine(CASE, old, "fixed_runs", FixedRuns(2))["metrics"]
    assert m["throttle_reasons"] == ["hw_slowdown"]
    assert m["unstable_reasons"] == ["hardware slowdown (hw_slowdown)"]


def test_a_failed_run_ends_the_case_and_names_the_run():
    crash = {
        "status": "crashed",
        "case": CASE,
        "device": None,
        "metrics": {},
        "error": {"type": "crashed", "message": "killed by signal SIGKILL"},
        "run_number": 3,
    }
    result = Outcome.failed_run(CASE, RUNS[:2], crash).document()
    assert result["status"] == "crashed" and result["metrics"] == {}
    assert result["error"]["message"] == "killed by signal SIGKILL (run 3; 2 earlier runs ok)"
    assert result["error"]["run"] == 3
    first = Outcome.failed_run(CASE, [], crash | {"run_number": 1}).document()
    assert first["error"]["message"] == "killed by signal SIGKILL"


def test_a_result_from_before_runs_becomes_a_one_run_result_with_nothing_dropped():
    old = {
        "result_schema": 1,
        "status": "ok",
        "case": {"model": "cifarnet", "batch_size": 8},
        "device": {"type": "cpu"},
        "metrics": RUNS[0]["metrics"] | {"samples_per_s_ci95": [70.0, 90.0], "ranks": [1, 2]},
        "error": None,
    }
    result, one = case_result.from_legacy(old)
    assert one["metrics"] == old["metrics"] and one["run_number"] == 1
    assert result["case"] == old["case"] | {"runs": 1}
    assert result["metrics"]["samples_per_s_median"] == old["metrics"]["samples_per_s_median"]
    assert result["metrics"]["samples_per_s_ci95"] is None  # the old one was within a process
    skipped = old | {"status": "skipped", "metrics": {}, "error": {"message": "no cuda"}}
    assert case_result.from_legacy(skipped)[1] is None
    crashed = old | {"status": "crashed", "metrics": {}, "error": {"stderr_tail": "x"}}
    result, one = case_result.from_legacy(crashed)
    assert result["status"] == one["status"] == "crashed" and result["error"]["run"] == 1
    uid = case_result.legacy_run_uid("ab" * 16)
    assert uid == case_result.legacy_run_uid("ab" * 16) and len(uid) == 32
