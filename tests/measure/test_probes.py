"""Energy and context of a whole case: the probes' window is the measured steps."""

from types import SimpleNamespace

import pynvml
import pytest
import torch

from trainperf.case.spec import make_case
from trainperf.measure import probes as probes_module
from trainperf.measure.energy_rapl import RaplEnergy
from trainperf.measure.probes import probe_metrics
from trainperf.step import benchmark


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
    """The pynvml calls of the probes for ``count`` GPUs of compute capability 9.0 (H100):
    each GPU's energy counter gains ``joules[i]`` J per read, its violation counter of
    ``violation_policy`` (power cap by default) ``violation_ns`` per read; ``no_counter``
    GPUs have neither an energy counter nor a power reading; every GPU reports the
    clocks-event reasons ``mask`` and the SM clock ``clock_mhz``; the instantaneous power
    field gives ``instant_mw`` (None: the driver answers NotSupported), the averaged
    ``nvmlDeviceGetPowerUsage`` 300 W."""

    NVMLError = pynvml.NVMLError
    NVML_FI_DEV_POWER_INSTANT = pynvml.NVML_FI_DEV_POWER_INSTANT

    def __init__(
        self,
        count=2,
        joules=(10.0, 30.0),
        no_counter=(),
        violation_ns=0,
        violation_policy=pynvml.NVML_PERF_POLICY_POWER,
        instant_mw=None,
    ):
        self.count, self.joules, self.no_counter = count, joules, set(no_counter)
        self.violation_step, self.violation_policy = violation_ns, violation_policy
        self.mask, self.clock_mhz, self.instant_mw = 0, 1500, instant_mw
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

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        self._supported(handle)
        assert list(field_ids) == [pynvml.NVML_FI_DEV_POWER_INSTANT]
        values = (pynvml.c_nvmlFieldValue_t * 1)()
        values[0].fieldId = field_ids[0]
        if self.instant_mw is None:
            values[0].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        else:
            values[0].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
            values[0].value.uiVal = self.instant_mw
        return values

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return (9, 0)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return self.clock_mhz

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 60

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.mask

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        if policy == self.violation_policy:
            self.violation[handle] += self.violation_step
            return SimpleNamespace(referenceTime=0, violationTime=self.violation[handle])
        return SimpleNamespace(referenceTime=0, violationTime=0)


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    # The sampler thread stays asleep: the tests take the window's samples themselves.
    monkeypatch.setattr(probes_module, "SAMPLE_INTERVAL_S", 1000.0)


def probe_window(
    nvml, indices, samples=0, mask_during=0, read_cpu_energy=False, masks=None, clocks=None
):
    """Probes around a window in which the GPUs report ``mask_during`` (0 at the edges),
    or sample by sample the reasons ``masks`` and SM clocks ``clocks``; 2 s long."""
    probes = probes_module.CaseProbes(
        torch.device("cuda", 0), read_cpu_energy, device_indices=indices, nvml=nvml
    )
    probes.begin()
    masks = masks if masks is not None else [mask_during] * samples
    clocks = clocks if clocks is not None else [nvml.clock_mhz] * len(masks)
    for mask, clock in zip(masks, clocks, strict=True):
        nvml.mask, nvml.clock_mhz = mask, clock
        probes.window.sample()
    nvml.mask = 0
    probes.end()
    return probes, probe_metrics(
        probes.readings, 10, 2.0, probes.start_contexts, probes.end_contexts, "cuda"
    )


def flagged(metrics):
    """The run's stability after the GPU's verdict, from a stable start."""
    metrics |= {"unstable": False, "unstable_reasons": []}
    benchmark.flag_gpu_instability(metrics)
    return metrics["unstable"], metrics["unstable_reasons"]


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


def test_a_power_cap_seen_by_the_violation_counter_is_a_condition(fake_cuda):
    # Both edges read no reason (the GPU idles after the synchronize), but the power
    # violation counter grew by 5 ms between them: a share of the 2 s window, no slowdown.
    _, m = probe_window(FakeGpus(count=1, violation_ns=5_000_000), [0])
    assert m["throttled"] is False and m["throttle_reasons"] == []
    assert m["violation_shares"]["power_cap"] == pytest.approx(0.0025)
    assert flagged(m) == (False, [])


def test_a_thermal_violation_counter_that_grew_is_a_thermal_slowdown(fake_cuda):
    nvml = FakeGpus(
        count=1, violation_ns=400_000_000, violation_policy=pynvml.NVML_PERF_POLICY_THERMAL
    )
    _, m = probe_window(nvml, [0], samples=2)
    assert m["throttled"] is True and m["throttle_reasons"] == ["thermal_violation"]
    assert flagged(m) == (True, ["thermal slowdown (thermal_violation) 20% of the window"])


