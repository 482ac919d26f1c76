"""Calibration recovers the parameters that made synthetic measurements, and checks itself."""

from dataclasses import dataclass, replace

import pytest
from predict_inputs import predict_ddp, stored_result

import report_fixture
from trainperf import models
from trainperf.models.flops import count_flops
from trainperf.predict.calibrate import Calibration, CalibrationError, calibrate, fit_alpha_beta
from trainperf.predict.comm import LinkCost, ring_allreduce_s
from trainperf.predict.compute import compute_rate
from trainperf.predict.inputs import Measured
from trainperf.predict.terms import BatchCurve
from trainperf.store.database import Store

ALPHA, BETA = 20e-6, 5e9
FRACTION, PEAK = 0.42, 15e12
CIFARNET = models.get("cifarnet")
SIZES = [1024 * 4**k for k in range(9)]  # 1 KiB .. 64 MiB
SYSTEM = {"fingerprint": "synthetic00001", "hostname": "synthetic", "memory_bytes": 64 * 2**30}


@dataclass(frozen=True)
class Device:
    id: str = "gpu-x"
    name: str = "GPU X"
    kind: str = "gpu"
    memory_bytes: float = 80 * 2**30
    memory_bytes_per_s: float = 900e9

    def peak_flops(self, precision):
        return PEAK if precision == "fp32" else None

    def efficiency(self, precision):
        return None


def _timings(p):
    return [(p, n, ring_allreduce_s(n, p, LinkCost(ALPHA, BETA))) for n in SIZES]


def test_fit_recovers_alpha_and_beta():
    alpha, beta, residual = fit_alpha_beta(_timings(2) + _timings(4))
    assert alpha == pytest.approx(ALPHA, rel=0.01) and beta == pytest.approx(BETA, rel=0.01)
    assert residual < 1e-9


def test_fit_refuses_what_the_model_cannot_explain():
    shrinking = [(2, n, 1.0 / n) for n in SIZES]  # slower for smaller messages only
    with pytest.raises(CalibrationError, match="1/β"):
        fit_alpha_beta(shrinking)
    negative = [(2, n, n / BETA - 1e-4) for n in SIZES[4:]]  # below zero at 0 bytes
    with pytest.raises(CalibrationError, match="negative"):
        fit_alpha_beta(negative)
    with pytest.raises(CalibrationError, match="fewer than 2"):
        fit_alpha_beta([(2, 1024, 1e-4), (1, 2048, 1e-4)])


@pytest.fixture(scope="module")
def synthetic_db(tmp_path_factory):
    """Measurements made by the model itself: α, β, and the achieved fraction known."""
    path = tmp_path_factory.mktemp("cal") / "synthetic.db"
    flops = count_flops(models.get("cifarnet"), 32).train_flops_per_sample
    link = MeasuredLink()
    with Store(path) as store:
        sweep_id = store.start_sweep(SYSTEM)
        single = 32 / compute_rate(
            CIFARNET, Device(), "fp32", Measured(achieved_fraction=FRACTION), 32
        ).seconds(32)
        store.add_result(sweep_id, SYSTEM["fingerprint"], stored_result(32, single, flops=flops))
        for devices in (2, 4):
            predicted = predict_ddp(
                model=CIFARNET,
                device=Device(),
                devices=[devices],
                per_node=8,
                intra=link,
                batch_size=32,
                precision="fp32",
                achieved_fraction=FRACTION,
            )["rows"][0]["samples_per_s"]
            store.add_result(
                sweep_id, SYSTEM["fingerprint"], stored_result(32, predicted, devices, flops=flops)
            )
        for p in (2, 4):
            rows = [
                {
                    "op": "all_reduce",
                    "size_bytes": n,
                    "time_us": t * 1e6,
                    "busbw_gbps": n / t * 2 * (p - 1) / p / 1e9,
                    "wrong": 0,
                }
                for _, n, t in _timings(p)
            ]
            store.add_micro(
                SYSTEM,
                {"kind": "collective", "device": "cuda"},
                {
                    "status": "ok",
                    "device": {"world_size": p, "local_world_size": p},
                    "metrics": {"rows": rows, "world_size": p},
                },
            )
    return path


@dataclass(frozen=True)
class MeasuredLink:
    id: str = "synthetic"
    scope: str = "intra"
    bytes_per_s: float = BETA
    latency_s: float = ALPHA


