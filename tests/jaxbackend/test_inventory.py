"""`trainperf system`'s view of JAX's CUDA stack, read against a fake of the CUDA plugin's
versions module (this machine's jaxlib has no CUDA plugin), beside torch's."""

import io

from rich.console import Console

from trainperf.jax.inventory import NO_NCCL, cuda_versions
from trainperf.report.system import system_view
from trainperf.system import inventory as system


class FakeVersions:
    """The functions of jax_cuda12_plugin._versions the inventory calls (jaxlib's
    jaxlib/cuda/versions.cc): this one has no cuBLAS calls and no loadable cuDNN."""

    @staticmethod
    def cuda_runtime_get_version():
        return 12080

    @staticmethod
    def cuda_runtime_build_version():
        return 12080

    @staticmethod
    def cudnn_get_version():
        raise RuntimeError("Unable to load cuDNN")

    @staticmethod
    def cudnn_build_version():
        return 90800


def test_the_plugin_reports_its_cuda_stack_and_what_it_cannot_is_absent():
    stack = cuda_versions(FakeVersions)
    assert stack["cuda"] == "12.8" and stack["cuda_build"] == "12.8"
    assert stack["cudnn_build"] == 90800 and "cudnn" not in stack
    assert stack["cudnn_absent_reason"] == "cudnn_get_version failed: Unable to load cuDNN"
    assert "no cublas_get_version" in stack["cublas_absent_reason"]
    assert stack["nccl_absent_reason"] == NO_NCCL


def test_system_shows_both_frameworks_cuda_stacks(monkeypatch):
    jax_side = {"jax_devices": [{"id": 0, "platform": "gpu", "kind": "NVIDIA H100"}]}
    jax_side["jax_cuda"] = cuda_versions(FakeVersions)
    monkeypatch.setattr(system, "jax_devices", lambda: jax_side)
    record = system.collect(with_jax_devices=True)
    out = io.StringIO()
    Console(file=out, width=200).print(system_view(record))
    text = out.getvalue()
    for row in ("CUDA (torch)", "cuDNN (torch)", "NCCL (torch)", "CUDA (jax)", "NCCL (jax)"):
        assert row in text
    assert "12.8 (built for 12.8)" in text and "Unable to load cuDNN" in text