def test_an_h100_at_its_power_cap_all_window_is_not_unstable(fake_cuda):
    nvml = FakeGpus(count=1, violation_ns=2_000_000_000, instant_mw=699_000)
    cap = pynvml.nvmlClocksEventReasonSwPowerCap
    # At the cap the boost clock dithers between neighbouring 15 MHz steps.
    _, m = probe_window(nvml, [0], masks=[cap] * 8, clocks=[1755, 1770, 1740, 1755] * 2)
    assert m["power_capped_share"] == 1.0
    assert m["clocks_event_shares"] == {"sw_power_cap": 1.0}
    assert m["violation_shares"]["power_cap"] == pytest.approx(1.0)
    assert m["sm_clock_cv"] < 0.02
    assert m["throttled"] is False and m["throttle_reasons"] == []
    assert flagged(m) == (False, [])


def test_a_thermal_slowdown_is_unstable_and_named_with_its_share(fake_cuda):
    thermal = pynvml.nvmlClocksEventReasonHwThermalSlowdown
    cap = pynvml.nvmlClocksEventReasonSwPowerCap
    _, m = probe_window(FakeGpus(count=1), [0], masks=[thermal | cap] * 3 + [cap] * 7)
    assert m["throttled"] is True and m["throttle_reasons"] == ["hw_thermal_slowdown"]
    assert m["clocks_event_shares"]["hw_thermal_slowdown"] == pytest.approx(0.3)
    assert m["power_capped_share"] == 1.0
    assert flagged(m) == (True, ["thermal slowdown (hw_thermal_slowdown) 30% of the window"])


def test_clocks_that_varied_during_the_window_are_unstable_whatever_the_reason(fake_cuda):
    cap = pynvml.nvmlClocksEventReasonSwPowerCap
    clocks = [1980, 1980, 1600, 1600, 1980, 1500]
    _, m = probe_window(FakeGpus(count=1), [0], masks=[cap] * 6, clocks=clocks)
    assert m["throttled"] is False and m["sm_clock_cv"] > 0.02
    unstable, reasons = flagged(m)
    assert unstable and len(reasons) == 1
    assert reasons[0].startswith(f"SM clock varied {m['sm_clock_cv']:.1%} during the window")


def test_a_short_window_has_no_clock_variation_and_says_why(fake_cuda):
    _, m = probe_window(FakeGpus(count=1), [0], samples=1)
    assert m["sm_clock_cv"] is None and "fewer than 2" in m["sm_clock_cv_absent_reason"]
    assert m["power_capped_share"] == 0.0 and m["clocks_event_shares"] == {}
    assert flagged(m) == (False, [])


def test_the_window_power_is_the_instant_field_or_the_labelled_average(fake_cuda):
    _, m = probe_window(FakeGpus(count=1, instant_mw=650_000), [0], samples=2)
    assert m["gpu_power_w_mean"] == pytest.approx(650.0)
    assert m["gpu_power_source"] == "instant (NVML_FI_DEV_POWER_INSTANT)"
    assert m["context_end"][0]["power_source"] == m["gpu_power_source"]
    _, m = probe_window(FakeGpus(count=1, instant_mw=None), [0], samples=2)
    assert m["gpu_power_w_mean"] == pytest.approx(300.0)
    assert m["gpu_power_source"] == "1 s average (nvmlDeviceGetPowerUsage)"
    window = m["context_end"][0]["window"]
    assert "Not Supported" in window["power_instant_absent_reason"]
    # Energy stays the counter's: 10 J over the window whatever the power reading.
    assert m["energy_sources"] == ["nvml_total_energy:gpu0"]
    assert m["gpu_energy_j"] == pytest.approx(10.0)


def test_reasons_clock_and_power_sampled_during_the_window(fake_cuda):
    nvml = FakeGpus(count=1)
    mask = pynvml.nvmlClocksThrottleReasonSwThermalSlowdown
    _, m = probe_window(nvml, [0], samples=3, mask_during=mask)
    window = m["context_end"][0]["window"]
    assert window["samples"] == 3
    assert window["sm_clock_mhz_mean"] == 1500 and window["power_w_mean"] == 300.0
    assert m["sm_clock_mhz_mean"] == 1500 and m["gpu_power_w_mean"] == 300.0
    assert m["throttle_reasons"] == ["sw_thermal_slowdown"]
    assert m["clocks_event_shares"] == {"sw_thermal_slowdown": 1.0}
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
