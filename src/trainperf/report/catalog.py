"""Rich tables of the hardware catalog: the devices with their peaks, the links."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from trainperf.predict.catalog import PRECISIONS, Catalog


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def devices_table(catalog: Catalog) -> Table:
    """One row per device: training peaks per precision, memory, bandwidth, TDP, and the
    assumed whole-step efficiencies."""
    table = Table(
        title="devices (training peaks, dense)",
        caption="peaks in TFLOP/s (16-bit: FP32 accumulation), '-' where the device lacks "
        "the precision; "
        "efficiency: assumed fraction of peak for a whole training step",
    )
    table.add_column("id", justify="left")
    table.add_column("name", justify="left")
    table.add_column("kind", justify="left")
    for precision in PRECISIONS:
        table.add_column(precision, justify="right")
    table.add_column("memory GB", justify="right")
    table.add_column("GB/s", justify="right")
    table.add_column("TDP W", justify="right")
    table.add_column("efficiency", justify="left")
    for device_id, device in catalog.devices.items():
        efficiencies = ", ".join(
            f"{p} {e:g}" for p in PRECISIONS if (e := device.default_efficiency.get(p))
        )
        table.add_row(
            escape(device_id),
            escape(device.name),
            device.kind,
            *(_number(device.peak_tflops.get(p)) for p in PRECISIONS),
            _number(device.memory_gb),
            _number(device.memory_bandwidth_gbps),
            _number(device.tdp_w),
            efficiencies,
        )
    return table


def links_table(catalog: Catalog) -> Table:
    """One row per link: scope, bandwidth per direction, latency, efficiency, note."""
    table = Table(
        title="links",
        caption="GB/s per direction (intra: per device, inter: per node); usable = GB/s x "
        "efficiency; latency: per message step",
    )
    table.add_column("id", justify="left")
    table.add_column("name", justify="left")
    table.add_column("scope", justify="left")
    table.add_column("GB/s", justify="right")
    table.add_column("usable GB/s", justify="right")
    table.add_column("latency µs", justify="right")
    table.add_column("efficiency", justify="right")
    table.add_column("note", justify="left")
    for link_id, link in catalog.links.items():
        table.add_row(
            escape(link_id),
            escape(link.name),
            link.scope,
            _number(link.bandwidth_gbps),
            f"{link.bytes_per_s / 1e9:.3g}",
            _number(link.latency_us),
            _number(link.efficiency),
            escape(link.note or ""),
        )
    return table
