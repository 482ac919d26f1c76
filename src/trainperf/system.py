"""The system record: what hardware and software a result was measured on, and its fingerprint.

Collected in the parent process without creating a CUDA context: GPUs are read through
NVML (nvidia-ml-py), which a CPU-only machine lacks; their absence is recorded with the
reason. The fingerprint hashes the fields that identify a machine and its software stack,
so results of the same system group together across runs and databases.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
from typing import Any

import psutil

# Fields that identify a system; anything else in the record is informative only.
_FINGERPRINT_FIELDS = ("hostname", "cpu", "memory_bytes", "gpus", "software")


def cpu_name() -> str:
    """The CPU model string ('model name' of /proc/cpuinfo), else the platform's."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def software_versions() -> dict[str, Any]:
    import torch

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
    }


def gpu_inventory(nvml: Any = None) -> tuple[list[dict[str, Any]], str | None]:
    """GPUs from NVML as (list, None), or ([], why not). ``nvml`` defaults to pynvml."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception as exc:  # no driver, no library: a CPU-only machine
        return [], f"NVML not available: {exc}"
    try:
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(
                {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                    "capability": [int(major), int(minor)],
                }
            )
        driver = nvml.nvmlSystemGetDriverVersion()
        for gpu in gpus:
            gpu["driver"] = driver.decode() if isinstance(driver, bytes) else driver
        return gpus, None
    finally:
        nvml.nvmlShutdown()


def collect(nvml: Any = None) -> dict[str, Any]:
    """The system record of this machine, with its ``fingerprint``."""
    gpus, gpus_absent = gpu_inventory(nvml)
    record: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu": {
            "model": cpu_name(),
            "arch": platform.machine(),
            "cores": psutil.cpu_count(logical=False),
            "threads": psutil.cpu_count(logical=True),
        },
        "memory_bytes": psutil.virtual_memory().total,
        "gpus": gpus,
        "software": software_versions(),
        "env": {
            k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS") if k in os.environ
        },
    }
    if gpus_absent:
        record["gpus_absent_reason"] = gpus_absent
    record["fingerprint"] = fingerprint(record)
    return record


def fingerprint(record: dict[str, Any]) -> str:
    """16 hex digits of SHA-256 over the identifying fields, in canonical JSON."""
    identity = {key: record.get(key) for key in _FINGERPRINT_FIELDS}
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def device_capabilities(record: dict[str, Any]) -> dict[str, Any]:
    """Device types of this machine (``DeviceKind`` by type name), for ``check_case``."""
    import torch

    from trainperf.case import DeviceKind

    capabilities = {"cpu": DeviceKind(count=1)}
    # NVML may see GPUs that this torch build cannot use (a CPU-only wheel): ask both.
    if record["gpus"] and torch.cuda.is_available():
        first = record["gpus"][0]["capability"]
        capabilities["cuda"] = DeviceKind(len(record["gpus"]), (first[0], first[1]))
    return capabilities
