"""The doctor's GPU checks against a fake NVML: each check's ok, bad and absent branch."""

import json
import os
from types import SimpleNamespace

import pynvml
import pytest
import torch

from trainperf.doctor.checks import ABSENT, FAIL, OK, WARN
from trainperf.doctor.gpu import GPU_CHECKS, MACHINE_CHECKS, gpu_checks

KINDS = [*MACHINE_CHECKS, *GPU_CHECKS]


def healthy():
    """The readings of a GPU fit to be measured (an H100 SXM at rest)."""
    return {
        "persistence": 1,
        "app_clocks": {pynvml.NVML_CLOCK_SM: 1755, pynvml.NVML_CLOCK_MEM: 2619},
        "default_clocks": {pynvml.NVML_CLOCK_SM: 1755, pynvml.NVML_CLOCK_MEM: 2619},
        "api_restricted": 1,
        "reasons": pynvml.nvmlClocksEventReasonGpuIdle,
        "pcie": {"gen": 1, "max_gen": 5, "gpu_max_gen": 5, "width": 16, "max_width": 16},
        "ecc": [1, 1],
        "remapped_rows": (0, 0, 0, 0),
        "pages_pending": 0,
        "compute": [],
        "graphics": [],
        "temperature": 33,
        "slowdown": 90,
        "power_mw": (700_000, 700_000),
        "nvlinks": [1] * 18,
        "mig": [0, 0],
        "cuda_driver": 12080,
    }


