"""The GPUs of the system inventory (trainperf.system.inventory): what NVML tells of each GPU that
CUDA can use, matched by UUID, and the topology matrix between them.

Every reading NVML cannot give is absent with the reason, never a guess.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import psutil

from trainperf.system.files import read_int, set_or_absent

_TOPOLOGY_NAMES = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVLINK_DEVICE_TYPE_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _why(exc: Exception) -> str:
    return f"NVML: {type(exc).__name__}: {exc}"


def _normal_bus_id(bus_id: Any) -> str:
    """'00000000:18:00.0' (NVML) -> '0000:18:00.0' (sysfs, torch), lower case."""
    domain, bus, rest = _text(bus_id).strip().lower().rsplit(":", 2)
    return f"{int(domain, 16):04x}:{bus}:{rest}"


def _cpu_list(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the kernel's cpulist form)."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def _optional(
    gpu: dict[str, Any], key: str, read: Callable[[], Any], convert: Callable = int
) -> None:
    """Set ``gpu[key]`` from an NVML call that a device may not support; 0 counts as absent."""
    try:
        value = read()
    except Exception as exc:  # NVMLError_NotSupported, NoPermission, a binding without it
        gpu[f"{key}_absent_reason"] = _why(exc)
        return
    set_or_absent(gpu, key, convert(value) if value else None, "NVML returned 0 or empty")


def _numa_and_affinity(nvml: Any, handle: Any, gpu: dict[str, Any]) -> None:
    words = ((psutil.cpu_count(logical=True) or 1) + 63) // 64  # 64-bit mask words
    _optional(
        gpu,
        "cpu_affinity",
        lambda: nvml.nvmlDeviceGetCpuAffinity(handle, words),
        lambda mask: _cpu_list(
            w * 64 + b for w, word in enumerate(mask) for b in range(64) if int(word) >> b & 1
        ),
    )
    try:
        node = nvml.nvmlDeviceGetNumaNodeId(handle)
    except Exception as exc:  # older drivers: the kernel knows the PCI device's node
        node = read_int(Path("/sys/bus/pci/devices", gpu.get("pci_bus_id", "?"), "numa_node"))
        if node is None:
            gpu["numa_node_absent_reason"] = f"{_why(exc)}; no numa_node in /sys/bus/pci"
            return
    set_or_absent(gpu, "numa_node", node if node >= 0 else None, "no NUMA affinity (-1)")


def _multiprocessors() -> dict[str, int] | str:
    """SM counts by PCI bus id from torch, only when CUDA is already initialized here."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return (
            "NVML has no SM-count query and torch.cuda.get_device_properties would create a"
            " CUDA context in this process"
        )
    counts = {}
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        counts[f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"] = (
            p.multi_processor_count
        )
    return counts


def _gpu(nvml: Any, index: int, handle: Any, sms: dict[str, int] | str) -> dict[str, Any]:
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    gpu: dict[str, Any] = {
        "index": index,
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        "capability": [int(major), int(minor)],
    }
    _optional(gpu, "uuid", lambda: nvml.nvmlDeviceGetUUID(handle), _text)
    _optional(gpu, "pci_bus_id", lambda: nvml.nvmlDeviceGetPciInfo(handle).busId, _normal_bus_id)
    if isinstance(sms, str):
        gpu["multiprocessors_absent_reason"] = sms
    else:
        set_or_absent(
            gpu, "multiprocessors", sms.get(gpu.get("pci_bus_id", "")), "not among torch's GPUs"
        )
    for key, clock in (
        ("max_sm_clock_mhz", "NVML_CLOCK_SM"),
        ("max_mem_clock_mhz", "NVML_CLOCK_MEM"),
    ):
        _optional(
            gpu, key, lambda c=clock: nvml.nvmlDeviceGetMaxClockInfo(handle, getattr(nvml, c))
        )
    _optional(
        gpu,
        "power_limit_w",
        lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle),
        lambda mw: mw / 1000,
    )
    _numa_and_affinity(nvml, handle, gpu)
    return gpu


def nvlink_states(nvml: Any, handle: Any) -> tuple[dict[int, bool], str | None]:
    """The state of each NVLink of a GPU that NVML answers for, ``{link: active}``, and
    when none answers, why (NVML raises past a GPU's last link, and for every link of a
    GPU without NVLink)."""
    states: dict[int, bool] = {}
    error: Exception | None = None
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            states[link] = bool(nvml.nvmlDeviceGetNvLinkState(handle, link))
        except Exception as exc:
            error = error or exc
    if states:
        return states, None
    return states, _why(error) if error else "NVML counts no NVLink"


