"""The arithmetic of benchmarks/ddp_bucket_timeline.py on a timeline made by hand: the
backward's stretch to its last bucket, the tail, each bucket's all-reduce against the same
bytes alone, and whether it was handed over while the one before it still ran."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ddp_bucket_timeline.py"
MIB = 2**20


@pytest.fixture(scope="module")
def timeline():
    spec = importlib.util.spec_from_file_location("ddp_bucket_timeline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def step(backward_s: float, buckets: list[tuple[float, float, int]], step_s: float) -> dict:
    return {"forward_s": 0.1, "backward_s": backward_s, "step_s": step_s, "buckets": buckets}


def test_the_summary_of_a_timeline_made_by_hand(timeline):
    # Two buckets: 1 MiB handed over at 10 ms, 4 MiB at 300 ms. In the second step the
    # 1 MiB one's all-reduce outlasts the 4 MiB one's hand-over (gloo's two threads).
    sync = [
        step(0.400, [(0.300, 0.380, 4 * MIB), (0.010, 0.030, MIB)], 0.600),
        step(0.420, [(0.010, 0.330, MIB), (0.320, 0.410, 4 * MIB)], 0.640),
        step(0.380, [(0.010, 0.040, MIB), (0.280, 0.350, 4 * MIB)], 0.580),
    ]
    alone = [step(b, [], s) for b, s in ((0.250, 0.450), (0.260, 0.470), (0.240, 0.440))]
    # Through JSON, as the ranks write it: the lockstep sizes come back as lists.
    doc = json.loads(json.dumps({"steps": {"sync": sync, "no_sync": alone}, "lockstep": [
        (MIB, 0.010), (4 * MIB, 0.040)]}))  # fmt: skip
    summary = timeline.summarize(doc)
    assert summary["steps"] == (3, 3)
    assert summary["step_s"] == pytest.approx((0.600, 0.450))
    assert summary["to_last_bucket_s"] == pytest.approx(0.300)  # median of 300, 320, 280 ms
    assert summary["backward_ratio"] == pytest.approx(0.300 / 0.250)
    assert summary["tail_s"] == pytest.approx(0.100)  # 400-300, 420-320, 380-280 ms
    first, second = summary["buckets"]
    assert first["bytes"] == MIB and second["bytes"] == 4 * MIB  # in hand-over order
    assert first["in_step_s"] == pytest.approx(0.030)  # median of 20, 320, 30 ms
    assert first["ratio"] == pytest.approx(3.0) and first["behind"] == 0
    assert second["handed_over_s"] == pytest.approx(0.300)
    assert second["in_step_s"] == pytest.approx(0.080)  # median of 80, 90, 70 ms
    assert second["ratio"] == pytest.approx(2.0)
    assert second["behind"] == 1  # the second step: the 1 MiB one ran until 330 ms
