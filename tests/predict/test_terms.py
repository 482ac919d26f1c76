"""The measured terms of a data-parallel step, on inputs whose answers are known by hand."""

import math

import numpy as np
import pytest
from predict_inputs import predict_ddp

from trainperf import models
from trainperf.predict.comm import LinkCost, data_parallel_allreduce_s
from trainperf.predict.terms import (
    NO_NOISE,
    BusBandwidthCurve,
    Overhead,
    StepNoise,
    expected_max_empirical,
    expected_max_standard_normal,
    fit_overhead,
)

CIFARNET = models.get("cifarnet")


def test_expected_max_of_standard_normals():
    assert expected_max_standard_normal(1) == 0.0
    assert expected_max_standard_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-9)
    assert expected_max_standard_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-9)
    draws = np.random.default_rng(0).standard_normal((20_000, 8)).max(axis=1).mean()
    assert expected_max_standard_normal(8) == pytest.approx(draws, abs=0.02)  # about 1.424
    with pytest.raises(ValueError, match=">= 1"):
        expected_max_standard_normal(0)


def test_expected_max_of_the_empirical_distribution():
    # Two draws from {1, 2}: the max is 1 only if both are 1 (1/4), else 2: 1/4 + 3/2.
    assert expected_max_empirical([2.0, 1.0], 2) == pytest.approx(1.75)
    assert expected_max_empirical([1.0, 2.0, 3.0], 1) == pytest.approx(2.0)  # the mean
    assert expected_max_empirical([5.0] * 10, 512) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="no step times"):
        expected_max_empirical([], 2)


def test_no_jitter_no_straggler_cost():
    assert StepNoise(samples=(0.1,) * 50).straggler_s(512, 0.1) == pytest.approx(0.0, abs=1e-15)
    assert StepNoise(cv=0.0).straggler_s(512, 0.1) == 0.0
    assert NO_NOISE.straggler_s(512, 1.0) == 0.0
    assert StepNoise(cv=0.1).straggler_s(1, 1.0) == 0.0  # one rank waits for nobody


def test_noise_costs_more_at_512_ranks_than_at_8():
    noise = StepNoise(cv=0.05)
    at8, at512 = noise.straggler_s(8, 0.2), noise.straggler_s(512, 0.2)
    assert at8 == pytest.approx(0.05 * 0.2 * expected_max_standard_normal(8))
    assert at512 > 2 * at8
    # A measured sample: relative to its own mean, exact at small N, normal beyond 4x its size.
    measured = StepNoise(samples=(0.9, 1.0, 1.1, 1.0))
    assert measured.straggler_s(2, 2.0) == pytest.approx(
        2.0 * (expected_max_empirical([0.9, 1.0, 1.1, 1.0], 2) - 1.0)
    )
    sigma = float(np.std([0.9, 1.0, 1.1, 1.0], ddof=1))
    assert measured.straggler_s(64, 2.0) == pytest.approx(
        2.0 * sigma * expected_max_standard_normal(64)
    )


def test_overhead_model_and_fit():
    assert Overhead(0.01, 0.002).seconds(1) == 0.0
    assert Overhead(0.01, 0.002).seconds(8) == pytest.approx(0.016)
    found = fit_overhead([(n, 0.003 + 0.001 * math.log2(n)) for n in (2, 4, 16)])
    assert found.base_s == pytest.approx(0.003) and found.per_doubling_s == pytest.approx(0.001)
    one = fit_overhead([(2, 0.004), (2, 0.006)])
    assert (one.base_s, one.per_doubling_s) == (pytest.approx(0.005), 0.0)
    shrinking = fit_overhead([(2, 0.004), (8, 0.001)])  # noise, not physics: flat
    assert shrinking.per_doubling_s == 0.0 and shrinking.base_s == pytest.approx(0.0025)
    with pytest.raises(ValueError, match="2 or more ranks"):
        fit_overhead([(1, 0.1)])


