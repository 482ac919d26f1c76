"""Energy and context of a whole case: the probes' window is the measured steps."""

import pytest

from trainperf import benchmark
from trainperf.case import make_case
from trainperf.measure import probes as probes_module
from trainperf.measure.energy_rapl import RaplEnergy


def fake_rapl(root):
    """A package zone whose counter gains 2 J at every read: begin and end are 2 J apart."""
    zone = root / "intel-rapl:0"
    zone.mkdir()
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    counter = {"uj": 0}

    def reader(path):
        if path.endswith("energy_uj"):
            counter["uj"] += 2_000_000
            return f"{counter['uj']}\n"
        with open(path) as f:
            return f.read()

    return RaplEnergy(root, reader=reader)


def test_a_case_reports_power_energy_per_sample_and_efficiency(tmp_path, monkeypatch):
    monkeypatch.setattr(probes_module, "make_meters", lambda *a, **k: [fake_rapl(tmp_path)])
    case = make_case(model="cifarnet", batch_size=4, image_size=16, steps="fixed:2:6")
    m = benchmark.run_case(case)["metrics"]
    assert m["energy_j_total"] == pytest.approx(2.0)
    assert m["cpu_energy_j"] == pytest.approx(2.0) and m["energy_sources"] == ["rapl:package-0"]
    seconds = m["measure_elapsed_s"]
    assert m["average_power_w"] == pytest.approx(2.0 / seconds)
    assert m["energy_per_sample_j"] == pytest.approx(2.0 / (6 * 4))
    assert m["samples_per_s_per_w"] == pytest.approx(6 * 4 / seconds / (2.0 / seconds))
    assert (
        m["context_start"][0]["cpu_freq_mhz"] is None or m["context_start"][0]["cpu_freq_mhz"] > 0
    )


def test_without_energy_counters_the_reading_is_absent_with_its_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(
        probes_module, "make_meters", lambda *a, **k: [RaplEnergy(tmp_path / "none")]
    )
    case = make_case(model="cifarnet", batch_size=4, image_size=16, steps="fixed:1:3")
    m = benchmark.run_case(case)["metrics"]
    assert m["energy_j_total"] is None and m["average_power_w"] is None
    assert "no RAPL powercap interface" in m["energy_absent_reason"]