class FakeNvml:
    """The pynvml calls of trainperf.doctor.gpu; handles are NVML indices. ``unsupported``
    names the calls that raise Not Supported; ``state`` holds the readings (``healthy``)."""

    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS = pynvml.NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS
    NVML_NVLINK_MAX_LINKS = 36

    def __init__(self, count=1, unsupported=(), **changes):
        self.count = count
        self.unsupported = set(unsupported)
        self.state = healthy() | changes
        self.inits = self.shutdowns = 0

    def _read(self, call, key):
        if call in self.unsupported:
            raise pynvml.NVMLError_NotSupported()
        return self.state[key]

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index):
        if index >= self.count:
            raise pynvml.NVMLError_InvalidArgument()
        return index

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle:08d}-1111-2222-3333-444444444444"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for handle in range(self.count):
            if self.nvmlDeviceGetUUID(handle) == uuid:
                return handle
        raise pynvml.NVMLError_NotFound()

    def nvmlDeviceGetIndex(self, handle):
        return handle

    def nvmlSystemGetCudaDriverVersion(self):
        return self._read("nvmlSystemGetCudaDriverVersion", "cuda_driver")

    def nvmlSystemGetDriverVersion(self):
        return "570.86.15"

    def nvmlDeviceGetPersistenceMode(self, handle):
        return self._read("nvmlDeviceGetPersistenceMode", "persistence")

    def nvmlDeviceGetApplicationsClock(self, handle, clock):
        return self._read("nvmlDeviceGetApplicationsClock", "app_clocks")[clock]

    def nvmlDeviceGetDefaultApplicationsClock(self, handle, clock):
        return self._read("nvmlDeviceGetDefaultApplicationsClock", "default_clocks")[clock]

    def nvmlDeviceGetAPIRestriction(self, handle, api):
        assert api == pynvml.NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS
        if "nvmlDeviceGetAPIRestriction" in self.unsupported:
            raise pynvml.NVMLError_NoPermission()
        return self.state["api_restricted"]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._read("nvmlDeviceGetCurrentClocksEventReasons", "reasons")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._read("nvmlDeviceGetCurrPcieLinkGeneration", "pcie")["gen"]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._read("nvmlDeviceGetMaxPcieLinkGeneration", "pcie")["max_gen"]

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle):
        return self._read("nvmlDeviceGetGpuMaxPcieLinkGeneration", "pcie")["gpu_max_gen"]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._read("nvmlDeviceGetCurrPcieLinkWidth", "pcie")["width"]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._read("nvmlDeviceGetMaxPcieLinkWidth", "pcie")["max_width"]

    def nvmlDeviceGetEccMode(self, handle):
        return self._read("nvmlDeviceGetEccMode", "ecc")

    def nvmlDeviceGetRemappedRows(self, handle):
        return self._read("nvmlDeviceGetRemappedRows", "remapped_rows")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        return self._read("nvmlDeviceGetRetiredPagesPendingStatus", "pages_pending")

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._read("nvmlDeviceGetComputeRunningProcesses", "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return self._read("nvmlDeviceGetGraphicsRunningProcesses", "graphics")

    def nvmlSystemGetProcessName(self, pid):
        if pid == 4242:
            raise pynvml.NVMLError_NoPermission()
        return "python"

    def nvmlDeviceGetTemperature(self, handle, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._read("nvmlDeviceGetTemperature", "temperature")

    def nvmlDeviceGetTemperatureThreshold(self, handle, threshold):
        assert threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return self._read("nvmlDeviceGetTemperatureThreshold", "slowdown")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._read("nvmlDeviceGetEnforcedPowerLimit", "power_mw")[0]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle):
        return self._read("nvmlDeviceGetPowerManagementDefaultLimit", "power_mw")[1]

    def nvmlDeviceGetNvLinkState(self, handle, link):
        links = self._read("nvmlDeviceGetNvLinkState", "nvlinks")
        if link >= len(links):
            raise pynvml.NVMLError_InvalidArgument()
        return links[link]

    def nvmlDeviceGetMigMode(self, handle):
        return self._read("nvmlDeviceGetMigMode", "mig")


@pytest.fixture(autouse=True)
def cuda_12_8(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.8")


def by_name(checks):
    return {check.name: check for check in checks}


def gpu0(kind, environ=None, **changes):
    """gpu0's check of this kind on a one-GPU fake with ``changes`` to its readings."""
    return by_name(gpu_checks(nvml=FakeNvml(**changes), environ=environ or {}))[f"gpu0.{kind}"]


def test_a_healthy_machine_is_ok_on_every_line():
    nvml = FakeNvml(count=2)
    checks = gpu_checks(nvml=nvml, environ={})
    names = [check.name for check in checks]
    assert names == [f"gpu.{k}" for k in MACHINE_CHECKS] + [
        f"gpu{i}.{k}" for i in range(2) for k in GPU_CHECKS
    ]
    assert {check.status for check in checks} == {OK}, [c for c in checks if c.status != OK]
    assert (nvml.inits, nvml.shutdowns) == (1, 1)
    for check in checks:
        assert check.why and check.fix is None
        json.dumps(check.document(), allow_nan=False)  # strict JSON
    found = by_name(checks)
    assert found["gpu0.pcie_link"].value == {
        "max_generation": 5,
        "gpu_max_generation": 5,
        "max_width": 16,
        "width": 16,
    }
    assert found["gpu0.pcie_link"].condition and found["gpu0.power_limit"].condition
    assert not found["gpu0.temperature"].condition and not found["gpu0.processes"].condition
    assert "at rest is normal" in found["gpu0.pcie_link"].seen  # Gen1 of Gen5 while idle
    assert found["gpu.driver"].value == {
        "driver": "570.86.15",
        "driver_cuda": "12.8",
        "torch_cuda": "12.8",
    }
    assert found["gpu0.nvlink"].value == {"links": 18, "up": 18}
    assert found["gpu0.clocks"].value["root_only"] is True
    assert "idle" in found["gpu0.clock_events"].seen


@pytest.mark.parametrize(
    "kind, changes, status, seen, fix",
    [
        ("persistence", {"persistence": 0}, WARN, "persistence mode off", "-i 0 -pm 1"),
        (
            "clocks",
            {"app_clocks": {pynvml.NVML_CLOCK_SM: 1410, pynvml.NVML_CLOCK_MEM: 2619}},
            WARN,
            "default 1755 / 2619 MHz",
            "sudo nvidia-smi -i 0 -rac",
        ),
        ("clocks", {"reasons": 0x2}, WARN, "user-defined clock limit is active", "-rgc"),
        (
            "pcie_link",
            {"pcie": {"gen": 4, "max_gen": 4, "gpu_max_gen": 4, "width": 8, "max_width": 16}},
            WARN,
            "trained at x8 of x16",
            "x16 slot",
        ),
        (
            "pcie_link",
            {"pcie": {"gen": 1, "max_gen": 4, "gpu_max_gen": 5, "width": 16, "max_width": 16}},
            WARN,
            "holds it to Gen4",
            "Gen5 in the BIOS",
        ),
        ("ecc", {"ecc": [1, 0]}, WARN, "ECC on now, off after the next", "-e 1"),
        ("retired_memory", {"remapped_rows": (0, 2, 1, 0)}, FAIL, "a remap pending", "-r"),
        ("retired_memory", {"remapped_rows": (0, 2, 0, 1)}, FAIL, "remap failed", "service"),
        ("retired_memory", {"pages_pending": 1}, FAIL, "page retirement pending", "-r"),
        (
            "processes",
            {"compute": [SimpleNamespace(pid=4242, usedGpuMemory=3 * 2**30)]},
            FAIL,
            "1 other process(es) on this GPU: pid 4242 (?, 3.0 GiB)",
            "kill 4242",
        ),
        (
            "processes",
            {"graphics": [SimpleNamespace(pid=77, usedGpuMemory=None)]},
            FAIL,
            "pid 77",
            "kill 77",
        ),
        ("clock_events", {"reasons": 0x1 | 0x20}, WARN, "sw_thermal_slowdown hold", "cooling"),
        ("clock_events", {"reasons": 0x4}, WARN, "sw_power_cap", "power supply"),
        ("temperature", {"temperature": 75}, WARN, "75 °C at rest, slowdown at 90", "airflow"),
        ("temperature", {"slowdown": 0, "temperature": 72}, WARN, "no slowdown threshold", "fans"),
        (
            "power_limit",
            {"power_mw": (450_000, 700_000)},
            WARN,
            "450 W, below the default 700 W",
            "sudo nvidia-smi -i 0 -pl 700",
        ),
        (
            "nvlink",
            {"nvlinks": [1] * 16 + [0, 0]},
            WARN,
            "2 of 18 NVLinks down (links 16, 17)",
            "-s",
        ),
        ("mig", {"mig": [1, 1]}, WARN, "MIG on", "-mig 0"),
        ("mig", {"mig": [0, 1]}, WARN, "on after the next GPU reset", "-mig 0"),
    ],
)
def test_a_bad_reading_warns_or_fails(kind, changes, status, seen, fix):
    check = gpu0(kind, **changes)
    assert check.status == status, check
    assert seen in check.seen and fix in check.fix


@pytest.mark.parametrize(
    "kind, changes, seen",
    [
        ("temperature", {"temperature": 65}, "slowdown at 90"),  # 25 °C below: fine at rest
        ("power_limit", {"power_mw": (800_000, 700_000)}, "above the default"),
        ("nvlink", {"nvlinks": [0] * 18}, "a PCIe card without a bridge"),
        ("processes", {"compute": [SimpleNamespace(pid=os.getpid(), usedGpuMemory=1)]}, "no other"),
        ("pcie_link", {"pcie": {"gen": 2, "max_gen": 4, "width": 16, "max_width": 16}}, "Gen2"),
    ],
)
def test_readings_that_look_odd_but_are_fine(kind, changes, seen):
    if kind == "pcie_link":  # a driver without nvmlDeviceGetGpuMaxPcieLinkGeneration
        nvml = FakeNvml(unsupported={"nvmlDeviceGetGpuMaxPcieLinkGeneration"}, **changes)
        check = by_name(gpu_checks(nvml=nvml, environ={}))["gpu0.pcie_link"]
        assert check.value["gpu_max_generation"] is None
    else:
        check = gpu0(kind, **changes)
    assert check.status == OK and seen in check.seen, check


# each kind with the calls that make it unreadable when none answers
UNREADABLE = {
    "persistence": ["nvmlDeviceGetPersistenceMode"],
    "clocks": ["nvmlDeviceGetApplicationsClock", "nvmlDeviceGetCurrentClocksEventReasons"],
    "pcie_link": ["nvmlDeviceGetCurrPcieLinkWidth"],
    "ecc": ["nvmlDeviceGetEccMode"],
    "retired_memory": ["nvmlDeviceGetRemappedRows", "nvmlDeviceGetRetiredPagesPendingStatus"],
    "processes": ["nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"],
    "clock_events": ["nvmlDeviceGetCurrentClocksEventReasons"],
    "temperature": ["nvmlDeviceGetTemperature"],
    "power_limit": ["nvmlDeviceGetPowerManagementDefaultLimit"],
    "nvlink": ["nvmlDeviceGetNvLinkState"],
    "mig": ["nvmlDeviceGetMigMode"],
}


@pytest.mark.parametrize("kind", list(UNREADABLE))
def test_an_unsupported_call_makes_only_its_check_absent(kind):
    nvml = FakeNvml(unsupported=UNREADABLE[kind])
    checks = by_name(gpu_checks(nvml=nvml, environ={}))
    check = checks[f"gpu0.{kind}"]
    assert check.status == ABSENT and "Not Supported" in check.seen, check
    assert check.value is None and check.condition == GPU_CHECKS[kind].condition
    if kind == "clock_events":  # the clocks check reads the same reasons, and says so
        assert "not read: nvmlDeviceGetCurrentClocksEventReasons" in checks["gpu0.clocks"].seen
    also = {"clocks": {"gpu0.clock_events"}}.get(kind, set())  # the same reasons call
    not_ok = {c.name for c in checks.values() if c.status != OK}
    assert not_ok == {check.name} | also


def test_a_partly_readable_check_says_what_it_could_not_read():
    nvml = FakeNvml(
        unsupported={"nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetAPIRestriction"}
    )
    checks = by_name(gpu_checks(nvml=nvml, environ={}))
    memory = checks["gpu0.retired_memory"]
    assert memory.status == OK and "not read: nvmlDeviceGetRetiredPagesPendingStatus" in memory.seen
    clocks = checks["gpu0.clocks"]
    assert clocks.status == OK and "Insufficient Permissions" in clocks.seen
    assert clocks.value["root_only"] is None


def test_any_user_may_set_clocks_is_said():
    check = gpu0("clocks", api_restricted=0)
    assert check.status == OK and "any user may set them" in check.seen


@pytest.mark.parametrize(
    "cuda_driver, torch_cuda, status, seen",
    [
        (11080, "12.8", FAIL, "CUDA cannot start"),
        (12040, "12.8", WARN, "minor-version compatibility"),
        (12080, None, WARN, "torch is a CPU build"),
        (13000, "12.8", OK, "torch's runtime is CUDA 12.8"),
    ],
)
def test_driver_against_torch_cuda(monkeypatch, cuda_driver, torch_cuda, status, seen):
    monkeypatch.setattr(torch.version, "cuda", torch_cuda)
    checks = by_name(gpu_checks(nvml=FakeNvml(cuda_driver=cuda_driver), environ={}))
    assert checks["gpu.driver"].status == status and seen in checks["gpu.driver"].seen
    assert checks["gpu.driver"].condition


def test_driver_unreadable_is_absent():
    nvml = FakeNvml(unsupported={"nvmlSystemGetCudaDriverVersion"})
    check = by_name(gpu_checks(nvml=nvml, environ={}))["gpu.driver"]
    assert check.status == ABSENT and "Not Supported" in check.seen


@pytest.mark.parametrize(
    "visible, status, seen",
    [
        ("1", OK, "every id is a GPU"),
        ("GPU-00000002", OK, "every id is a GPU"),  # CUDA takes a unique UUID prefix
        ("1,0", OK, "every id is a GPU"),
        ("", WARN, "CUDA sees none of the 3 GPUs"),
        ("0,7", FAIL, "NVML has no GPU '7' (of 3)"),
        ("GPU-deadbeef", FAIL, "NVML has no GPU 'GPU-deadbeef'"),
        ("GPU-0000", FAIL, "NVML has no GPU 'GPU-0000'"),  # ambiguous prefix
        ("٢", FAIL, "NVML has no GPU '٢'"),  # CUDA reads ASCII indices; "٢" is none
    ],
)
def test_cuda_visible_devices_against_nvml(visible, status, seen):
    checks = by_name(gpu_checks(nvml=FakeNvml(count=3), environ={"CUDA_VISIBLE_DEVICES": visible}))
    check = checks["gpu.visible_devices"]
    assert check.status == status and seen in check.seen, check
    if visible == "1":  # cuda:0 is NVML's GPU 1: the fixes name NVML's index
        nvml = FakeNvml(count=3, persistence=0)
        found = by_name(gpu_checks(nvml=nvml, environ={"CUDA_VISIBLE_DEVICES": visible}))
        assert "gpu1.persistence" not in found
        assert found["gpu0.persistence"].fix == "sudo nvidia-smi -i 1 -pm 1"
    if status == FAIL and visible == "0,7":  # the GPUs cannot be matched: absent with why
        assert checks["gpu.persistence"].status == ABSENT
        assert "CUDA's GPUs not found in NVML" in checks["gpu.persistence"].seen
    if status == WARN:
        assert checks["gpu.mig"].seen == "NVML sees no GPU that CUDA may use"


def test_unset_cuda_visible_devices_with_several_gpus_is_fine():
    check = by_name(gpu_checks(nvml=FakeNvml(count=4), environ={}))["gpu.visible_devices"]
    assert check.status == OK and "all 4 GPUs" in check.seen


class MigNvml(FakeNvml):
    """One GPU with MIG on; CUDA is given its instance by UUID."""

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid.startswith("MIG-"):
            return ("mig", 0)
        return super().nvmlDeviceGetHandleByUUID(uuid)

    def nvmlDeviceIsMigDeviceHandle(self, handle):
        return isinstance(handle, tuple)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle):
        return handle[1]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        if index:
            raise pynvml.NVMLError_NotFound()
        return ("mig", handle)

    def nvmlDeviceGetUUID(self, handle):
        if isinstance(handle, tuple):
            return "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
        return super().nvmlDeviceGetUUID(handle)


def test_a_mig_instance_is_a_slice():
    nvml = MigNvml(mig=[1, 1])
    environ = {"CUDA_VISIBLE_DEVICES": "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"}
    checks = by_name(gpu_checks(nvml=nvml, environ=environ))
    assert checks["gpu.visible_devices"].status == OK
    mig = checks["gpu0.mig"]
    assert mig.status == WARN and "MIG instance" in mig.seen
    assert mig.value == {"enabled": True, "pending": True, "instance": True}
    assert checks["gpu0.persistence"].fix is None  # device-wide readings from the parent GPU


def test_a_lost_gpu_fails():
    nvml = FakeNvml()

    def lost(handle):
        raise pynvml.NVMLError_GpuIsLost()

    nvml.nvmlDeviceGetPersistenceMode = lost
    check = by_name(gpu_checks(nvml=nvml, environ={}))["gpu0.persistence"]
    assert check.status == FAIL and "lost" in check.seen and check.fix


def test_without_nvml_every_gpu_line_is_absent_with_the_reason():
    class NoLibrary:
        def nvmlInit(self):
            raise pynvml.NVMLError_LibraryNotFound()

    checks = gpu_checks(nvml=NoLibrary(), environ={})
    assert [c.name for c in checks] == [f"gpu.{kind}" for kind in KINDS]
    for check in checks:
        assert check.status == ABSENT
        assert check.seen == "no NVML: NVML Shared Library Not Found"
        assert check.document()["value_absent_reason"] == check.seen


def test_without_gpus_the_gpu_lines_are_absent():
    checks = by_name(gpu_checks(nvml=FakeNvml(count=0), environ={}))
    assert checks["gpu.visible_devices"].status == OK
    assert checks["gpu.nvlink"].status == ABSENT
    assert checks["gpu.nvlink"].seen == "NVML sees no GPU that CUDA may use"


def test_on_this_machine_it_says_why():
    checks = gpu_checks()  # its time: benchmarks/doctor_time.py
    assert checks and all(c.status in (OK, WARN, FAIL, ABSENT) for c in checks)
    if all(c.status == ABSENT for c in checks):  # no NVML here
        assert checks[0].seen.startswith("no NVML: ")
