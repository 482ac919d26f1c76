"""The GPUs a case may use are those CUDA sees, not all that NVML numbers (fakes of both)."""

import pytest
import torch
from test_system import FakeNvml

from trainperf.case.spec import DeviceKind, HardwareAbsent, check_case, make_case
from trainperf.measure import energy_nvml
from trainperf.system import gpu as system_gpu
from trainperf.system import inventory as system


class UuidNvml(FakeNvml):
    """Three GPUs to NVML, answering ``nvmlDeviceGetHandleByUUID`` too."""

    def __init__(self):
        super().__init__(count=3)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for handle in range(self.count):
            if self.nvmlDeviceGetUUID(handle) == uuid:
                return handle
        raise LookupError(f"no GPU {uuid}")


def cuda_sees(monkeypatch, *nvml_indices):
    """CUDA sees these NVML GPUs, in this order (CUDA_VISIBLE_DEVICES, Slurm, MIG)."""
    uuids = [energy_nvml.normal_uuid(FakeNvml().nvmlDeviceGetUUID(i)) for i in nvml_indices]
    monkeypatch.setattr(energy_nvml, "cuda_uuids", lambda cuda=None: uuids)


def test_inventory_describes_the_gpus_cuda_can_use(monkeypatch):
    cuda_sees(monkeypatch, 2, 0)
    gpus = system_gpu.nvml_inventory(UuidNvml())["gpus"]
    assert [g["index"] for g in gpus] == [0, 1]  # CUDA's ordinals
    assert [g["uuid"][4:12] for g in gpus] == ["00000002", "00000000"]


def test_inventory_without_cuda_follows_cuda_visible_devices(monkeypatch):
    monkeypatch.setattr(energy_nvml, "cuda_uuids", lambda cuda=None: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    gpus = system_gpu.nvml_inventory(UuidNvml())["gpus"]
    assert [g["uuid"][4:12] for g in gpus] == ["00000001"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert len(system_gpu.nvml_inventory(UuidNvml())["gpus"]) == 3


def test_device_count_is_what_cuda_sees_and_more_is_not_available(monkeypatch):
    record = {"gpus": [{"capability": [9, 0]}] * 3}  # NVML: three on the machine
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # CUDA_VISIBLE_DEVICES=2
    capabilities = system.device_capabilities(record)
    assert capabilities["cuda"] == DeviceKind(1, (9, 0))
    case = make_case(model="cifarnet", batch_size=4, device="cuda", devices=2)
    with pytest.raises(HardwareAbsent, match="needs 2 cuda devices per node; 1 visible"):
        check_case(case, capabilities)


def test_asking_for_more_gpus_than_visible_exits_2(monkeypatch, run_cli, tmp_path):
    monkeypatch.setattr(
        system,
        "device_capabilities",
        lambda record: {"cpu": DeviceKind(2), "cuda": DeviceKind(1, (9, 0))},
    )
    db = tmp_path / "t.db"
    code, _, err = run_cli(
        f"run --model cifarnet --batch-size 4 --device cuda --devices 2 --db {db}"
    )
    assert code == 2 and "1 visible to CUDA" in err
    assert not db.exists()
