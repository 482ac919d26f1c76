"""Rich tables of the hardware catalog: the devices with their peaks, the links, the
systems (node types) built of them."""

from __future__ import annotations

from rich.table import Table

from trainperf.predict.catalog import PRECISIONS, Catalog
from trainperf.report.cells import Column, compact_table, escape


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def devices_table(catalog: Catalog, width: int | None = None) -> Table:
    """One row per device: training peaks per precision, memory, bandwidth, TDP, and the
    assumed whole-step efficiencies; columns chosen to fit ``width`` (report.cells)."""
    devices = list(catalog.devices.items())
    efficiencies = [
        ", ".join(f"{p} {e:g}" for p in PRECISIONS if (e := device.default_efficiency.get(p)))
        for _, device in devices
    ]
    columns = [
        Column("id", [escape(device_id) for device_id, _ in devices]),
        Column("name", [escape(device.name) for _, device in devices], text=True, drop=2),
        Column("kind", [escape(device.kind) for _, device in devices]),
        *(
            Column(p, [_number(d.peak_tflops.get(p)) for _, d in devices], right=True)
            for p in PRECISIONS
        ),
        Column("memory GB", [_number(d.memory_gb) for _, d in devices], right=True),
        Column("GB/s", [_number(d.memory_bandwidth_gbps) for _, d in devices], right=True),
        Column("TDP W", [_number(d.tdp_w) for _, d in devices], right=True, drop=1),
        Column("efficiency", efficiencies, text=True),
    ]
    return compact_table(
        "devices (training peaks, dense)",
        columns,
        width=width,
        caption="peaks in TFLOP/s (16-bit: FP32 accumulation), '-' where the device lacks "
        "the precision; efficiency: assumed fraction of peak for a whole training step",
    )


def links_table(catalog: Catalog, width: int | None = None) -> Table:
    """One row per link: scope, bandwidth per direction, latency, efficiency, note;
    columns chosen to fit ``width`` (report.cells)."""
    links = list(catalog.links.items())
    columns = [
        Column("id", [escape(link_id) for link_id, _ in links]),
        Column("name", [escape(link.name) for _, link in links], text=True, drop=1),
        Column("scope", [escape(link.scope) for _, link in links]),
        Column("GB/s", [_number(link.bandwidth_gbps) for _, link in links], right=True),
        Column("usable GB/s", [f"{link.bytes_per_s / 1e9:.3g}" for _, link in links], right=True),
        Column("latency µs", [_number(link.latency_us) for _, link in links], right=True),
        Column("efficiency", [_number(link.efficiency) for _, link in links], right=True),
        Column("note", [escape(link.note or "") for _, link in links], text=True),
    ]
    return compact_table(
        "links",
        columns,
        width=width,
        caption="GB/s per direction (intra: per device, inter: per node); usable = GB/s x "
        "efficiency; latency: per message step",
    )


def systems_table(catalog: Catalog, width: int | None = None) -> Table:
    """One row per system: its device and devices per node, the links inside and between
    nodes, the NICs per node; columns chosen to fit ``width`` (report.cells)."""
    systems = list(catalog.systems.items())
    columns = [
        Column("id", [escape(system_id) for system_id, _ in systems]),
        Column("name", [escape(system.name) for _, system in systems], text=True, drop=1),
        Column("device", [escape(system.device) for _, system in systems]),
        Column("per node", [str(system.devices_per_node) for _, system in systems], right=True),
        Column("intra", [escape(system.intra or "-") for _, system in systems]),
        Column("inter", [escape(system.inter or "-") for _, system in systems]),
        Column("NICs", [_number(system.nics_per_node) for _, system in systems], right=True),
    ]
    return compact_table(
        "systems",
        columns,
        width=width,
        caption="`trainperf predict --system ID` takes a row's device, devices per node, "
        "links and NICs per node; '-': one device to a node, or no network stated",
    )
