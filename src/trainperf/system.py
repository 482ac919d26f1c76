"""The system record: what hardware and software a result was measured on, and its fingerprint.

Collected in the parent process without creating a CUDA context: GPUs and their topology
are read through NVML (nvidia-ml-py) for the devices CUDA can use (``CUDA_VISIBLE_DEVICES``,
Slurm's binding, MIG), matched by the UUIDs torch.cuda reports; the CPU from /proc/cpuinfo
and /sys (py-cpuinfo only where those are missing: it takes about a second), the rest from
psutil and torch. A value the machine cannot give is left out and ``<field>_absent_reason``
says why, never zero.

Record keys: ``hostname``, ``os``, ``cpu`` (model, vendor, arch, sockets, cores, threads,
min/max/base/current_mhz, flags, numa_nodes, cache_bytes), ``memory`` (total_bytes,
available_bytes, swap_total_bytes), ``memory_bytes`` (= memory.total_bytes, kept for older
readers), ``gpus`` (index, name, uuid, pci_bus_id, memory_bytes, capability, driver,
multiprocessors, max_sm_clock_mhz, max_mem_clock_mhz, power_limit_w, numa_node,
cpu_affinity), ``topology`` (gpus, matrix as ``nvidia-smi topo -m`` prints it), ``network``
(adapters), ``infiniband`` (ports), ``software``, ``env`` and ``fingerprint``.

The fingerprint hashes only what identifies the machine and its software stack, so results
of one system group together across runs and databases (``identity`` builds it):
hostname; cpu model, vendor, arch, sockets, cores, threads, training ISA flags, NUMA node
count; memory total rounded to GiB (MemTotal moves by a few KiB when the kernel reserves
differently); per GPU name, uuid, memory, capability and driver; software python, torch,
cuda, cudnn, nccl, onednn, mkl and mkldnn availability. Never volatile values (available
memory, current frequency, link up/down or speed, thread counts, environment variables):
those are recorded but two records that differ only in them share a fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil

_CPU_IDENTITY = ("model", "vendor", "arch", "sockets", "cores", "threads", "flags")
_GPU_IDENTITY = ("name", "uuid", "memory_bytes", "capability", "driver")
_SOFTWARE_IDENTITY = ("python", "torch", "cuda", "cudnn", "nccl", "onednn", "mkl", "mkldnn")

# ISA extensions that decide which kernels oneDNN/MKL and torch's CPU paths can use.
_TRAINING_FLAGS = (
    *("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl"),
    *("avx512dq", "avx512cd", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx512ifma"),
    *("amx_tile", "amx_bf16", "amx_int8", "amx_fp16"),
    # AArch64 names ("Features" of /proc/cpuinfo)
    *("asimd", "asimdhp", "asimddp", "fphp", "bf16", "i8mm", "sve", "sve2", "sme"),
)

# Environment variables that change what a benchmark measures.
_ENV_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "PYTORCH_CUDA_ALLOC_CONF",
)

# nvmlGpuTopologyLevel_t (nvml.h) -> the names `nvidia-smi topo -m` prints.
_TOPOLOGY_NAMES = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVLINK_DEVICE_TYPE_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
_SYS_CPU = Path("/sys/devices/system/cpu")


# --- CPU ------------------------------------------------------------------------------


def _proc_cpuinfo() -> tuple[dict[str, str], set[str]] | None:
    """The first value of each /proc/cpuinfo field, and the distinct 'physical id's."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    fields: dict[str, str] = {}
    packages = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key == "physical id":
            packages.add(value.strip())
        elif sep and key not in fields:
            fields[key] = value.strip()
    return fields, packages


