"""The pairing of benchmarks/predict_vs_measured.py: each 2-rank run against the one-process
runs on either side of it (its module doc, 4), so that a machine drifting between runs moves
both sides of each round's efficiency alike."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "predict_vs_measured.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("predict_vs_measured", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def result(samples_per_s: float | None) -> dict | None:
    return None if samples_per_s is None else {"metrics": {"samples_per_s_median": samples_per_s}}


def test_a_drifting_machine_cancels_out_of_each_round(bench):
    # The machine speeds up 10% a run; each 2-rank run scales at 0.8 of the one-process rate
    # of its moment, which is the mean of the one-process runs either side of it.
    one = [10.0 * 1.1 ** (2 * i) for i in range(4)]  # runs 0, 2, 4, 6
    two = [2 * 0.8 * (a + b) / 2 for a, b in zip(one, one[1:], strict=False)]  # runs 1, 3, 5
    rounds = bench.Rounds([result(x) for x in one], [result(x) for x in two])
    read = bench.Reader()
    assert rounds.efficiencies(read) == pytest.approx([0.8] * 3)
    mean, interval = bench.measured_efficiency(rounds, read)
    assert mean == pytest.approx(0.8) and interval.low == pytest.approx(0.8)


def test_a_failed_run_drops_only_the_rounds_it_bounds(bench):
    read = bench.Reader()
    rounds = bench.Rounds([result(10), result(None), result(10), result(10)],
                          [result(16), result(15), result(14)])  # fmt: skip
    assert rounds.efficiencies(read) == pytest.approx([0.7])  # rounds 0 and 1 lack a side
    assert bench.measured_efficiency(rounds, read)[1] is None  # one round: no interval
    rounds = bench.Rounds([result(10), result(10)], [None])
    assert rounds.efficiencies(read) == [] and bench.measured_efficiency(rounds, read)[0] is None


def test_means_over_runs_skip_a_missing_key(bench):
    read = bench.Reader()
    rounds = bench.Rounds(ddp=[{"metrics": {"step_s_median": 2.0}}, {"metrics": {}},
                               {"metrics": {"step_s_median": 4.0}}])  # fmt: skip
    mean, interval = rounds.mean_of("ddp", "step_s_median", read)
    assert mean == 3.0 and interval is not None and math.isfinite(interval.high)
    assert "run ddp: metrics.step_s_median" in read.missing
