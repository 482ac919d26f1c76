from types import SimpleNamespace

import pynvml
import pytest

from trainperf.measure.clock_events import decode_throttle_reasons, slowdowns, violations_between
from trainperf.measure.gpu_context import WindowSampler, cpu_context, gpu_context
from trainperf.measure.gpu_power import POWER_USAGE_UNKNOWN


class FakeNvml:
    """The pynvml functions gpu_context calls; ``unsupported`` names the calls that fail."""

    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU

    def __init__(self, mask=0, unsupported=(), old_driver=False):
        self.mask = mask
        self.unsupported = set(unsupported)
        self.old_driver = old_driver
        self.inits = self.shutdowns = 0

    def _check(self, name):
        if name in self.unsupported:
            raise pynvml.NVMLError_NotSupported()

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("handle", index)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        self._check("clock")
        return {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 2619}[kind]

    def nvmlDeviceGetTemperature(self, handle, sensor):
        self._check("temperature")
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return 61

    def nvmlDeviceGetPowerUsage(self, handle):
        self._check("power")
        return 412_345

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        if self.old_driver:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        self._check("reasons")
        return self.mask

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        self._check("reasons")
        return self.mask

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        """Cumulative ns per policy: ``violations[policy]``, 0 when not set."""
        self._check("violation")
        ns = getattr(self, "violations", {}).get(policy, 0)
        return SimpleNamespace(referenceTime=0, violationTime=ns)


@pytest.fixture(autouse=True)
def no_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_decode_every_named_bit():
    names = [
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "display_clock_setting",
    ]
    for i, name in enumerate(names):
        assert decode_throttle_reasons(1 << i, pynvml) == [name]
    assert decode_throttle_reasons(0, pynvml) == []
    assert decode_throttle_reasons(pynvml.nvmlClocksThrottleReasonSwPowerCap, pynvml) == [
        "sw_power_cap"
    ]
    # Without constants in the module the nvml.h values apply; unknown bits stay visible.
    assert decode_throttle_reasons(0x44 | 0x1000, object()) == [
        "sw_power_cap",
        "hw_thermal_slowdown",
        "unknown_0x1000",
    ]


