import itertools
import os
import re
import sys
import threading
import time
from pathlib import Path

import pynvml
import pytest

from trainperf.measure import energy_nvml
from trainperf.measure.energy import AbsentMeter, Reading, integrate, summarize
from trainperf.measure.energy_nvml import (
    NvmlEnergy,
    NvmlPowerSampler,
    NvmlUnavailable,
    close_nvml,
    cuda_uuids,
    normal_uuid,
    nvml_handle,
    open_nvml,
)
from trainperf.measure.energy_rapl import RaplEnergy
from trainperf.measure.probes import make_meters


class FakeClock:
    """A clock that advances a fixed step per call, safe to call from two threads.

    ``seen()`` is the time last returned to the calling thread, so a fake power reading
    taken right after a clock read matches it even when another thread reads the clock.
    """

    def __init__(self, start=100.0, step=0.01):
        self.now = start
        self.step = step
        self.lock = threading.Lock()
        self.local = threading.local()

    def __call__(self):
        with self.lock:
            self.now += self.step
            self.local.t = self.now
            return self.now

    def seen(self):
        return getattr(self.local, "t", self.now)


class FakeNvml:
    """The pynvml functions the energy meters call, on fake GPUs.

    ``energy_mj[i]`` is a list of successive counter values (or None: NotSupported);
    ``power_mw[i]`` a function of the clock's current time (or None: NotSupported).
    """

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported

    def __init__(self, energy_mj=None, power_mw=None, clock=None, count=2):
        self.energy = {i: iter(v) for i, v in (energy_mj or {}).items() if v is not None}
        self.power = power_mw or {}
        self.clock = clock
        self.count = count
        self.inits = self.shutdowns = 0
        self.energy_calls = 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index):
        if index >= self.count:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return ("handle", index)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return ("uuid", uuid)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self.energy_calls += 1
        if handle[1] not in self.energy:
            raise pynvml.NVMLError_NotSupported()
        return next(self.energy[handle[1]])

    def nvmlDeviceGetPowerUsage(self, handle):
        curve = self.power.get(handle[1])
        if curve is None:
            raise pynvml.NVMLError_NotSupported()
        return curve(self.clock.seen())


# ------------------------------------------------------------------ integration


def test_integrate_constant_power():
    assert integrate([(0.0, 100.0), (0.5, 100.0), (2.0, 100.0)]) == pytest.approx(200.0)


def test_integrate_ramp_is_trapezoid():
    # 0 W to 100 W over 2 s, uneven sample times: a trapezoid is exact on a line.
    assert integrate([(0.0, 0.0), (0.3, 15.0), (2.0, 100.0)]) == pytest.approx(100.0)
    assert integrate([(0.0, 0.0), (1.0, 100.0), (2.0, 0.0)]) == pytest.approx(100.0)


def test_integrate_needs_two_samples():
    assert integrate([]) == 0.0
    assert integrate([(1.0, 50.0)]) == 0.0


# ------------------------------------------------------------------ NVML


def test_nvml_counter_difference():
    nvml = FakeNvml(energy_mj={0: [0, 1_000_000, 1_250_000]})  # probe, begin, end
    clock = FakeClock(step=0.5)
    meter = NvmlEnergy(nvml, [0], clock=clock, visible="")
    assert meter.describe()[0]["source"] == "nvml_total_energy"
    meter.begin()
    (reading,) = meter.end()
    assert reading.source == "nvml_total_energy" and reading.domain == "gpu0"
    assert reading.energy_j == pytest.approx(250.0)  # 250,000 mJ
    assert reading.duration_s == pytest.approx(0.5)
    assert reading.average_power_w == pytest.approx(500.0)
    assert reading.absent_reason is None
    meter.close()
    meter.close()
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_nvml_not_supported_falls_back_to_sampling_a_ramp():
    clock = FakeClock(start=0.0, step=0.01)
    # Power rises 10 W per second of the fake clock: the trapezoid integral is exact.
    nvml = FakeNvml(energy_mj={0: None}, power_mw={0: lambda t: 10_000.0 * t}, clock=clock)
    with NvmlEnergy(nvml, [0], interval_s=0.001, clock=clock, visible="") as meter:
        (described,) = meter.describe()
        assert described["source"] == "nvml_power_sampling"
        assert "Not Supported" in described["method"]
        meter.begin()
        time.sleep(0.02)
        (reading,) = meter.end()
    assert reading.source == "nvml_power_sampling"
    assert reading.samples >= 2
    t1 = clock.now
    t0 = t1 - reading.duration_s
    assert reading.energy_j == pytest.approx(5.0 * (t1**2 - t0**2))
    assert nvml.shutdowns == 1