def cpu_name() -> str:
    """The CPU model string ('model name' of /proc/cpuinfo), else the platform's."""
    info = _proc_cpuinfo()
    if info and info[0].get("model name"):
        return info[0]["model name"]
    return platform.processor() or platform.machine()


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _size_bytes(text: str) -> int:
    """'48K' (sysfs cache size) -> 49152."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def _set_or_absent(section: dict[str, Any], key: str, value: Any, reason: str) -> None:
    if value is None:
        section[f"{key}_absent_reason"] = reason
    else:
        section[key] = value


def _sockets(packages: set[str]) -> int | None:
    if not packages:  # AArch64 /proc/cpuinfo has no 'physical id'
        ids = {_read(p) for p in _SYS_CPU.glob("cpu[0-9]*/topology/physical_package_id")}
        packages = {i for i in ids if i not in (None, "-1")}
    return len(packages) or None


_CPUFREQ_FILES = {
    "min_mhz": "cpuinfo_min_freq",
    "max_mhz": "cpuinfo_max_freq",
    "base_mhz": "base_frequency",  # intel_pstate only
}


def _frequencies(cpu: dict[str, Any]) -> None:
    """min/max/base MHz from cpufreq (psutil's where /sys lacks them); current is volatile."""
    cpufreq = _SYS_CPU / "cpu0" / "cpufreq"
    freq = psutil.cpu_freq() if hasattr(psutil, "cpu_freq") else None
    fallback = {"min_mhz": freq.min, "max_mhz": freq.max} if freq else {}
    for key, file in _CPUFREQ_FILES.items():
        khz = _read_int(cpufreq / file)
        mhz = khz / 1000 if khz else fallback.get(key) or None
        also = " and psutil.cpu_freq() gives 0 (VM or no cpufreq driver)" if key in fallback else ""
        _set_or_absent(cpu, key, mhz, f"no {cpufreq / file}{also}")
    _set_or_absent(cpu, "current_mhz", freq.current if freq else None, "psutil.cpu_freq() is None")


def _numa_nodes() -> list[dict[str, Any]]:
    nodes = []
    for path in Path("/sys/devices/system/node").glob("node[0-9]*"):
        node: dict[str, Any] = {"node": int(path.name[4:]), "cpus": _read(path / "cpulist")}
        meminfo = _read(path / "meminfo") or ""
        total = re.search(r"MemTotal:\s+(\d+) kB", meminfo)
        if total:
            node["memory_bytes"] = int(total.group(1)) * 1024
        nodes.append(node)
    return sorted(nodes, key=lambda n: n["node"])


def _caches() -> dict[str, int]:
    """Per-instance cache sizes seen by cpu0: L1d, L1i, L2, L3."""
    caches = {}
    suffix = {"Data": "d", "Instruction": "i"}
    for index in sorted((_SYS_CPU / "cpu0" / "cache").glob("index[0-9]*")):
        level, kind, size = (_read(index / f) for f in ("level", "type", "size"))
        if level and size:
            caches[f"L{level}{suffix.get(kind or '', '')}"] = _size_bytes(size)
    return caches


def _cpu_facts() -> tuple[str, str | None, set[str], set[str], dict[str, int]]:
    """Model, vendor, package ids, ISA flags and cache sizes: /proc and /sys, else py-cpuinfo."""
    proc = _proc_cpuinfo()
    if proc:
        fields, packages = proc
        flags = set((fields.get("flags") or fields.get("Features") or "").split())
        vendor = fields.get("vendor_id") or fields.get("CPU implementer")
        return fields.get("model name") or cpu_name(), vendor, packages, flags, _caches()
    import cpuinfo  # macOS, Windows: asks the CPU itself, about a second, so only here

    info = cpuinfo.get_cpu_info()
    caches = {f"L{n}": info[f"l{n}_cache_size"] for n in (2, 3) if info.get(f"l{n}_cache_size")}
    model = info.get("brand_raw") or cpu_name()
    return model, info.get("vendor_id_raw"), set(), set(info.get("flags", [])), caches


def cpu_section() -> dict[str, Any]:
    """Model, topology, frequencies, ISA flags, NUMA nodes and caches of this CPU."""
    model, vendor, packages, flags, caches = _cpu_facts()
    cpu: dict[str, Any] = {"model": model}
    _set_or_absent(cpu, "vendor", vendor, "no vendor_id in /proc/cpuinfo")
    cpu["arch"] = platform.machine()
    _set_or_absent(cpu, "sockets", _sockets(packages), "no physical id/physical_package_id")
    _set_or_absent(cpu, "cores", psutil.cpu_count(logical=False), "psutil cannot count cores")
    _set_or_absent(cpu, "threads", psutil.cpu_count(logical=True), "psutil cannot count CPUs")
    _frequencies(cpu)
    training_flags = [f for f in _TRAINING_FLAGS if f in flags] if flags else None
    _set_or_absent(cpu, "flags", training_flags, "no flags in /proc/cpuinfo or py-cpuinfo")
    nodes = _numa_nodes() or None
    _set_or_absent(cpu, "numa_nodes", nodes, "no /sys/devices/system/node (kernel without NUMA)")
    _set_or_absent(cpu, "cache_bytes", caches or None, "no cache sizes in /sys or py-cpuinfo")
    return cpu


def memory_section() -> dict[str, Any]:
    """Total, available (volatile) and swap bytes."""
    virtual, swap = psutil.virtual_memory(), psutil.swap_memory()
    return {
        "total_bytes": virtual.total,
        "available_bytes": virtual.available,
        "swap_total_bytes": swap.total,
    }


# --- GPUs through NVML ----------------------------------------------------------------


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
    _set_or_absent(gpu, key, convert(value) if value else None, "NVML returned 0 or empty")


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
        node = _read_int(Path("/sys/bus/pci/devices", gpu.get("pci_bus_id", "?"), "numa_node"))
        if node is None:
            gpu["numa_node_absent_reason"] = f"{_why(exc)}; no numa_node in /sys/bus/pci"
            return
    _set_or_absent(gpu, "numa_node", node if node >= 0 else None, "no NUMA affinity (-1)")


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
        _set_or_absent(
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


def _nvlinks(nvml: Any, handle: Any, bus_ids: list[str | None]) -> tuple[Counter, int]:
    """Active NVLinks of one GPU: a count per peer GPU index, and the links to NVSwitches."""
    peers: Counter = Counter()
    switch_links = 0
    remote_pci = getattr(nvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None) or getattr(
        nvml, "nvmlDeviceGetNvLinkRemotePciInfo", None
    )
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                continue
            remote = _normal_bus_id(remote_pci(handle, link).busId)
        except Exception:  # past this GPU's link count, or no NVLink at all
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


def _visible_handles(nvml: Any) -> list[Any]:
    """NVML handles of the GPUs CUDA can use, in CUDA's order (``index`` = CUDA ordinal).

    ``nvmlDeviceGetCount`` counts every GPU of the machine, ignoring
    ``CUDA_VISIBLE_DEVICES``, a batch system's binding and MIG; CUDA's own device UUIDs
    (trainperf.measure.energy_nvml.cuda_uuids) pick the right handles. Without a CUDA
    build of torch, NVML's whole list, filtered by ``CUDA_VISIBLE_DEVICES`` when set.
    """
    from trainperf.measure import energy_nvml
    from trainperf.measure.energy_nvml import nvml_handle

    uuids = energy_nvml.cuda_uuids()
    if uuids is not None:
        return [nvml_handle(nvml, i, uuids=uuids) for i in range(len(uuids))]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
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
        handles = _visible_handles(nvml)
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

_LINK_TYPES = {1: "Ethernet", 32: "InfiniBand", 772: "loopback"}  # ARPHRD_* of if_arp.h


def network_adapters() -> list[dict[str, Any]]:
    """Network interfaces except loopback: name, type, up, MTU, link speed."""
    adapters = []
    for name, stats in sorted(psutil.net_if_stats().items()):
        net = Path("/sys/class/net", name)
        code = _read_int(net / "type")
        if code == 772 or "loopback" in getattr(stats, "flags", "") or name == "lo":
            continue
        ib = net / "device" / "infiniband"
        rdma = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
        kind = _LINK_TYPES.get(code, f"ARPHRD {code}") if code is not None else None
        if kind == "Ethernet" and rdma:
            kind = "Ethernet (RDMA)"
        adapter: dict[str, Any] = {"name": name, "is_up": stats.isup, "mtu": stats.mtu}
        _set_or_absent(adapter, "type", kind, f"no {net / 'type'}")
        _set_or_absent(
            adapter, "speed_mbps", stats.speed or None, "not reported (down, virtual or wireless)"
        )
        if rdma:
            adapter["rdma_devices"] = rdma
        adapters.append(adapter)
    return adapters


def infiniband_ports() -> tuple[list[dict[str, Any]], str | None]:
    """Ports of /sys/class/infiniband (HCAs, RoCE NICs): rate, state, link layer."""
    root = Path("/sys/class/infiniband")
    if not root.is_dir():
        return [], "no /sys/class/infiniband (no RDMA device or driver)"
    ports = []
    for port in sorted(root.glob("*/ports/*")):
        rate = _read(port / "rate") or ""
        entry: dict[str, Any] = {"device": port.parent.parent.name, "port": port.name, "rate": rate}
        gbps = re.match(r"([\d.]+) Gb/sec", rate)
        if gbps:
            entry["rate_gbps"] = float(gbps.group(1))
        state = _read(port / "state") or ""
        entry["state"] = state.split(":", 1)[-1].strip()  # "4: ACTIVE"
        entry["link_layer"] = _read(port / "link_layer")
        ports.append(entry)
    return ports, None if ports else "no port under /sys/class/infiniband"


# --- software ---------------------------------------------------------------------------


def software_versions() -> dict[str, Any]:
    """Versions of python, torch and its CUDA/cuDNN/NCCL/oneDNN/MKL, and torch's threads."""
    import torch

    software: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    cuda = torch.version.cuda
    _set_or_absent(software, "cuda", cuda, "this torch build has no CUDA")
    if torch.backends.cudnn.is_available():
        software["cudnn"] = torch.backends.cudnn.version()
    else:
        software["cudnn_absent_reason"] = "torch.backends.cudnn.is_available() is False"
    if torch.cuda.is_available():
        software["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    else:
        software["nccl_absent_reason"] = (
            "torch sees no CUDA device" if cuda else "this torch build has no CUDA"
        )
    software["mkldnn"] = torch.backends.mkldnn.is_available()
    software["mkl"] = torch.backends.mkl.is_available()
    config = torch.__config__.show()
    onednn = re.search(r"(?:MKL-DNN|oneDNN) v([\w.]+)", config)
    _set_or_absent(software, "onednn", onednn and onednn.group(1), "not in torch.__config__")
    mkl = re.search(r"Math Kernel Library Version ([\w.]+)", config)
    _set_or_absent(software, "mkl_version", mkl and mkl.group(1), "not in torch.__config__")
    software["num_threads"] = torch.get_num_threads()
    software["num_interop_threads"] = torch.get_num_interop_threads()
    return software


def environment() -> dict[str, str]:
    """The set variables among those that change results (NCCL_* included)."""
    return {k: v for k, v in sorted(os.environ.items()) if k in _ENV_KEYS or k.startswith("NCCL_")}


# --- the record -------------------------------------------------------------------------


def collect(nvml: Any = None) -> dict[str, Any]:
    """The system record of this machine, with its ``fingerprint``."""
    memory = memory_section()
    ports, no_ports = infiniband_ports()
    record: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu": cpu_section(),
        "memory": memory,
        "memory_bytes": memory["total_bytes"],
        **nvml_inventory(nvml),
        "network": network_adapters(),
        "infiniband": ports,
        "software": software_versions(),
        "env": environment(),
    }
    if no_ports:
        record["infiniband_absent_reason"] = no_ports
    record["fingerprint"] = fingerprint(record)
    return record


def identity(record: dict[str, Any]) -> dict[str, Any]:
    """The identifying fields of a record (see the module docstring), nothing volatile."""
    cpu, software = record.get("cpu") or {}, record.get("software") or {}
    memory = record.get("memory_bytes")
    return {
        "hostname": record.get("hostname"),
        "cpu": {k: cpu.get(k) for k in _CPU_IDENTITY} | {"numa": len(cpu.get("numa_nodes", []))},
        "memory_gib": round(memory / 2**30) if memory else None,
        "gpus": [{k: gpu.get(k) for k in _GPU_IDENTITY} for gpu in record.get("gpus") or []],
        "software": {k: software.get(k) for k in _SOFTWARE_IDENTITY},
    }


def fingerprint(record: dict[str, Any]) -> str:
    """16 hex digits of SHA-256 over the identifying fields, in canonical JSON."""
    canonical = json.dumps(identity(record), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def device_capabilities(record: dict[str, Any]) -> dict[str, Any]:
    """Device types of this machine (``DeviceKind`` by type name), for ``check_case``."""
    import torch

    from trainperf.case import DeviceKind

    # For the CPU, the count is its cores: the most threads a case may ask for.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    capabilities = {"cpu": DeviceKind(count=cores or 1)}
    # NVML may see GPUs that this torch build cannot use (a CPU-only wheel), and more
    # than CUDA may use (CUDA_VISIBLE_DEVICES, Slurm, MIG): the count is CUDA's own.
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        gpus = record["gpus"]
        first = gpus[0]["capability"] if gpus else torch.cuda.get_device_capability(0)
        capabilities["cuda"] = DeviceKind(count, (first[0], first[1]))
    return capabilities