def test_gpu_context_reads_everything():
    nvml = FakeNvml(mask=0x1 | 0x4)
    ctx = gpu_context(nvml, 0)
    assert ctx["sm_clock_mhz"] == 1980 and ctx["mem_clock_mhz"] == 2619
    assert ctx["temperature_c"] == 61
    assert ctx["power_w"] == pytest.approx(412.345)
    # No instantaneous power field nor compute capability in this fake: the reading says so.
    assert ctx["power_source"] == POWER_USAGE_UNKNOWN
    assert ctx["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]
    assert ctx["throttle_reasons_mask"] == 5
    assert ctx["absent"] == {}
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_gpu_context_old_driver_uses_throttle_reasons():
    ctx = gpu_context(FakeNvml(mask=0x40, old_driver=True), 0)
    assert ctx["throttle_reasons"] == ["hw_thermal_slowdown"]


def test_gpu_context_unsupported_values_are_absent_with_reason():
    nvml = FakeNvml(unsupported={"clock", "power", "reasons"})
    ctx = gpu_context(nvml, 1)
    assert ctx["index"] == 1 and ctx["temperature_c"] == 61
    for key in ("sm_clock_mhz", "mem_clock_mhz", "power_w", "power_source", "throttle_reasons"):
        assert ctx[key] is None
        assert "Not Supported" in ctx["absent"][key]
    assert "temperature_c" not in ctx["absent"]
    assert nvml.shutdowns == 1


def test_gpu_context_without_nvml():
    class Broken:
        def nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    ctx = gpu_context(Broken(), 0)
    assert ctx["sm_clock_mhz"] is None and ctx["throttle_reasons"] is None
    assert all(r.startswith("NVML not available: ") for r in ctx["absent"].values())
    assert set(ctx["absent"]) >= {"sm_clock_mhz", "temperature_c", "power_w"}


def test_slowdowns_are_thermal_and_hardware_only_a_power_cap_is_a_condition():
    start = {"throttle_reasons": ["gpu_idle", "applications_clocks_setting"]}
    end = {"throttle_reasons": ["sw_power_cap", "hw_thermal_slowdown", "sync_boost"]}
    assert slowdowns(start, start) == []
    assert slowdowns(start, end) == ["hw_thermal_slowdown"]
    assert slowdowns({"throttle_reasons": ["hw_slowdown"]}, end) == [
        "hw_slowdown",
        "hw_thermal_slowdown",
    ]
    assert slowdowns({"throttle_reasons": None}, {}) == []


class Freq:
    def __init__(self, current, max):
        self.current, self.max = current, max


def test_cpu_context_with_fake_thermal_tree(tmp_path):
    zone = tmp_path / "thermal_zone0"
    zone.mkdir()
    (zone / "temp").write_text("47500\n")
    (zone / "type").write_text("x86_pkg_temp\n")
    ctx = cpu_context(thermal_root=tmp_path, cpu_freq=lambda: Freq(2700.0, 0.0))
    assert ctx["cpu_freq_mhz"] == 2700.0
    assert ctx["cpu_freq_max_mhz"] is None and "no max" in ctx["absent"]["cpu_freq_max_mhz"]
    assert ctx["thermal_zones"] == [
        {"zone": "thermal_zone0", "type": "x86_pkg_temp", "temp_c": 47.5}
    ]


def test_cpu_context_absent(tmp_path):
    ctx = cpu_context(thermal_root=tmp_path / "none", cpu_freq=lambda: None)
    assert ctx["cpu_freq_mhz"] is None and ctx["thermal_zones"] is None
    assert ctx["absent"]["cpu_freq_mhz"] == "psutil.cpu_freq gives nothing on this machine"
    assert ctx["absent"]["thermal_zones"].startswith("no thermal zones under ")


def test_cpu_context_on_this_machine():
    ctx = cpu_context()
    for key in ("cpu_freq_mhz", "cpu_freq_max_mhz", "thermal_zones"):
        assert (ctx[key] is None) == (key in ctx["absent"])
        if ctx[key] is None:
            assert ctx["absent"][key]


def test_violation_counters_are_read_and_their_growth_is_a_slowdown():
    nvml = FakeNvml()
    nvml.violations = {pynvml.NVML_PERF_POLICY_THERMAL: 1_000}
    start = gpu_context(nvml, 0)
    nvml.violations = {pynvml.NVML_PERF_POLICY_THERMAL: 2_000_001_000}
    end = gpu_context(nvml, 0)
    assert start["violation_ns"]["thermal"] == 1_000 and start["violation_ns"]["power_cap"] == 0
    assert violations_between(start, end)["thermal"] == pytest.approx(2.0)
    # Neither edge reports a reason: the counter alone tells of the slowdown in between.
    assert slowdowns(start, end) == ["thermal_violation"]
    assert slowdowns(start, start) == []
    # The power-cap counter growing is a condition, not a slowdown.
    nvml.violations = {pynvml.NVML_PERF_POLICY_POWER: 2_000_000_000}
    assert slowdowns(start, gpu_context(nvml, 0)) == []


def test_violation_counters_not_supported_are_absent():
    ctx = gpu_context(FakeNvml(unsupported={"violation"}), 0)
    assert ctx["violation_ns"] is None and "Not Supported" in ctx["absent"]["violation_ns"]


def test_window_sampler_means_and_reasons_seen_between_the_edges():
    nvml = FakeNvml(mask=0)
    sampler = WindowSampler(nvml, [0], interval_s=1000.0)  # the test takes the samples
    sampler.begin()
    sampler.sample()
    nvml.mask = 0x4  # a power cap, over before the end edge
    sampler.sample()
    nvml.mask = 0
    window = sampler.end()[0]
    assert window["samples"] == 2 and window["sm_clock_mhz_mean"] == 1980
    assert window["sm_clock_cv"] == 0.0
    assert window["power_w_mean"] == pytest.approx(412.345)
    assert window["power_source"] == POWER_USAGE_UNKNOWN
    assert "power_instant_absent_reason" in window
    assert window["clocks_event_shares"] == {"sw_power_cap": 0.5}
    assert slowdowns({}, {"window": window}) == []
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_window_sampler_clock_variation_leaves_out_idle_samples():
    nvml = FakeNvml(mask=0)
    sampler = WindowSampler(nvml, [0], interval_s=1000.0)
    sampler.begin()
    sampler.sample()
    sampler.sample()
    nvml.mask = 0x1  # idle as the window closes: its clock says nothing of the work
    nvml.nvmlDeviceGetClockInfo = lambda handle, kind: 210
    sampler.sample()
    window = sampler.end()[0]
    assert window["sm_clock_cv"] == 0.0
    assert window["sm_clock_mhz_mean"] == pytest.approx((1980 * 2 + 210) / 3)
    assert window["clocks_event_shares"] == {"gpu_idle": pytest.approx(1 / 3)}


def test_window_sampler_unreadable_values_are_absent_with_the_reason():
    sampler = WindowSampler(FakeNvml(unsupported={"clock", "reasons"}), [0], interval_s=1000.0)
    sampler.begin()
    sampler.sample()
    window = sampler.end()[0]
    for key in ("sm_clock_mhz_mean", "sm_clock_cv", "clocks_event_shares"):
        assert window[key] is None and "Not Supported" in window[f"{key}_absent_reason"]
    assert window["power_w_mean"] == pytest.approx(412.345)
    assert "power_w_mean_absent_reason" not in window


def test_window_sampler_short_window_takes_one_sample_and_without_nvml_is_absent():
    sampler = WindowSampler(FakeNvml(), [0], interval_s=1000.0)
    sampler.begin()
    assert sampler.end()[0]["samples"] == 1

    class Broken:
        def nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    sampler = WindowSampler(Broken(), [0, 1])
    sampler.begin()
    ends = sampler.end()
    assert set(ends) == {0, 1} and ends[1]["absent"].startswith("NVML not available")
