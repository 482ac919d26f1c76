"""The split of a run's wall-clock time (trainperf.convergence.time_split)."""

import pytest

from trainperf.convergence.time_split import PARTS, time_split
from trainperf.core import strict_json

EPOCHS = [{"data_wait_s": 0.5}, {"data_wait_s": 0.25}]
EVALUATIONS = [{"eval_s": 1.0}, {"eval_s": 1.5}]


def test_the_parts_add_up_to_start_up_and_the_clock():
    split = time_split(2.0, "process launch", 10.0, True, EPOCHS, EVALUATIONS)
    assert split["until"] == "target" and split["total_s"] == 12.0
    assert (split["data_loading_s"], split["evaluation_s"]) == (0.75, 2.5)
    assert split["training_s"] == 10.0 - 0.75 - 2.5
    assert sum(split[k] for k in PARTS) == pytest.approx(split["total_s"])


def test_a_start_up_the_wall_clock_cannot_give_is_absent_with_its_reason():
    split = time_split(-0.3, "process launch", 10.0, False, EPOCHS, EVALUATIONS)
    assert split["until"] == "end"
    assert split["startup_s"] is None and split["total_s"] is None
    assert "stepped back 0.300 s" in split["startup_s_absent_reason"]
    assert split["total_s_absent_reason"] == split["startup_s_absent_reason"]
    assert split["training_s"] == 10.0 - 0.75 - 2.5  # the parts after run start stay
    strict_json.dumps(split)  # strict JSON: no NaN stands in for what is absent