def _nvlinks(nvml: Any, handle: Any, bus_ids: list[str | None]) -> tuple[Counter, int]:
    """Active NVLinks of one GPU: a count per peer GPU index, and the links to NVSwitches."""
    peers: Counter = Counter()
    switch_links = 0
    remote_pci = getattr(nvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None) or getattr(
        nvml, "nvmlDeviceGetNvLinkRemotePciInfo", None
    )
    for link, active in nvlink_states(nvml, handle)[0].items():
        if not active:
            continue
        try:
            remote = _normal_bus_id(remote_pci(handle, link).busId)
        except Exception:  # NVML cannot say where this link goes
            continue
        if remote in bus_ids:
            peers[bus_ids.index(remote)] += 1
            continue
        try:
            kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except Exception:
            continue
        switch_links += kind == _NVLINK_DEVICE_TYPE_SWITCH
    return peers, switch_links


def _topology(nvml: Any, handles: list[Any], gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """The GPU-to-GPU matrix of `nvidia-smi topo -m`: NV<k> for k NVLinks, else the PCIe
    common ancestor (PIX, PXB, PHB, NODE, SYS). GPUs that both reach an NVSwitch fabric
    count as connected by the fewer of their switch links, as nvidia-smi shows on HGX."""
    bus_ids = [gpu.get("pci_bus_id") for gpu in gpus]
    links = [_nvlinks(nvml, handle, bus_ids) for handle in handles]
    matrix: list[list[str | None]] = []
    unknown = []
    for i, hi in enumerate(handles):
        row: list[str | None] = []
        for j, hj in enumerate(handles):
            direct = max(links[i][0][j], links[j][0][i])
            fabric = min(links[i][1], links[j][1])
            if i == j:
                row.append("X")
            elif direct or fabric:
                row.append(f"NV{direct or fabric}")
            else:
                try:
                    level = nvml.nvmlDeviceGetTopologyCommonAncestor(hi, hj)
                    row.append(_TOPOLOGY_NAMES.get(int(level), f"level {level}"))
                except Exception as exc:
                    row.append(None)
                    unknown.append(f"GPU{i}-GPU{j}: {_why(exc)}")
        matrix.append(row)
    topology: dict[str, Any] = {"gpus": [f"GPU{gpu['index']}" for gpu in gpus], "matrix": matrix}
    if unknown:
        topology["unknown_reason"] = "; ".join(unknown)
    return topology


def visible_handles(
    nvml: Any, environ: Mapping[str, str] | None = None, *, ask_cuda: bool = True
) -> list[Any]:
    """NVML handles of the GPUs CUDA can use, in CUDA's order (``index`` = CUDA ordinal).

    ``nvmlDeviceGetCount`` counts every GPU of the machine, ignoring
    ``CUDA_VISIBLE_DEVICES``, a batch system's binding and MIG; CUDA's own device UUIDs
    (trainperf.measure.energy_nvml.cuda_uuids) pick the right handles. Without a CUDA
    build of torch, or with ``ask_cuda`` false (which keeps CUDA uninitialized in this
    process), NVML's whole list, filtered by ``CUDA_VISIBLE_DEVICES`` of ``environ``
    (default ``os.environ``) when set.
    """
    from trainperf.measure import energy_nvml
    from trainperf.measure.energy_nvml import nvml_handle

    uuids = energy_nvml.cuda_uuids() if ask_cuda else None
    if uuids is not None:
        return [nvml_handle(nvml, i, uuids=uuids) for i in range(len(uuids))]
    visible = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    entries = [e for e in visible.split(",") if e.strip()]
    return [nvml_handle(nvml, i, visible=visible) for i in range(len(entries))]


def nvml_inventory(nvml: Any = None) -> dict[str, Any]:
    """``gpus`` and ``topology`` from NVML, each with ``<key>_absent_reason`` when empty."""
    from trainperf.measure.energy_nvml import NvmlUnavailable, close_nvml, open_nvml

    try:
        nvml = open_nvml(nvml)
    except NvmlUnavailable as exc:  # no driver, no library: a CPU-only machine
        return _no_gpus(str(exc))
    try:
        handles = visible_handles(nvml)
        sms = _multiprocessors() if handles else {}
        gpus = [_gpu(nvml, i, handle, sms) for i, handle in enumerate(handles)]
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        for gpu in gpus:
            gpu["driver"] = driver
        if not gpus:
            return _no_gpus("NVML sees no GPU")
        if len(gpus) == 1:
            return {
                "gpus": gpus,
                "topology": {"gpus": [], "matrix": []},
                "topology_absent_reason": "only 1 GPU: no pair to connect",
            }
        return {"gpus": gpus, "topology": _topology(nvml, handles, gpus)}
    except Exception as exc:
        return _no_gpus(f"NVML failed: {_why(exc)}")
    finally:
        close_nvml(nvml)


def _no_gpus(reason: str) -> dict[str, Any]:
    return {
        "gpus": [],
        "gpus_absent_reason": reason,
        "topology": {"gpus": [], "matrix": []},
        "topology_absent_reason": reason,
    }


def gpu_inventory(nvml: Any = None) -> tuple[list[dict[str, Any]], str | None]:
    """GPUs from NVML as (list, None), or ([], why not). ``nvml`` defaults to pynvml."""
    found = nvml_inventory(nvml)
    return found["gpus"], found.get("gpus_absent_reason")


# --- network ----------------------------------------------------------------------------
