"""The step time against the batch (issue 33, item 3): fitted, used, calibrated, shown."""

import math
import statistics
from dataclasses import replace

import pytest
from predict_inputs import FakeDevice, predict_ddp, stored_result

from trainperf import models
from trainperf.predict.calibrate import calibrate
from trainperf.predict.catalog import Device
from trainperf.predict.catalog_file import load_catalog
from trainperf.predict.compute import CPU_FIXED_SAMPLES, compute_rate
from trainperf.predict.inputs import Measured
from trainperf.predict.terms import BatchCurve, fit_batch_curve
from trainperf.store.database import Store

FIXED_S, PER_SAMPLE_S = 0.004, 0.0005  # a 4 ms fixed cost per step, 0.5 ms per sample


def measured(batch: int) -> float:
    """samples/s of a device whose step takes FIXED_S + PER_SAMPLE_S · batch."""
    return batch / (FIXED_S + PER_SAMPLE_S * batch)


def test_the_fit_recovers_the_fixed_and_per_sample_time():
    curve = fit_batch_curve([(b, measured(b)) for b in (8, 16, 32, 64)], "synthetic")
    assert curve.fixed_s == pytest.approx(FIXED_S)
    assert curve.per_sample_s == pytest.approx(PER_SAMPLE_S)
    assert curve.batches == (8, 16, 32, 64)
    assert curve.throughput(8) == pytest.approx(measured(8))


def test_the_fit_refuses_what_cannot_be_a_curve():
    with pytest.raises(ValueError, match="fewer than 2 distinct batch sizes"):
        fit_batch_curve([(32, 100.0), (32, 101.0)])
    # larger batches relatively slower: no negative fixed cost, the mean per-sample time
    curve = fit_batch_curve([(8, 1000.0), (64, 500.0)])
    assert curve.fixed_s == 0.0
    assert curve.per_sample_s == pytest.approx((8 / 1000 / 8 + 64 / 500 / 64) / 2)
    with pytest.raises(ValueError, match="does not grow"):
        fit_batch_curve([(8, 1.0), (64, 1000.0)])


class Link:
    id = "free"
    scope = "intra"
    bytes_per_s = 1e30
    latency_s = 0.0


def strong(device=None, **measured_terms):
    return predict_ddp(
        model="cifarnet",
        device=device or FakeDevice(),
        devices=[1, 8],
        per_node=8,
        intra=Link(),
        batch_size=64,
        precision="fp32",
        scaling="strong",
        **measured_terms,
    )


def test_strong_scaling_pays_the_fixed_part_on_every_device():
    """With a free link, a throughput measured at one batch predicts perfect strong
    scaling; the batch curve charges each device the fixed part at its smaller batch."""
    linear = strong(single_device_throughput=measured(64))["rows"][-1]
    assert linear["efficiency"] == pytest.approx(1.0)
    curve = BatchCurve(FIXED_S, PER_SAMPLE_S, (8, 64), "synthetic")
    row = strong(batch_curve=curve)["rows"][-1]
    expected = (FIXED_S + PER_SAMPLE_S * 64) / (8 * (FIXED_S + PER_SAMPLE_S * 8))
    assert row["device_batch"] == 8
    assert row["compute_s"] == pytest.approx(FIXED_S + PER_SAMPLE_S * 8)
    assert row["efficiency"] == pytest.approx(expected)
    assert row["efficiency"] < 0.7 < linear["efficiency"]


def test_explain_gives_the_curve_the_rows_read():
    curve = BatchCurve(FIXED_S, PER_SAMPLE_S, (8, 64), "synthetic")
    prediction = strong(batch_curve=curve, explain=True)
    points = {p["device_batch"]: p for p in prediction["compute_curve"]}
    assert sorted(points) == [1, 2, 4, 8, 16, 32, 64]
    for row in prediction["rows"]:
        assert points[row["device_batch"]]["compute_s"] == pytest.approx(row["compute_s"])
    assert "compute_curve" not in strong(batch_curve=curve)
    assert "a fixed part per step" in prediction["assumptions"][0]


def test_calibration_fits_the_curve_from_results_at_several_batches(tmp_path):
    system = {"fingerprint": "curve0000001", "hostname": "curve", "memory_bytes": 2**34}
    path = tmp_path / "curve.db"
    with Store(path) as store:
        sweep_id = store.start_sweep(system)

        def store_at(batch):
            result = stored_result(batch, measured(batch), device="cpu")
            store.add_result(sweep_id, system["fingerprint"], result)

        store_at(16)
        one = calibrate(path, models.get("cifarnet"))
        store_at(32)
        store_at(64)
    assert one.batch_curve is None
    assert "fewer than 2 distinct batch sizes" in one.absent["batch_curve"]

    cal = calibrate(path, models.get("cifarnet"))
    assert cal.batch_curve.batches == (16, 32, 64)
    assert cal.batch_curve.fixed_s == pytest.approx(FIXED_S)
    assert cal.batch_curve.per_sample_s == pytest.approx(PER_SAMPLE_S)
    assert [s["batch_size"] for s in cal.sources["batch_curve"]] == [16, 32, 64]
    assert all(math.isfinite(s["samples_per_s"]) for s in cal.sources["batch_curve"])