def test_bus_bandwidth_curve_times_what_it_measured():
    rows = [(2, 1e6, 1e9), (2, 1e8, 1e10), (4, 1e6, 5e8), (4, 1e8, 1e10), (4, 1e8, 2e10)]
    curve = BusBandwidthCurve.from_rows(rows)
    assert curve.ranks == [2, 4]
    assert curve.busbw(1e8, 4) == pytest.approx(1.5e10)  # two rows of one size averaged
    assert curve.allreduce_s(1e8, 2) == pytest.approx(1e8 * 1.0 / 1e10)  # 2(p-1)/p = 1
    assert curve.busbw(1e7, 2) == pytest.approx(math.sqrt(1e9 * 1e10))  # log-log midpoint
    assert curve.busbw(1e9, 2) == 1e10 and curve.allreduce_s(10, 2) == curve.allreduce_s(1e6, 2)
    assert curve.busbw(1e6, 3) == 5e8  # the nearest rank count, the larger on a tie
    assert curve.allreduce_s(1e8, 1) == 0.0
    link = LinkCost(1e-5, 1e9, curve)
    assert data_parallel_allreduce_s(1e8, 2, 8, link, None) == (
        curve.allreduce_s(1e8, 2),
        "measured",
    )
    with pytest.raises(ValueError, match="no all_reduce row"):
        BusBandwidthCurve.from_rows([(1, 1e6, 1e9)])


class Device:
    id, kind, memory_bytes = "gpu-x", "gpu", 16e9

    def peak_flops(self, precision):
        return 15e12

    def efficiency(self, precision):
        return 0.5


class Link:
    def __init__(self, scope, bytes_per_s, latency_s=0.0):
        self.id, self.scope, self.bytes_per_s, self.latency_s = scope, scope, bytes_per_s, latency_s


def test_an_infinitely_fast_link_exposes_no_communication():
    kwargs = dict(per_node=8, batch_size=32, precision="fp32", single_device_throughput=400.0)
    fast = predict_ddp(
        model=CIFARNET,
        device=Device(),
        devices=[1, 8, 64],
        intra=Link("intra", 1e30),
        inter=Link("inter", 1e30),
        **kwargs,
    )
    for row in fast["rows"]:
        assert row["comm_exposed_s"] == pytest.approx(0.0, abs=1e-12)
        assert row["comm_fraction"] == pytest.approx(0.0, abs=1e-10)
        assert row["efficiency"] == pytest.approx(1.0)
    # The last bucket cannot overlap: cifarnet's 358 kB of gradients fit DDP's first bucket
    # (1 MiB), ready only when the backward ends, so all of its all-reduce is exposed.
    slow = predict_ddp(
        model=CIFARNET,
        device=Device(),
        devices=[1, 8],
        intra=Link("intra", 1e6),
        inter=None,
        **kwargs,
    )
    row = slow["rows"][-1]
    alone, _ = data_parallel_allreduce_s(4 * 89_578, 8, 8, LinkCost(0.0, 1e6), None)
    assert slow["inputs"]["buckets"] == 1
    assert row["comm_exposed_s"] == pytest.approx(alone) == pytest.approx(row["comm_s"])


def test_stragglers_and_overhead_enter_the_step():
    kwargs = dict(
        per_node=8,
        batch_size=32,
        precision="fp32",
        single_device_throughput=400.0,
        intra=Link("intra", 1e30),
        inter=None,
    )
    plain = predict_ddp(model=CIFARNET, device=Device(), devices=[1, 8], **kwargs)["rows"][-1]
    noisy = predict_ddp(
        model=CIFARNET,
        device=Device(),
        devices=[1, 8],
        noise=StepNoise(cv=0.1),
        overhead=Overhead(0.002),
        **kwargs,
    )["rows"][-1]
    assert noisy["straggler_s"] == pytest.approx(0.1 * 0.08 * expected_max_standard_normal(8))
    assert noisy["overhead_s"] == 0.002
    assert noisy["step_s"] == pytest.approx(plain["step_s"] + noisy["straggler_s"] + 0.002)
    assert noisy["efficiency"] == pytest.approx(0.08 / noisy["step_s"])