def test_sampler_constant_power_and_edges():
    clock = FakeClock(start=0.0, step=0.25)
    nvml = FakeNvml(power_mw={0: lambda t: 100_000.0}, clock=clock)
    sampler = NvmlPowerSampler(nvml, ("handle", 0), "gpu0", interval_s=10.0, clock=clock)
    sampler.begin()
    (reading,) = sampler.end()  # the thread never woke: only the two edge samples
    assert reading.samples == 2
    assert reading.duration_s == pytest.approx(0.25)
    assert reading.energy_j == pytest.approx(25.0)
    assert reading.average_power_w == pytest.approx(100.0)


def test_sampler_thread_waits_instead_of_spinning():
    clock = FakeClock()
    nvml = FakeNvml(power_mw={0: lambda t: 50_000.0}, clock=clock)
    sampler = NvmlPowerSampler(nvml, ("handle", 0), "gpu0", interval_s=0.05, clock=clock)
    sampler.begin()
    time.sleep(0.2)
    (reading,) = sampler.end()
    # About 4 samples in 0.2 s plus the edges; a busy loop would take thousands.
    assert 2 <= reading.samples <= 10
    with pytest.raises(ValueError, match="interval_s"):
        NvmlPowerSampler(nvml, ("handle", 0), "gpu0", interval_s=0)


def test_nvml_without_counter_or_power_is_absent_with_reason():
    nvml = FakeNvml(energy_mj={0: [0, 0, 5000]}, count=3)
    meter = NvmlEnergy(nvml, [0, 1, 7], clock=FakeClock(), visible="")
    with pytest.raises(RuntimeError, match="without begin"):
        meter.end()
    meter.begin()
    by_domain = {r.domain: r for r in meter.end()}
    assert by_domain["gpu0"].energy_j == pytest.approx(5.0)
    for domain in ("gpu1", "gpu7"):
        assert by_domain[domain].energy_j is None
        assert by_domain[domain].absent_reason
    assert "nvmlDeviceGetPowerUsage failed" in by_domain["gpu1"].absent_reason
    assert "no NVML handle for cuda:7" in by_domain["gpu7"].absent_reason
    assert [d["available"] for d in meter.describe()] == [True, False, False]


def test_nvml_handle_follows_cuda_visible_devices():
    nvml = FakeNvml(count=8)
    assert nvml_handle(nvml, 0, visible="") == ("handle", 0)
    assert nvml_handle(nvml, 1, visible="5,3") == ("handle", 3)
    assert nvml_handle(nvml, 0, visible="GPU-abc") == ("uuid", "GPU-abc")
    # "²".isdigit() is true and int("²") raises: not an index, so looked up as a UUID
    assert nvml_handle(nvml, 0, visible="²") == ("uuid", "²")
    with pytest.raises(IndexError, match="not visible"):
        nvml_handle(nvml, 2, visible="5,3")


def test_make_meters_without_nvml_gives_absent_meters(tmp_path):
    class BrokenNvml:
        def nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    meters = make_meters("cuda", [0, 1], nvml=BrokenNvml(), rapl_root=tmp_path / "none")
    assert [type(m) for m in meters] == [AbsentMeter, AbsentMeter, RaplEnergy]
    for m in meters:
        m.begin()
    readings = [r for m in meters for r in m.end()]
    assert [r.domain for r in readings] == ["gpu0", "gpu1", "cpu"]
    assert all(r.energy_j is None for r in readings)
    assert readings[0].absent_reason.startswith("NVML not available: ")
    assert "Library Not Found" in readings[0].absent_reason


