"""The types of the metrics an import takes (trainperf.store.exchange_metrics)."""

import pytest

from trainperf.store.exchange_metrics import METRIC_KINDS, metric_kind, metric_type_problem


@pytest.mark.parametrize("key", [*METRIC_KINDS, "mfu_absent_reason", "x_ci95", "x_bytes"])
def test_every_known_metric_may_be_absent(key):
    assert metric_kind(key) is not None
    assert metric_type_problem({key: None}) is None


@pytest.mark.parametrize(
    ("metrics", "key", "expected"),
    [
        ({"runs": True}, "runs", "an integer >= 1"),  # a bool is not a count
        ({"runs": 2.0}, "runs", "an integer >= 1"),
        ({"steps_warmup": -1}, "steps_warmup", "an integer >= 0"),
        ({"runs_differ_p": 1.5}, "runs_differ_p", "a number from 0 to 1"),
        ({"unstable_reasons": ["a", 3]}, "unstable_reasons", "an array of text"),
        ({"run_average_power_w": [1.0, -2.0]}, "run_average_power_w", "numbers >= 0 or null"),
        ({"average_power_w_ci95": [1.0, None]}, "average_power_w_ci95", "[low, high]"),
        ({"cv_absent_reason": 0}, "cv_absent_reason", "text"),
        ({"mem_params_bytes": 1.5}, "mem_params_bytes", "an integer >= 0"),
    ],
)
def test_a_metric_of_another_type_is_named(metrics, key, expected):
    found = metric_type_problem(metrics)
    assert found is not None and found[0] == key and expected in found[1]


def test_what_trainperf_writes_passes_and_unknown_keys_travel_unchecked():
    metrics = {
        "runs": 3,
        "samples_per_s_ci95": [9.5, 10.5],
        "run_average_power_w": [None, 120.0],
        "run_stop_reasons": ["steps", None],
        "comm_exposed_s": -0.001,  # a difference of medians: noise may make it negative
        "final_loss": -3.2,
        "unstable": False,
        "a_key_of_a_later_trainperf": {"any": "shape"},
    }
    assert metric_type_problem(metrics) is None
