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
(adapters), ``infiniband`` (ports), ``software``, ``env`` and ``fingerprint``. The CUDA
stacks: ``software``'s ``cuda``, ``cudnn`` and ``nccl`` are torch's; JAX brings its own,
which `trainperf system` reads in a child process (``jax_cuda`` beside ``jax_devices``:
trainperf.jax.inventory), so that the two are never loaded in one process.

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
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from trainperf.system.files import read_file, read_int, set_or_absent
from trainperf.system.gpu import nvml_inventory

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
    "XLA_FLAGS",
    "JAX_PLATFORMS",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "NVIDIA_TF32_OVERRIDE",
    "CUDA_LAUNCH_BLOCKING",
    "CUBLAS_WORKSPACE_CONFIG",
)
# ... and every variable of these families (NCCL's and torch's own switches).
_ENV_PREFIXES = ("NCCL_", "TORCH_", "PYTORCH_")
# The JAX backend's packages (the optional extra trainperf[jax]).
JAX_PACKAGES = ("jax", "jaxlib", "flax", "optax")
# JAX's devices and CUDA stack are read in a child process (trainperf.jax.inventory):
# starting JAX's backends here would load its CUDA libraries beside torch's in trainperf's
# own process (and, on a GPU, reserve memory).
JAX_INVENTORY = "trainperf.jax.inventory"
JAX_DEVICES_TIMEOUT_S = 120

# nvmlGpuTopologyLevel_t (nvml.h) -> the names `nvidia-smi topo -m` prints.
_SYS_CPU = Path("/sys/devices/system/cpu")
_LINK_TYPES = {1: "Ethernet", 32: "InfiniBand", 772: "loopback"}  # ARPHRD_* of if_arp.h


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