def test_make_meters_with_fake_nvml():
    nvml = FakeNvml(energy_mj={0: [0, 0, 1000]})
    meters = make_meters("cuda", [0], nvml=nvml, rapl_root="/nonexistent")
    assert isinstance(meters[0], NvmlEnergy) and isinstance(meters[1], RaplEnergy)
    for m in meters:
        m.close()
    assert nvml.shutdowns == 1


def test_open_nvml_pairs_and_names_what_is_missing(monkeypatch):
    nvml = FakeNvml()
    assert open_nvml(nvml) is nvml and (nvml.inits, nvml.shutdowns) == (1, 0)
    close_nvml(nvml)
    assert nvml.shutdowns == 1
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    with pytest.raises(NvmlUnavailable, match=r"^NVML not available: .*pynvml"):
        open_nvml()


def test_every_nvml_user_says_the_same_without_pynvml(monkeypatch, tmp_path):
    from trainperf.measure.gpu_context import WindowSampler, gpu_context
    from trainperf.system import gpu as system_gpu

    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlUnavailable) as missing:
        open_nvml()
    reason = str(missing.value)
    (meter, _) = make_meters("cuda", [0], rapl_root=tmp_path)
    assert meter.describe()[0]["absent_reason"] == reason
    assert set(gpu_context(None, 0)["absent"].values()) == {reason}
    sampler = WindowSampler(None, [0])
    sampler.begin()
    assert sampler.end() == {0: {"absent": reason}}
    assert system_gpu.nvml_inventory()["gpus_absent_reason"] == reason


def test_nvml_is_opened_in_one_place():
    """Only energy_nvml imports pynvml and calls nvmlInit; the others call open_nvml."""
    root = Path(energy_nvml.__file__).parents[1]
    openers = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if re.search(r"nvmlInit\(|import pynvml", path.read_text())
    )
    assert openers == ["measure/energy_nvml.py"]


# ------------------------------------------------------------------ RAPL


