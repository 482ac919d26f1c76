"""Energy and context of a whole case: the probes' window is the measured steps."""

from types import SimpleNamespace

import pynvml
import pytest
import torch

from trainperf import benchmark
from trainperf.case import make_case
from trainperf.measure import probes as probes_module
from trainperf.measure.energy_rapl import RaplEnergy
from trainperf.measure.probes import probe_metrics


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


# ------------------------------------------------------------------ GPUs, against a fake NVML


class FakeGpus:
    """The pynvml calls of the probes for ``count`` GPUs: each GPU's energy counter gains
    ``joules[i]`` J per read, its power-cap violation counter ``violation_ns`` per read;
    ``no_counter`` GPUs have neither an energy counter nor a power reading; every GPU
    reports the clocks-event reasons ``mask``."""

    NVMLError = pynvml.NVMLError

    def __init__(self, count=2, joules=(10.0, 30.0), no_counter=(), violation_ns=0):
        self.count, self.joules, self.no_counter = count, joules, set(no_counter)
        self.violation_step, self.mask = violation_ns, 0
        self.energy_mj = [0] * count
        self.violation = [0] * count
        self.opened = 0

    def nvmlInit(self):
        self.opened += 1

    def nvmlShutdown(self):
        self.opened -= 1

    def nvmlDeviceGetHandleByIndex(self, index):
        if index >= self.count:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def _supported(self, handle):
        if handle in self.no_counter:
            raise pynvml.NVMLError_NotSupported()

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self._supported(handle)
        self.energy_mj[handle] += int(self.joules[handle] * 1000)
        return self.energy_mj[handle]

    def nvmlDeviceGetPowerUsage(self, handle):
        self._supported(handle)
        return 300_000

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return 1500

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 60

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.mask

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        if policy == pynvml.NVML_PERF_POLICY_POWER:
            self.violation[handle] += self.violation_step
            return SimpleNamespace(referenceTime=0, violationTime=self.violation[handle])
        return SimpleNamespace(referenceTime=0, violationTime=0)


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    # The sampler thread stays asleep: the tests take the window's samples themselves.
    monkeypatch.setattr(probes_module, "SAMPLE_INTERVAL_S", 1000.0)


def probe_window(nvml, indices, samples=0, mask_during=0, read_cpu_energy=False):
    """Probes around a window in which the GPUs report ``mask_during`` (0 at the edges)."""
    probes = probes_module.CaseProbes(
        torch.device("cuda", 0), read_cpu_energy, device_indices=indices, nvml=nvml
    )
    probes.begin()
    nvml.mask = mask_during
    for _ in range(samples):
        probes.window.sample()
    nvml.mask = 0
    probes.end()
    return probes, probe_metrics(
        probes.readings, 10, 2.0, probes.start_contexts, probes.end_contexts, "cuda"
    )


def test_data_parallel_meters_and_sums_every_gpu(fake_cuda):
    probes, m = probe_window(FakeGpus(count=2), [0, 1])
    assert m["energy_sources"] == ["nvml_total_energy:gpu0", "nvml_total_energy:gpu1"]
    assert m["gpu_energy_j"] == pytest.approx(40.0)  # 10 J + 30 J, not GPU 0's 10 J
    assert m["energy_per_sample_j"] == pytest.approx(4.0)
    assert m["energy_complete"] is True
    assert m["gpu_power_w_mean"] == pytest.approx(600.0)  # the window's, both GPUs
    assert [c["index"] for c in m["context_start"]] == [0, 1]
    assert [c["index"] for c in m["context_end"]] == [0, 1]
    assert probes.start_context["index"] == 0  # one device per rank under ddp: the same dict


def test_data_parallel_is_incomplete_when_one_gpu_is_not_metered(fake_cuda):
    _, m = probe_window(FakeGpus(count=2, no_counter=[1]), [0, 1])
    assert m["energy_complete"] is False
    assert m["gpu_energy_j"] == pytest.approx(10.0)
    assert "gpu1" in m["gpu_energy_absent_reason"]


def test_a_power_cap_during_the_window_is_seen_by_the_violation_counter(fake_cuda):
    # Both edges read no reason (the GPU idles after the synchronize), but the power
    # violation counter grew by 5 ms between them.
    _, m = probe_window(FakeGpus(count=1, violation_ns=5_000_000), [0])
    assert m["throttled"] is True and m["throttle_reasons"] == ["power_cap_violation"]


def test_reasons_clock_and_power_sampled_during_the_window(fake_cuda):
    nvml = FakeGpus(count=1)
    mask = pynvml.nvmlClocksThrottleReasonSwThermalSlowdown
    _, m = probe_window(nvml, [0], samples=3, mask_during=mask)
    window = m["context_end"][0]["window"]
    assert window["samples"] == 3
    assert window["sm_clock_mhz_mean"] == 1500 and window["power_w_mean"] == 300.0
    assert m["sm_clock_mhz_mean"] == 1500 and m["gpu_power_w_mean"] == 300.0
    assert "sw_thermal_slowdown" in m["throttle_reasons"]
    assert nvml.opened == 0  # every nvmlInit has its shutdown


def test_a_data_parallel_case_probes_every_gpu_it_uses(monkeypatch):
    seen = {}

    class Stop(Exception):
        pass

    def reset_peak(device, indices=None):
        seen["indices"] = indices
        raise Stop

    monkeypatch.setattr(benchmark, "reset_peak", reset_peak)
    case = make_case(model="cifarnet", batch_size=4, device="cuda", devices=3, parallel="dp")
    with pytest.raises(Stop):
        benchmark.run_case(case)
    assert seen["indices"] == [0, 1, 2]


def test_probes_of_a_jax_case_never_touch_torchs_cuda(fake_cuda, monkeypatch):
    """A JAX worker must not initialise torch's CUDA (its own CUDA libraries would meet
    torch's): no synchronize, no device properties; NVML's devices are found through
    CUDA_VISIBLE_DEVICES, as CUDA numbers them."""

    def touched(*args, **kwargs):
        raise AssertionError("torch's CUDA was used")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    for name in ("synchronize", "get_device_properties", "device_count", "init"):
        monkeypatch.setattr(torch.cuda, name, touched)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    nvml = FakeGpus(count=2, joules=(10.0, 30.0))
    probes = probes_module.CaseProbes(
        torch.device("cuda", 0), False, device_indices=[0, 1], nvml=nvml, torch_cuda=False
    )
    probes.begin()
    probes.window.sample()
    probes.end()
    m = probe_metrics(probes.readings, 10, 2.0, probes.start_contexts, probes.end_contexts, "cuda")
    # cuda:0 is NVML's GPU 1 (30 J per read), cuda:1 NVML's GPU 0 (10 J).
    assert [(r.domain, r.energy_j) for r in probes.readings] == [("gpu0", 30.0), ("gpu1", 10.0)]
    assert m["energy_complete"] is True and m["gpu_power_w_mean"] == pytest.approx(600.0)
    assert [c["index"] for c in m["context_end"]] == [0, 1]
