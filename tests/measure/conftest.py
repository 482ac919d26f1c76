import pytest

from trainperf.measure import energy_nvml


@pytest.fixture(autouse=True)
def no_cuda_uuids(monkeypatch):
    """The fake NVMLs here number GPUs by index: keep a real GPU's UUIDs out of them."""
    monkeypatch.setattr(energy_nvml, "cuda_uuids", lambda cuda=None: None)