def test_calibration_recovers_what_made_the_measurements(synthetic_db):
    cal = calibrate(synthetic_db, CIFARNET, Device())
    assert cal.achieved_fraction == pytest.approx(FRACTION, rel=1e-7)
    assert cal.alpha_s == pytest.approx(ALPHA, rel=0.01)
    assert cal.beta_bytes_per_s == pytest.approx(BETA, rel=0.01)
    assert cal.link_scope == "intra" and cal.precision == "fp32"
    assert cal.system == SYSTEM["fingerprint"] and cal.throughput_batch == 32
    assert cal.sources["link"]["ranks"] == [2, 4] and cal.sources["link"]["rows"] == 18
    assert cal.sources["compute"]["result_id"] == 1
    assert [r["devices"] for r in cal.fit_rows] == [1, 2, 4]
    # One device exactly; more within what interpolating busbw between sizes 4x apart costs.
    assert abs(cal.fit_rows[0]["error_pct"]) < 1e-6
    assert all(abs(r["error_pct"]) < 2 for r in cal.fit_rows)
    # Made without overhead: what is left over is the bus-bandwidth curve's interpolation.
    assert cal.sources["overhead"]["result_ids"] == [2, 3]
    measured = {r["devices"]: r["measured_samples_per_s"] for r in cal.fit_rows}
    for point in cal.sources["overhead"]["points"]:  # under 2% of the step, as above
        step = 32 * point["devices"] / measured[point["devices"]]
        assert abs(point["overhead_s"]) < 0.02 * step
    for p in (2, 4):  # busbw = n / t · 2(p−1)/p, per rank count
        time = ring_allreduce_s(SIZES[-1], p, LinkCost(ALPHA, BETA))
        expected = SIZES[-1] / time * 2 * (p - 1) / p
        assert cal.busbw_curve.busbw(SIZES[-1], p) == pytest.approx(expected, rel=1e-9)
    # the synthetic results have no runs, one batch size and no --under-load run
    assert set(cal.absent) == {"noise", "batch_curve", "contention"}
    assert cal.as_dict()["measured_device"]["kind"] == "gpu"


def test_without_a_catalog_device_the_throughput_is_calibrated(synthetic_db):
    cal = calibrate(synthetic_db, CIFARNET)
    assert cal.achieved_fraction is None and "no catalog device" in cal.absent["achieved_fraction"]
    rate = compute_rate(CIFARNET, Device(), "fp32", Measured(achieved_fraction=FRACTION), 32)
    assert cal.single_device_throughput == pytest.approx(32 / rate.seconds(32))
    assert all(abs(r["error_pct"]) < 2 for r in cal.fit_rows)  # same batch everywhere


def test_nothing_to_calibrate(synthetic_db, tmp_path):
    cal = calibrate(synthetic_db, models.get("resnet50"))
    assert "no ok single-device result" in cal.absent["compute"]
    assert cal.fit_rows == [] and cal.single_device_throughput is None
    with pytest.raises(CalibrationError, match="no results database"):
        calibrate(tmp_path / "missing.db", CIFARNET)
    not_sqlite = tmp_path / "results.csv"
    not_sqlite.write_text("id,model\n1,cifarnet\n")
    with pytest.raises(CalibrationError, match="cannot read .* as a results database"):
        calibrate(not_sqlite, CIFARNET)


def test_real_cpu_measurements(tmp_path):
    """The stored 2-core CPU machine: its throughput, its gloo link, its DDP cases checked."""
    facts = report_fixture.build(tmp_path / "fixture.db")
    system = facts["systems"]["a"]
    cal = calibrate(tmp_path / "fixture.db", CIFARNET, device_type="cpu", system=system)
    assert cal.measured_device.kind == "cpu" and cal.single_device_throughput > 0
    assert cal.alpha_s > 0 and cal.beta_bytes_per_s > 0 and cal.link_scope == "intra"
    assert {r["devices"] for r in cal.fit_rows} == {1, 2}
    assert all("error_pct" in r for r in cal.fit_rows)
    # Stragglers from the measured steps, overhead from the 2-process DDP results.
    assert len(cal.noise.samples) >= 2 and cal.noise.straggler_s(2, 1.0) >= 0
    assert cal.overhead is not None and cal.sources["overhead"]["points"][0]["devices"] == 2
    assert cal.busbw_curve is not None and "noise" not in cal.absent
    # The throughput calibrated from is the run-level estimate, with its interval.
    source = cal.sources["compute"]
    assert source["runs"] == 3 and len(source["samples_per_s_ci95"]) == 2
    assert (
        source["samples_per_s_ci95"][0]
        < cal.single_device_throughput
        < source["samples_per_s_ci95"][1]
    )


def test_compute_inputs_take_one_measured_figure_in_order():
    """The one decision both `predict --calibrate` and the calibration's own replay of
    stored cases read: the fraction first (it carries over to another device's peak), then
    the batch curve, then the throughput; the last two only for this machine."""
    curve = BatchCurve(0.01, 0.002, (8, 64), "synthetic")
    everything = Calibration(
        "resnet18",
        achieved_fraction=0.3,
        single_device_throughput=50.0,
        throughput_batch=32,
        batch_curve=curve,
    )
    assert everything.compute_inputs() == {"achieved_fraction": 0.3, "throughput_batch": 32}
    assert everything.compute_inputs(same_device=False) == everything.compute_inputs()
    measured_here = replace(everything, achieved_fraction=None)
    assert measured_here.compute_inputs() == {"batch_curve": curve}
    assert measured_here.compute_inputs(same_device=False) == {}
    one_batch = replace(measured_here, batch_curve=None)
    assert one_batch.compute_inputs() == {"single_device_throughput": 50.0, "throughput_batch": 32}
    assert one_batch.compute_inputs(same_device=False) == {}
    assert replace(one_batch, single_device_throughput=None).compute_inputs() == {}