def _size_bytes(text: str) -> int:
    """'48K' (sysfs cache size) -> 49152."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def _sockets(packages: set[str]) -> int | None:
    if not packages:  # AArch64 /proc/cpuinfo has no 'physical id'
        ids = {read_file(p) for p in _SYS_CPU.glob("cpu[0-9]*/topology/physical_package_id")}
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
        khz = read_int(cpufreq / file)
        mhz = khz / 1000 if khz else fallback.get(key) or None
        also = " and psutil.cpu_freq() gives 0 (VM or no cpufreq driver)" if key in fallback else ""
        set_or_absent(cpu, key, mhz, f"no {cpufreq / file}{also}")
    set_or_absent(cpu, "current_mhz", freq.current if freq else None, "psutil.cpu_freq() is None")


def numa_nodes(root: Path = Path("/")) -> list[dict[str, Any]]:
    """NUMA nodes of /sys/devices/system/node under ``root``: node, cpus (a cpulist such as
    '0-15,32-47') and memory_bytes; [] for a kernel without NUMA."""
    nodes = []
    for path in (root / "sys/devices/system/node").glob("node[0-9]*"):
        node: dict[str, Any] = {"node": int(path.name[4:]), "cpus": read_file(path / "cpulist")}
        meminfo = read_file(path / "meminfo") or ""
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
        level, kind, size = (read_file(index / f) for f in ("level", "type", "size"))
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
    set_or_absent(cpu, "vendor", vendor, "no vendor_id in /proc/cpuinfo")
    cpu["arch"] = platform.machine()
    set_or_absent(cpu, "sockets", _sockets(packages), "no physical id/physical_package_id")
    set_or_absent(cpu, "cores", psutil.cpu_count(logical=False), "psutil cannot count cores")
    set_or_absent(cpu, "threads", psutil.cpu_count(logical=True), "psutil cannot count CPUs")
    _frequencies(cpu)
    training_flags = [f for f in _TRAINING_FLAGS if f in flags] if flags else None
    set_or_absent(cpu, "flags", training_flags, "no flags in /proc/cpuinfo or py-cpuinfo")
    nodes = numa_nodes() or None
    set_or_absent(cpu, "numa_nodes", nodes, "no /sys/devices/system/node (kernel without NUMA)")
    set_or_absent(cpu, "cache_bytes", caches or None, "no cache sizes in /sys or py-cpuinfo")
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


def network_adapters() -> list[dict[str, Any]]:
    """Network interfaces except loopback: name, type, up, MTU, link speed."""
    adapters = []
    for name, stats in sorted(psutil.net_if_stats().items()):
        net = Path("/sys/class/net", name)
        code = read_int(net / "type")
        if code == 772 or "loopback" in getattr(stats, "flags", "") or name == "lo":
            continue
        ib = net / "device" / "infiniband"
        rdma = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
        kind = _LINK_TYPES.get(code, f"ARPHRD {code}") if code is not None else None
        if kind == "Ethernet" and rdma:
            kind = "Ethernet (RDMA)"
        adapter: dict[str, Any] = {"name": name, "is_up": stats.isup, "mtu": stats.mtu}
        set_or_absent(adapter, "type", kind, f"no {net / 'type'}")
        set_or_absent(
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
        rate = read_file(port / "rate") or ""
        entry: dict[str, Any] = {"device": port.parent.parent.name, "port": port.name, "rate": rate}
        gbps = re.match(r"([\d.]+) Gb/sec", rate)
        if gbps:
            entry["rate_gbps"] = float(gbps.group(1))
        state = read_file(port / "state") or ""
        entry["state"] = state.split(":", 1)[-1].strip()  # "4: ACTIVE"
        entry["link_layer"] = read_file(port / "link_layer")
        ports.append(entry)
    return ports, None if ports else "no port under /sys/class/infiniband"


# --- software ---------------------------------------------------------------------------


def software_versions() -> dict[str, Any]:
    """Versions of python, torch and its CUDA/cuDNN/NCCL/oneDNN/MKL, torch's threads, and
    the JAX packages (``cuda``, ``cudnn`` and ``nccl`` are torch's; JAX's CUDA stack is
    ``jax_cuda``, from ``jax_devices``)."""
    import torch

    software: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    cuda = torch.version.cuda
    set_or_absent(software, "cuda", cuda, "this torch build has no CUDA")
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
    set_or_absent(software, "onednn", onednn and onednn.group(1), "not in torch.__config__")
    mkl = re.search(r"Math Kernel Library Version ([\w.]+)", config)
    set_or_absent(software, "mkl_version", mkl and mkl.group(1), "not in torch.__config__")
    software["num_threads"] = torch.get_num_threads()
    software["num_interop_threads"] = torch.get_num_interop_threads()
    for package in JAX_PACKAGES:
        try:
            software[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            software[f"{package}_absent_reason"] = "not installed (pip install 'trainperf[jax]')"
    return software


def jax_devices(timeout_s: float = JAX_DEVICES_TIMEOUT_S) -> dict[str, Any]:
    """``jax_devices`` (``[{id, platform, kind}, ...]`` as JAX's default backend sees them:
    its GPUs when jaxlib has CUDA, else the CPU) and ``jax_cuda`` (the CUDA runtime, cuDNN
    and cuBLAS that JAX's CUDA plugin loads, trainperf.jax.inventory), each replaced by
    ``<key>_absent_reason`` when it cannot be read."""
    if importlib.util.find_spec("jax") is None:
        return _no_jax("jax is not installed (pip install 'trainperf[jax]')")
    from trainperf.system.jax_environment import ON_DEMAND

    try:
        done = subprocess.run(
            [sys.executable, "-m", JAX_INVENTORY],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=os.environ | ON_DEMAND,
        )
    except subprocess.TimeoutExpired:
        return _no_jax(f"jax did not list its devices in {timeout_s:g} s")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return _no_jax(f"jax failed to start: {last}")
    found = json.loads(done.stdout)
    record = {"jax_devices": found["devices"]}
    set_or_absent(record, "jax_cuda", found.get("cuda"), found.get("cuda_absent_reason", ""))
    return record


def _no_jax(reason: str) -> dict[str, str]:
    return {"jax_devices_absent_reason": reason, "jax_cuda_absent_reason": reason}


def environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The set variables among those that change results (NCCL_*, TORCH_* and PYTORCH_*
    included)."""
    return {
        k: v for k, v in sorted(environ.items()) if k in _ENV_KEYS or k.startswith(_ENV_PREFIXES)
    }


# --- the record -------------------------------------------------------------------------


def collect(nvml: Any = None, with_jax_devices: bool = False) -> dict[str, Any]:
    """The system record of this machine, with its ``fingerprint``; with its JAX devices
    when asked (``trainperf system``: it takes a child process and a second or two)."""
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
    if with_jax_devices:
        record |= jax_devices()
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

    from trainperf.case.spec import DeviceKind

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