def powercap_tree(root, package_uj=1_000_000, dram_uj=500_000, max_uj=262_143_328_850):
    """intel-rapl:0 (package-0) with its dram subzone intel-rapl:0:0 inside it."""
    package = root / "intel-rapl:0"
    dram = package / "intel-rapl:0:0"
    core = package / "intel-rapl:0:1"
    for zone, name, uj in ((package, "package-0", package_uj), (dram, "dram", dram_uj)):
        zone.mkdir(parents=True)
        (zone / "name").write_text(name + "\n")
        (zone / "energy_uj").write_text(f"{uj}\n")
        (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
    core.mkdir()
    (core / "name").write_text("core\n")
    (core / "energy_uj").write_text("1\n")
    return package, dram


def test_rapl_counter_difference(tmp_path):
    package, dram = powercap_tree(tmp_path)
    meter = RaplEnergy(tmp_path, clock=FakeClock(step=2.0))
    assert [d["domain"] for d in meter.describe()] == ["package-0", "dram-0"]
    assert all(d["available"] for d in meter.describe())
    meter.begin()
    (package / "energy_uj").write_text("31000000\n")  # +30 J
    (dram / "energy_uj").write_text("4500000\n")  # +4 J
    readings = meter.end()
    assert [(r.source, r.domain) for r in readings] == [("rapl", "package-0"), ("rapl", "dram-0")]
    assert [r.energy_j for r in readings] == pytest.approx([30.0, 4.0])
    assert [r.average_power_w for r in readings] == pytest.approx([15.0, 2.0])


def test_rapl_wraparound(tmp_path):
    max_uj = 262_143_328_850
    package, _ = powercap_tree(tmp_path, package_uj=max_uj - 2_000_000)
    meter = RaplEnergy(tmp_path, clock=FakeClock())
    meter.begin()
    (package / "energy_uj").write_text("3000000\n")
    package_reading = meter.end()[0]
    assert package_reading.energy_j == pytest.approx(5.0)  # end + max - begin


def test_rapl_permission_error_is_absent_with_path(tmp_path):
    package, _ = powercap_tree(tmp_path)

    def root_only(path):
        if path.endswith("energy_uj") and not path.endswith("max_energy_range_uj"):
            raise PermissionError(13, "Permission denied", path)
        with open(path) as f:
            return f.read()

    meter = RaplEnergy(tmp_path, reader=root_only)
    assert not any(d["available"] for d in meter.describe())
    meter.begin()
    readings = meter.end()
    assert len(readings) == 2
    for r in readings:
        assert r.energy_j is None and r.average_power_w is None
        assert r.absent_reason.startswith("RAPL energy files not readable by this user (")
    assert str(package / "energy_uj") in readings[0].absent_reason


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_rapl_chmod_0_is_absent(tmp_path):
    package, dram = powercap_tree(tmp_path)
    (package / "energy_uj").chmod(0)
    (dram / "energy_uj").chmod(0)
    meter = RaplEnergy(tmp_path)
    meter.begin()
    assert all("not readable by this user" in r.absent_reason for r in meter.end())


def test_no_powercap_is_one_absent_reading(tmp_path):
    meter = RaplEnergy(tmp_path / "powercap")
    (described,) = meter.describe()
    assert described["available"] is False
    meter.begin()
    (reading,) = meter.end()
    assert reading.energy_j is None
    assert reading.absent_reason == (
        f"no RAPL powercap interface ({tmp_path / 'powercap' / 'intel-rapl'} absent)"
    )


def test_rapl_skips_non_package_zones_and_finds_root_subzones(tmp_path):
    (tmp_path / "intel-rapl:1").mkdir()
    (tmp_path / "intel-rapl:1" / "name").write_text("psys\n")
    for zone, name in (("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "dram")):
        (tmp_path / zone).mkdir()
        (tmp_path / zone / "name").write_text(name)
        (tmp_path / zone / "energy_uj").write_text("7")
    meter = RaplEnergy(tmp_path)
    assert [z.domain for z in meter.zones] == ["package-0", "dram-0"]


# ------------------------------------------------------------------ summary


def reading(source, domain, energy_j, reason=None):
    return Reading(source, domain, energy_j, 3.0, absent_reason=reason)


def test_summarize_arithmetic():
    readings = [
        reading("nvml_total_energy", "gpu0", 250.0),
        reading("rapl", "package-0", 40.0),
        reading("rapl", "dram-0", 10.0),
    ]
    s = summarize(readings, samples=600, seconds=3.0)
    assert s["energy_j_total"] == pytest.approx(300.0)
    assert s["average_power_w"] == pytest.approx(100.0)
    assert s["energy_per_sample_j"] == pytest.approx(0.5)
    assert s["samples_per_s_per_w"] == pytest.approx(2.0)
    assert s["gpu_energy_j"] == pytest.approx(250.0) and s["gpu_energy_absent_reason"] is None
    assert s["cpu_energy_j"] == pytest.approx(50.0) and s["cpu_energy_absent_reason"] is None
    assert s["energy_sources"] == ["nvml_total_energy:gpu0", "rapl:package-0", "rapl:dram-0"]
    assert s["energy_absent"] == [] and s["energy_complete"] is True
    assert len(s["energy_readings"]) == 3 and s["energy_absent_reason"] is None


def test_summarize_partial_keeps_the_absent_visible():
    readings = [
        reading("nvml_total_energy", "gpu0", 300.0),
        reading("rapl", "package-0", None, "RAPL energy files not readable by this user (x)"),
    ]
    s = summarize(readings, samples=600, seconds=3.0)
    assert s["energy_j_total"] == pytest.approx(300.0)
    assert s["energy_sources"] == ["nvml_total_energy:gpu0"]
    assert s["energy_absent"] == [
        {
            "source": "rapl",
            "domain": "package-0",
            "reason": "RAPL energy files not readable by this user (x)",
        }
    ]
    assert s["energy_complete"] is False
    assert s["cpu_energy_j"] is None and "not readable" in s["cpu_energy_absent_reason"]


def test_summarize_all_absent_is_none_never_zero():
    readings = [
        reading("nvml", "gpu0", None, "NVML not available: Library Not Found"),
        reading("rapl", "cpu", None, "no RAPL powercap interface (x absent)"),
    ]
    s = summarize(readings, samples=600, seconds=3.0)
    for key in (
        "energy_j_total",
        "average_power_w",
        "energy_per_sample_j",
        "samples_per_s_per_w",
        "gpu_energy_j",
        "cpu_energy_j",
    ):
        assert s[key] is None, key
    assert "Library Not Found" in s["energy_absent_reason"]
    assert "no RAPL powercap interface" in s["energy_absent_reason"]
    assert "Library Not Found" in s["gpu_energy_absent_reason"]
    assert summarize([], 1, 1.0)["energy_absent_reason"] == "no energy meter for this case"
    cpu_only = summarize([reading("rapl", "package-0", 3.0)], 1, 1.0)
    assert cpu_only["gpu_energy_j"] is None and cpu_only["gpu_energy_absent_reason"]


def test_summarize_rejects_empty_windows():
    with pytest.raises(ValueError, match="seconds"):
        summarize([], samples=1, seconds=0.0)
    with pytest.raises(ValueError, match="samples"):
        summarize([], samples=0, seconds=1.0)


def test_absent_meter():
    meter = AbsentMeter("nvml", "gpu0", "because", clock=FakeClock(step=1.0))
    assert meter.describe() == [
        {
            "source": "nvml",
            "domain": "gpu0",
            "available": False,
            "method": None,
            "absent_reason": "because",
        }
    ]
    meter.begin()
    assert meter.end() == [Reading("nvml", "gpu0", None, 1.0, absent_reason="because")]


# ------------------------------------------------------------------ this machine


def test_real_cpu_meters_on_this_machine():
    meters = make_meters("cpu", [])
    for m in meters:
        assert m.describe()
        m.begin()
    sum(itertools.islice(itertools.count(), 100_000))
    readings = [r for m in meters for r in m.end()]
    for m in meters:
        m.close()
    assert readings
    for r in readings:
        assert r.source and r.domain and r.duration_s >= 0
        if r.energy_j is None:
            assert r.absent_reason
        else:
            assert r.energy_j >= 0 and r.absent_reason is None


# ------------------------------------------------------------------ visible devices


class FakeProps:
    def __init__(self, uuid):
        self.uuid = uuid


class FakeCuda:
    """torch.cuda as CUDA sees the devices it may use: one UUID per visible device."""

    def __init__(self, uuids):
        self.uuids = uuids

    def is_available(self):
        return bool(self.uuids)

    def device_count(self):
        return len(self.uuids)

    def get_device_properties(self, index):
        return FakeProps(self.uuids[index])


UUID_A = "8f2a1c3e-1111-2222-3333-444455556666"
UUID_B = "0b9d7e21-aaaa-bbbb-cccc-ddddeeeeffff"


def test_normal_uuid_makes_nvml_and_cuda_spellings_meet():
    assert normal_uuid(f"GPU-{UUID_A.upper()}") == UUID_A
    assert normal_uuid(f"MIG-{UUID_A}".encode()) == UUID_A
    assert normal_uuid(UUID_A.replace("-", "")) == UUID_A


def test_cuda_uuids_come_from_the_devices_cuda_sees():
    assert cuda_uuids(FakeCuda([UUID_B, UUID_A.replace("-", "")])) == [UUID_B, UUID_A]
    assert cuda_uuids(FakeCuda([])) is None


def test_nvml_handle_by_cuda_uuid_ignores_nvml_numbering():
    # Slurm bound GPUs 5 and 2 (cgroups) and CUDA_VISIBLE_DEVICES says "0,1": only the
    # UUIDs say which NVML devices cuda:0 and cuda:1 are.
    nvml = FakeNvml(count=8)
    assert nvml_handle(nvml, 1, uuids=[UUID_B, UUID_A]) == ("uuid", f"GPU-{UUID_A}")
    with pytest.raises(IndexError, match="CUDA sees 2 devices"):
        nvml_handle(nvml, 2, uuids=[UUID_B, UUID_A])


def test_nvml_handle_of_a_mig_instance():
    class MigNvml(FakeNvml):
        def nvmlDeviceGetHandleByUUID(self, uuid):
            if not uuid.startswith("MIG-"):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
            return ("mig", uuid)

    assert nvml_handle(MigNvml(), 0, uuids=[UUID_A]) == ("mig", f"MIG-{UUID_A}")


def test_nvml_handle_defaults_to_cuda_uuids(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(energy_nvml, "cuda_uuids", lambda: [UUID_B])
    assert nvml_handle(FakeNvml(count=8), 0) == ("uuid", f"GPU-{UUID_B}")
