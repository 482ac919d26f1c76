import copy
import io
import os
import time
from types import SimpleNamespace

import pytest
from rich.console import Console

from trainperf.report.system import system_view
from trainperf.system import gpu as system_gpu
from trainperf.system import inventory as system

BUS_IDS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:9A:00.0"]
SWITCH_BUS_ID = "00000000:C0:00.0"


class NVMLError(Exception):
    """Like pynvml's: a code, and one subclass per code."""

    def __init__(self, value):
        self.value = value

    def __str__(self):
        return {2: "Invalid Argument", 3: "Not Supported"}[self.value]


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's name)
    def __init__(self):
        super().__init__(3)


class FakeNvml:
    """The NVML calls trainperf.system.inventory makes, answering for ``count`` GPUs: two H200s
    joined by 18 NVLinks, and a third GPU (no NVLink) in the other NUMA node, reached
    through SYS."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_NVLINK_MAX_LINKS = 36

    def __init__(self, count=2):
        self.count = count
        self.shutdown = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H200"

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return (9, 0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        class Info:
            total = 150_754_820_096

        return Info()

    def nvmlSystemGetDriverVersion(self):
        return "570.1"

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle:08d}-0000-0000-0000-000000000000"

    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(busId=BUS_IDS[handle].encode())

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        return {self.NVML_CLOCK_SM: 1980, self.NVML_CLOCK_MEM: 3201}[clock]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 700_000  # mW

    def nvmlDeviceGetCpuAffinity(self, handle, words):
        mask = 0xFF if handle < 2 else 0xFF00  # CPUs 0-7, or 8-15
        return [mask] + [0] * (words - 1)

    def nvmlDeviceGetNumaNodeId(self, handle):
        return 0 if handle < 2 else 1

    def nvmlDeviceGetNvLinkState(self, handle, link):
        if handle == 2:
            raise NVMLError_NotSupported()
        if link >= 18:  # H200: 18 links, the rest of NVML_NVLINK_MAX_LINKS is invalid
            raise NVMLError(2)
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
        return SimpleNamespace(busId=BUS_IDS[1 - handle].encode())

    def nvmlDeviceGetTopologyCommonAncestor(self, first, second):
        return 50 if 2 in (first, second) else 40  # SYS, NODE


class SwitchNvml(FakeNvml):
    """Three GPUs whose 18 links each go to NVSwitches (HGX): no GPU-to-GPU link."""

    def __init__(self):
        super().__init__(count=3)

    def nvmlDeviceGetNvLinkState(self, handle, link):
        if link >= 18:
            raise NVMLError(2)
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
        return SimpleNamespace(busId=SWITCH_BUS_ID.encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):
        return 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH


class NoPowerLimitNvml(FakeNvml):
    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        raise NVMLError_NotSupported()


@pytest.fixture(autouse=True)
def cuda_sees_what_nvml_numbers(monkeypatch):
    """The fakes number GPUs by index: no real GPU's UUIDs, no CUDA_VISIBLE_DEVICES."""
    from trainperf.measure import energy_nvml

    monkeypatch.setattr(energy_nvml, "cuda_uuids", lambda cuda=None: None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


class BrokenNvml:
    def nvmlInit(self):
        raise RuntimeError("NVML Shared Library Not Found")


def test_gpu_inventory_from_nvml():
    nvml = FakeNvml()
    gpus, absent = system_gpu.gpu_inventory(nvml)
    assert absent is None and nvml.shutdown
    assert [g["name"] for g in gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert gpus[0]["capability"] == [9, 0]
    assert gpus[0]["memory_bytes"] == 150_754_820_096
    assert gpus[1]["driver"] == "570.1"


def test_gpu_details_from_nvml():
    gpu = system_gpu.gpu_inventory(FakeNvml(count=3))[0][2]
    assert gpu["uuid"] == "GPU-00000002-0000-0000-0000-000000000000"
    assert gpu["pci_bus_id"] == "0000:9a:00.0"
    assert (gpu["max_sm_clock_mhz"], gpu["max_mem_clock_mhz"]) == (1980, 3201)
    assert gpu["power_limit_w"] == 700.0
    assert (gpu["numa_node"], gpu["cpu_affinity"]) == (1, "8-15")
    # No CUDA context on this machine, and NVML cannot count SMs: absent, with the reason.
    assert "multiprocessors" not in gpu and "CUDA context" in gpu["multiprocessors_absent_reason"]


def test_topology_matrix_like_nvidia_smi():
    found = system_gpu.nvml_inventory(FakeNvml(count=3))
    assert "topology_absent_reason" not in found
    assert found["topology"]["gpus"] == ["GPU0", "GPU1", "GPU2"]
    assert found["topology"]["matrix"] == [
        ["X", "NV18", "SYS"],
        ["NV18", "X", "SYS"],
        ["SYS", "SYS", "X"],
    ]


def test_topology_through_nvswitch():
    matrix = system_gpu.nvml_inventory(SwitchNvml())["topology"]["matrix"]
    assert matrix == [["X", "NV18", "NV18"], ["NV18", "X", "NV18"], ["NV18", "NV18", "X"]]


def test_one_gpu_has_no_topology():
    found = system_gpu.nvml_inventory(FakeNvml(count=1))
    assert len(found["gpus"]) == 1 and "gpus_absent_reason" not in found
    assert found["topology"]["matrix"] == [] and "1 GPU" in found["topology_absent_reason"]


def test_unsupported_power_limit_is_absent_not_zero():
    gpus, _ = system_gpu.gpu_inventory(NoPowerLimitNvml())
    for gpu in gpus:
        assert "power_limit_w" not in gpu
        assert "Not Supported" in gpu["power_limit_w_absent_reason"]
    assert gpus[0]["max_sm_clock_mhz"] == 1980  # the other fields are still read


def test_nvml_failing_midway_is_absent_with_reason():
    class FailingNvml(FakeNvml):
        def nvmlDeviceGetCount(self):
            raise NVMLError(2)

    nvml = FailingNvml()
    found = system_gpu.nvml_inventory(nvml)
    assert found["gpus"] == [] and "Invalid Argument" in found["gpus_absent_reason"]
    assert found["topology_absent_reason"] and nvml.shutdown


def test_no_nvml_is_absent_with_reason():
    gpus, absent = system_gpu.gpu_inventory(BrokenNvml())
    assert gpus == [] and "Not Found" in absent


def test_real_inventory_of_this_machine():
    record = system.collect(BrokenNvml())
    cpu = record["cpu"]
    assert cpu["model"] and cpu["cores"] >= 1 and cpu["threads"] >= cpu["cores"]
    assert cpu["sockets"] >= 1 and cpu["arch"]
    assert len(cpu["numa_nodes"]) >= 1 and cpu["numa_nodes"][0]["cpus"]
    assert isinstance(cpu["flags"], list) and cpu["flags"]
    for key in ("min_mhz", "max_mhz", "base_mhz"):  # a VM may not say: then it tells why
        assert cpu.get(key, 0) > 0 or cpu[f"{key}_absent_reason"]
    assert record["memory"]["total_bytes"] == record["memory_bytes"] > 0
    assert 0 < record["memory"]["available_bytes"] <= record["memory_bytes"]
    assert isinstance(record["network"], list)
    assert all(a["name"] != "lo" and a.get("speed_mbps") != 0 for a in record["network"])
    assert record["software"]["torch"].startswith("2.13")
    assert record["software"]["num_threads"] >= 1
    assert record["gpus"] == [] and record["gpus_absent_reason"].startswith("NVML not available")
    assert record["topology"]["matrix"] == [] and record["topology_absent_reason"]
    assert record["infiniband"] or record["infiniband_absent_reason"]


def test_cpu_without_proc_cpuinfo_asks_py_cpuinfo(monkeypatch):
    info = {"brand_raw": "Apple M3", "vendor_id_raw": "Apple", "flags": ["bf16", "i8mm", "x"]}
    monkeypatch.setattr(system, "_proc_cpuinfo", lambda: None)
    monkeypatch.setitem(
        __import__("sys").modules, "cpuinfo", SimpleNamespace(get_cpu_info=lambda: info)
    )
    cpu = system.cpu_section()
    assert (cpu["model"], cpu["vendor"], cpu["flags"]) == ("Apple M3", "Apple", ["bf16", "i8mm"])


def test_collect_and_fingerprint_are_stable():
    a = system.collect(BrokenNvml())
    b = system.collect(BrokenNvml())
    assert a["fingerprint"] == b["fingerprint"]
    assert len(a["fingerprint"]) == 16
    assert a["cpu"]["threads"] >= 1 and a["memory_bytes"] > 0
    assert a["software"]["torch"].startswith("2.13")
    assert a["gpus_absent_reason"].startswith("NVML not available")
    with_gpus = system.collect(FakeNvml())
    assert with_gpus["fingerprint"] != a["fingerprint"]


def test_fingerprint_ignores_volatile_values():
    record = system.collect(FakeNvml())
    volatile = copy.deepcopy(record)
    volatile["memory"]["available_bytes"] //= 2
    volatile["cpu"]["current_mhz"] = 1234.5
    volatile["software"]["num_threads"] = 1
    volatile["env"] = {"OMP_NUM_THREADS": "1", "NCCL_DEBUG": "INFO"}
    volatile["network"] = [{"name": "ib0", "is_up": False, "mtu": 2044}]
    volatile["gpus"][0]["power_limit_w"] = 500.0
    assert system.fingerprint(volatile) == record["fingerprint"]


def test_fingerprint_follows_hardware_and_software():
    record = system.collect(FakeNvml())
    other_board = copy.deepcopy(record)
    other_board["gpus"][1]["uuid"] = "GPU-another-board"
    other_torch = copy.deepcopy(record)
    other_torch["software"]["torch"] = "2.14.0"
    fewer_cores = copy.deepcopy(record)
    fewer_cores["cpu"]["cores"] += 1
    fingerprints = {system.fingerprint(r) for r in (record, other_board, other_torch, fewer_cores)}
    assert len(fingerprints) == 4


def test_collect_is_fast():
    system.collect(BrokenNvml())  # torch imported once
    start = time.perf_counter()
    system.collect(BrokenNvml())
    assert time.perf_counter() - start < 0.5


def test_system_view_shows_values_and_absent_reasons():
    def render(record):
        out = io.StringIO()
        Console(file=out, width=200).print(system_view(record))
        return out.getvalue()

    with_gpus = render(system.collect(NoPowerLimitNvml(count=3)))
    assert "NV18" in with_gpus and "SYS" in with_gpus and "NVIDIA H200" in with_gpus
    assert "absent [2]" in with_gpus  # power limit; [1] is the SM count
    assert "[2] NVML: NVMLError_NotSupported: Not Supported" in with_gpus
    without = render(system.collect(BrokenNvml()))
    assert "GPUs absent: NVML not available" in without and "torch" in without


def test_device_capabilities_on_a_cpu_machine():
    assert system.device_capabilities(system.collect(BrokenNvml())) == {
        "cpu": (len(os.sched_getaffinity(0)), None)
    }
