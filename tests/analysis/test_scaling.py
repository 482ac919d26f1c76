"""Speedup and efficiency with intervals from the runs of both results."""

from itertools import count

import numpy as np
import pytest

from trainperf.analysis.scaling import scaling_rows
from trainperf.measure.hierarchy import ratio_interval

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


def test_a_speedup_above_linear_marks_the_row_unstable_with_the_reason():
    # The 1-device baseline measured under load: 2 runs a side, 13x on 2 devices.
    one, two = [30.0, 28.0], [388.0, 389.2]
    (row,) = [r for r in scaling_rows([result(1, one), result(2, two)]) if r["devices"] == 2]
    assert row["speedup"] == pytest.approx(13.4) and row["unstable"]
    (reason,) = row["unstable_reasons"]
    assert reason.startswith("speed-up 13.40x on 2 devices: above linear;")
    assert "measured under load" in reason
    assert row["baseline_runs"] == 2 and row["runs"] == 2
    assert row["efficiency_ci95"][0] >= 0 and row["speedup_ci95"][0] >= 0  # clamped, kept


def test_above_linear_within_its_interval_is_not_flagged():
    one, two = [100.0, 80.0, 120.0], [205.0, 190.0, 215.0]  # 2.03x, interval reaching 100%
    (row,) = [r for r in scaling_rows([result(1, one), result(2, two)]) if r["devices"] == 2]
    assert row["efficiency"] > 1 and row["efficiency_ci95"][0] <= 1
    assert not row["unstable"] and row["unstable_reasons"] == []
    # Above its interval with 3 runs a side: flagged, the interval in the reason.
    two = [260.0, 262.0, 258.0]
    one = [100.0, 101.0, 99.0]
    (row,) = [r for r in scaling_rows([result(1, one), result(2, two)]) if r["devices"] == 2]
    assert row["unstable"] and "95% interval" in row["unstable_reasons"][0]


def test_the_scaling_table_says_n_a_for_2_runs_and_shows_the_flag():
    import io

    from rich.console import Console

    from trainperf.report.tables import scaling_table

    rows = scaling_rows([result(1, [30.0, 28.0]), result(2, [388.0, 389.2])])
    console = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    console.print(scaling_table(rows, width=100))
    lines = console.export_text().splitlines()
    assert all(len(line.rstrip()) <= 100 for line in lines) and "…" not in "".join(lines)
    text = " ".join(" ".join(lines).split())
    assert "13.40" in text and "670.0%" in text and "n/a (2 runs)" in text
    assert "0.00-inf" not in text and "unstable:" in text
    words = text.split()  # the status wraps beside the setting: its words, in order
    reason = ["speed-up", "13.40x", "on", "2", "devices:", "above", "linear;"]
    found = [w for w in words[words.index("unstable:") :] if w in reason]
    assert found[: len(reason)] == reason
