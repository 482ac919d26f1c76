"""Terminal view of a system record (`trainperf system`): small tables, absent reasons shown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from trainperf.report.cells import escape

_TOPOLOGY_LEGEND = (
    "X = self, NV# = bonded set of # NVLinks, PIX = at most one PCIe bridge, "
    "PXB = several PCIe bridges, PHB = a PCIe host bridge, "
    "NODE = host bridges within one NUMA node, SYS = across NUMA nodes (SMP interconnect)"
)


def _absent(reason: str | None) -> Text:
    return Text(f"absent: {reason}" if reason else "-", style="dim")


def _cell(section: dict[str, Any], key: str, show: Callable[[Any], str] = str) -> str | Text:
    """The value formatted, or why it is absent."""
    value = section.get(key)
    if value is None:
        return _absent(section.get(f"{key}_absent_reason"))
    return show(value)


def _text(cell: Any) -> Any:
    """A string cell as Text, never read as markup: names and values come from the machine
    (or an imported record) and may hold brackets."""
    return Text(cell) if isinstance(cell, str) else cell


def _joined(section: dict[str, Any], keys: tuple[str, ...], show: Callable = str) -> Text:
    cells = (_cell(section, key, show) for key in keys)
    return Text(" / ").join(_text(cell) for cell in cells)


def _size(value: int) -> str:
    return f"{value // 2**20} MiB" if value >= 2**20 else f"{value // 2**10} KiB"


def _gib(value: int) -> str:
    return f"{value / 2**30:.1f} GiB"


def _mhz(value: float) -> str:
    return f"{value:.0f} MHz"


def _pairs(title: str, rows: list[tuple[str, str | Text]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for row in rows:
        table.add_row(*map(_text, row))
    return table


def _columns(title: str, names: list[str]) -> Table:
    table = Table(title=title, title_justify="left", caption_justify="left")
    for name in names:
        table.add_column(name, overflow="fold")
    return table


def _cpu(record: dict[str, Any]) -> Table:
    cpu = record.get("cpu") or {}
    nodes = cpu.get("numa_nodes")
    caches = cpu.get("cache_bytes")
    return _pairs(
        "CPU",
        [
            ("model", _cell(cpu, "model")),
            ("vendor", _cell(cpu, "vendor")),
            ("architecture", _cell(cpu, "arch")),
            ("sockets", _cell(cpu, "sockets")),
            ("cores / threads", _joined(cpu, ("cores", "threads"))),
            ("min frequency", _cell(cpu, "min_mhz", _mhz)),
            ("base frequency", _cell(cpu, "base_mhz", _mhz)),
            ("max frequency", _cell(cpu, "max_mhz", _mhz)),
            ("current (volatile)", _cell(cpu, "current_mhz", _mhz)),
            ("training ISA flags", _cell(cpu, "flags", " ".join)),
            (
                "NUMA nodes",
                "; ".join(f"node{n['node']}: CPUs {n['cpus']}" for n in nodes)
                if nodes
                else _absent(cpu.get("numa_nodes_absent_reason")),
            ),
            (
                "caches (per instance)",
                "  ".join(f"{k} {_size(v)}" for k, v in caches.items())
                if caches
                else _absent(cpu.get("cache_bytes_absent_reason")),
            ),
        ],
    )


def _memory(record: dict[str, Any]) -> Table:
    memory = record.get("memory") or {"total_bytes": record.get("memory_bytes")}
    return _pairs(
        "memory",
        [
            ("total", _cell(memory, "total_bytes", _gib)),
            ("available (volatile)", _cell(memory, "available_bytes", _gib)),
            ("swap", _cell(memory, "swap_total_bytes", _gib)),
        ],
    )


_GPU_COLUMNS = (
    ("GPU", "index", str),
    ("name", "name", str),
    ("memory", "memory_bytes", _gib),
    ("capability", "capability", lambda c: f"{c[0]}.{c[1]}"),
    ("SMs", "multiprocessors", str),
    ("max SM clock", "max_sm_clock_mhz", _mhz),
    ("max mem clock", "max_mem_clock_mhz", _mhz),
    ("power limit", "power_limit_w", lambda w: f"{w:.0f} W"),
    ("PCI bus", "pci_bus_id", str),
    ("driver", "driver", str),
    ("uuid", "uuid", str),
)


def _gpus(record: dict[str, Any]) -> Table | Text:
    """One row per GPU; absent cells point to their reason, listed once under the table."""
    gpus = record.get("gpus") or []
    if not gpus:
        return Text.assemble(("GPUs ", "bold"), _absent(record.get("gpus_absent_reason")))
    table = _columns("GPUs", [title for title, _, _ in _GPU_COLUMNS])
    reasons: list[str] = []
    for gpu in gpus:
        cells: list[str | Text] = []
        for _, key, show in _GPU_COLUMNS:
            if gpu.get(key) is not None:
                cells.append(show(gpu[key]))
                continue
            reason = gpu.get(f"{key}_absent_reason") or "not recorded"
            if reason not in reasons:
                reasons.append(reason)
            cells.append(Text(f"absent [{reasons.index(reason) + 1}]", style="dim"))
        table.add_row(*map(_text, cells))
    table.caption = (
        "\n".join(escape(f"[{n}] {reason}") for n, reason in enumerate(reasons, 1)) or None
    )
    return table


def _topology(record: dict[str, Any]) -> Table | Text:
    topology = record.get("topology") or {}
    matrix = topology.get("matrix") or []
    if not matrix:
        return Text.assemble(
            ("GPU topology ", "bold"), _absent(record.get("topology_absent_reason"))
        )
    names = topology["gpus"]
    table = _columns("GPU topology (nvidia-smi topo -m)", ["", *names, "CPU affinity", "NUMA"])
    table.caption = _TOPOLOGY_LEGEND
    gpus = record.get("gpus") or [{}] * len(names)
    for name, row, gpu in zip(names, matrix, gpus, strict=False):
        cells = [cell or "?" for cell in row]
        row = (name, *cells, _cell(gpu, "cpu_affinity"), _cell(gpu, "numa_node"))
        table.add_row(*map(_text, row))
    if topology.get("unknown_reason"):
        table.caption += escape(f"\n? = {topology['unknown_reason']}")
    return table


def _network(record: dict[str, Any]) -> Group:
    adapters = _columns("network", ["interface", "type", "up", "speed", "MTU", "RDMA"])
    for adapter in record.get("network") or []:
        adapters.add_row(
            Text(str(adapter["name"])),
            _cell(adapter, "type"),
            "up" if adapter.get("is_up") else "down",
            _cell(adapter, "speed_mbps", lambda mbps: f"{mbps / 1000:g} Gb/s"),
            str(adapter.get("mtu", "-")),
            Text(" ".join(adapter.get("rdma_devices", []))),
        )
    ports = record.get("infiniband") or []
    if not ports:
        reason = record.get("infiniband_absent_reason")
        return Group(adapters, Text.assemble(("InfiniBand ", "bold"), _absent(reason)))
    table = _columns("InfiniBand / RDMA ports", ["device", "port", "rate", "state", "link layer"])
    for port in ports:
        cells = (port["device"], port["port"], port["rate"], port["state"], port.get("link_layer"))
        table.add_row(*(Text(str(cell or "-")) for cell in cells))
    return Group(adapters, table)


_SOFTWARE_ROWS = (
    ("python", "python"),
    ("torch", "torch"),
    ("CUDA (torch)", "cuda"),
    ("cuDNN (torch)", "cudnn"),
    ("NCCL (torch)", "nccl"),
    ("oneDNN (mkldnn)", "onednn"),
    ("mkldnn available", "mkldnn"),
    ("MKL available", "mkl"),
    ("MKL", "mkl_version"),
    ("torch threads", "num_threads"),
    ("torch interop threads", "num_interop_threads"),
    ("jax", "jax"),
    ("jaxlib", "jaxlib"),
    ("flax", "flax"),
    ("optax", "optax"),
)


def _software(record: dict[str, Any]) -> Table:
    software = record.get("software") or {}
    rows = [(title, _cell(software, key)) for title, key in _SOFTWARE_ROWS]
    if "jax_devices" in record or "jax_devices_absent_reason" in record:
        rows.append(("jax devices", _cell(record, "jax_devices", _jax_devices)))
    if "jax_cuda" in record or "jax_cuda_absent_reason" in record:
        jax_cuda = record.get("jax_cuda")
        if jax_cuda is None:
            rows.append(("CUDA stack (jax)", _cell(record, "jax_cuda")))
        else:
            rows += [(f"{title} (jax)", _jax_version(jax_cuda, key)) for title, key in _JAX_CUDA]
    return _pairs("software", rows)


# JAX's CUDA stack (trainperf.jax.inventory): what its plugin loaded, and what it was built for.
_JAX_CUDA = (("CUDA", "cuda"), ("cuDNN", "cudnn"), ("cuBLAS", "cublas"), ("NCCL", "nccl"))


def _jax_version(stack: dict[str, Any], key: str) -> str | Text:
    """'12.8 (built for 12.8)': the version loaded, and the one built for when known."""
    built = stack.get(f"{key}_build")
    cell = _cell(stack, key)
    return cell if built is None or not isinstance(cell, str) else f"{cell} (built for {built})"


def _jax_devices(devices: list[dict[str, Any]]) -> str:
    """'8 gpu (NVIDIA H100 80GB HBM3)': how many of each platform and kind."""
    counts: dict[tuple[str, str], int] = {}
    for device in devices:
        key = (str(device.get("platform")), str(device.get("kind")))
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {platform} ({kind})" for (platform, kind), n in counts.items())


def _env(record: dict[str, Any]) -> Table | Text:
    env = record.get("env") or {}
    if not env:
        return Text.assemble(
            ("environment ", "bold"), Text("none of the variables that change results is set")
        )
    return _pairs("environment", sorted(env.items()))


def system_view(record: dict[str, Any]) -> Group:
    """The record as tables: CPU, memory, GPUs, topology, network, software, environment."""
    title = Text.assemble(
        ("system ", "bold"),
        str(record.get("hostname", "?")),
        f"  {record.get('os', '')}  fingerprint {record.get('fingerprint', '?')}",
    )
    return Group(
        title,
        _cpu(record),
        _memory(record),
        _gpus(record),
        _topology(record),
        _network(record),
        _software(record),
        _env(record),
    )