def test_the_curve_through_a_measurement_reproduces_it_with_the_fitted_slope():
    points = [(b, measured(b)) for b in (8, 16, 64)]
    anchored = fit_batch_curve(points, through=(16, measured(16) * 1.1))
    assert anchored.per_sample_s == pytest.approx(PER_SAMPLE_S)
    assert anchored.throughput(16) == pytest.approx(measured(16) * 1.1)


# PaddlePaddle with MKL-DNN on 2 x Xeon Gold 6148 (benchmark/IntelOptimizedPaddle.md): img/s
# at batch 64, 128, 256, the numbers CPU_FIXED_SAMPLES quotes.
PADDLE_GOLD_6148 = {
    "vgg19": (28.46, 29.83, 30.44),
    "resnet50": (81.69, 82.35, 84.08),
    "googlenet": (250.46, 264.83, 269.50),
}


def test_the_cpu_default_curve_is_the_median_fit_of_its_source():
    fixed = {
        name: (c := fit_batch_curve(list(zip((64, 128, 256), rates, strict=True)))).fixed_s
        / c.per_sample_s
        for name, rates in PADDLE_GOLD_6148.items()
    }
    assert fixed == pytest.approx({"vgg19": 6.13, "resnet50": 2.32, "googlenet": 6.80}, abs=0.01)
    assert statistics.median(fixed.values()) == pytest.approx(CPU_FIXED_SAMPLES, abs=0.05)


def cpu_node(**changes):
    return FakeDevice(id="cpu-x", kind="cpu", **changes)


def test_a_cpu_without_a_measured_curve_loses_rate_below_the_batch_its_rate_holds_at():
    """A throughput measured at 64: exact at 64, and a device of a strong-scaling job at 8
    pays the default fixed part (8 + k) / 8 · 64 / (64 + k), which a GPU does not."""
    k = CPU_FIXED_SAMPLES
    cpu = strong(single_device_throughput=measured(64), device=cpu_node())["rows"]
    assert cpu[0]["compute_s"] == pytest.approx(64 / measured(64))
    assert cpu[-1]["compute_s"] == pytest.approx(8 / measured(64) * (8 + k) / 8 * 64 / (64 + k))
    assert cpu[-1]["efficiency"] == pytest.approx((64 + k) / (8 * (8 + k)))
    gpu = strong(single_device_throughput=measured(64))["rows"]
    assert gpu[-1]["efficiency"] == pytest.approx(1.0)
    # A measured curve replaces the default.
    curve = BatchCurve(FIXED_S, PER_SAMPLE_S, (8, 64), "synthetic")
    row = strong(batch_curve=curve, device=cpu_node())["rows"][-1]
    assert row["compute_s"] == pytest.approx(FIXED_S + PER_SAMPLE_S * 8)


def test_the_default_curve_is_exact_where_a_catalog_cpu_efficiency_was_derived():
    catalog = load_catalog()
    node = catalog.device("xeon-gold-6148-2s")
    spec = models.get("resnet50")
    shaped = compute_rate(spec, node, "fp32", size=224)
    flat = replace(shaped, fixed_samples=0.0)
    assert node.efficiency_batch == 256
    assert shaped.seconds(256) == pytest.approx(flat.seconds(256))
    ratio = shaped.seconds(26) / flat.seconds(26)
    k = CPU_FIXED_SAMPLES
    assert ratio == pytest.approx((26 + k) / 26 * 256 / (256 + k))
    assert "a fixed part worth 6.1 samples" in shaped.batch_dependence()
    # A given fraction has no batch to be exact at: no default shape.
    given = compute_rate(spec, node, "fp32", Measured(achieved_fraction=0.3), size=224)
    assert given.fixed_samples == 0.0
    # One solved from a throughput measured at 64 (--calibrate) is exact there.
    solved = Measured(achieved_fraction=0.3, throughput_batch=64)
    calibrated = compute_rate(spec, node, "fp32", solved, size=224)
    assert calibrated.reference_batch == 64 and calibrated.shape_factor(64) == 1.0
    assert calibrated.shape_factor(8) == pytest.approx((8 + k) / 8 * 64 / (64 + k))


def test_a_catalog_cpu_must_say_where_its_efficiency_holds():
    entry = {
        "name": "n",
        "kind": "cpu",
        "peak_tflops": {"fp32": 1.0},
        "memory_bandwidth_gbps": 100,
        "default_efficiency": {"fp32": 0.3},
        "sources": {
            "peak_tflops.fp32": "s",
            "memory_bandwidth_gbps": "s",
            "default_efficiency.fp32": "s",
        },
    }
    with pytest.raises(ValueError, match="efficiency_batch"):
        Device(id="n", **entry)
