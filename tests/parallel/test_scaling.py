"""Speedup and efficiency with intervals from the runs of both results."""

from itertools import count

import numpy as np
import pytest

from trainperf.measure.hierarchy import ratio_interval
from trainperf.parallel.scaling import scaling_rows

_ids = count(1)


def result(devices, runs, scaling="weak"):
    case = {"model": "cifarnet", "batch_size": 8, "device": "cpu", "devices": devices}
    case |= {"scaling": scaling, "parallel": "ddp" if devices > 1 else "none"}
    metrics = {"samples_per_s_median": float(np.mean(runs)), "run_samples_per_s": list(runs)}
    return {
        "id": next(_ids),
        "status": "ok",
        "case": case,
        "metrics": metrics,
        "system": {"fingerprint": "f", "hostname": "h"},
    }


def test_speedup_and_efficiency_intervals_come_from_the_runs():
    one, four = [100.0, 104.0, 97.0], [330.0, 350.0, 341.0]
    rows = {r["devices"]: r for r in scaling_rows([result(1, one), result(4, four)])}
    row = rows[4]
    expected = ratio_interval(one, four)
    assert row["speedup"] == pytest.approx(np.mean(four) / np.mean(one))
    assert row["speedup_ci95"] == pytest.approx([expected.low, expected.high])
    assert row["efficiency_ci95"] == pytest.approx([expected.low / 4, expected.high / 4])
    assert row["efficiency_ci95"][0] < row["efficiency"] < row["efficiency_ci95"][1]
    assert row["runs"] == 3 and rows[1]["speedup"] == pytest.approx(1)


def test_a_single_run_on_a_side_gives_no_interval_and_says_why():
    single = result(1, [100.0])
    del single["metrics"]["run_samples_per_s"]  # a result from before runs existed
    (row,) = [r for r in scaling_rows([single, result(2, [180.0, 190.0])]) if r["devices"] == 2]
    assert row["speedup"] == pytest.approx(1.85) and row["speedup_ci95"] is None
    assert row["interval_absent_reason"] == "1 run on a side: an interval needs 2 on each"
