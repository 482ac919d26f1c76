from trainperf import system


class FakeNvml:
    """The NVML calls trainperf.system makes, answering for two H200s."""

    def __init__(self):
        self.shutdown = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlDeviceGetCount(self):
        return 2

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


class BrokenNvml:
    def nvmlInit(self):
        raise RuntimeError("NVML Shared Library Not Found")


def test_gpu_inventory_from_nvml():
    nvml = FakeNvml()
    gpus, absent = system.gpu_inventory(nvml)
    assert absent is None and nvml.shutdown
    assert [g["name"] for g in gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert gpus[0]["capability"] == [9, 0]
    assert gpus[0]["memory_bytes"] == 150_754_820_096
    assert gpus[1]["driver"] == "570.1"


def test_no_nvml_is_absent_with_reason():
    gpus, absent = system.gpu_inventory(BrokenNvml())
    assert gpus == [] and "Not Found" in absent


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


def test_device_capabilities_on_a_cpu_machine():
    assert system.device_capabilities(system.collect(BrokenNvml())) == {"cpu": (1, None)}
