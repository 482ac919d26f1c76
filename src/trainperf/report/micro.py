"""Terminal tables of the micro-benchmarks (collectives print nccl-tests' layout instead)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from trainperf.report.cells import escape


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    value = row.get(key)
    return format(value, fmt) if isinstance(value, int | float) else "-"


def accumulation_label(row: dict[str, Any]) -> str:
    """How an fp8 row accumulated (torch._scaled_mm's use_fast_accum), "" for other rows."""
    if "fast_accum" not in row:
        return ""
    return "fast accum" if row["fast_accum"] else "no fast accum"


def gemm_table(metrics: dict[str, Any]) -> Table:
    table = Table(
        title="GEMM: TFLOP/s = 2·M·N·K / time"
        + ("" if metrics.get("flush") else " (caches not flushed)")
    )
    for name in ("shape", "dtype", "status", "time µs (median)", "TFLOP/s mean", "median", "best"):
        justify = "left" if name in ("shape", "dtype", "status") else "right"
        # A failed shape's reason in full, wrapped at spaces (never cut mid-word).
        table.add_column(name, justify=justify, overflow="fold" if name == "status" else "ellipsis")
    for row in metrics["rows"]:
        accumulation = accumulation_label(row)
        table.add_row(
            row["shape"],
            f"{row['dtype']} ({accumulation})" if accumulation else row["dtype"],
            row["status"]
            if row["status"] == "ok"
            else escape(f"{row['status']}: {row.get('reason', '')}"),
            _cell(row, "time_us_median", ".1f"),
            _cell(row, "tflops_mean", ".3f"),
            _cell(row, "tflops_median", ".3f"),
            _cell(row, "tflops_best", ".3f"),
        )
    partial = metrics.get("max_achievable") is None and "best_of_run" in metrics
    what = "best of this partial run" if partial else "max achievable"
    for dtype, best in (metrics.get("max_achievable") or metrics.get("best_of_run") or {}).items():
        where = ", ".join(filter(None, (best["shape"], accumulation_label(best))))
        table.caption = (
            table.caption or ""
        ) + f"{what} {dtype}: {best['tflops']:.3f} TFLOP/s ({where})  "
    if partial:
        table.caption = (
            f"{table.caption or ''}(not the machine's max achievable: "
            f"{escape(metrics.get('max_achievable_absent_reason') or '')})"
        )
    return table


def conv_table(metrics: dict[str, Any]) -> Table:
    table = Table(title="convolution: TFLOP/s = 2·N·K·C·R·S·P·Q / time (median)")
    for name in (
        "shape",
        "dtype",
        "status",
        "fwd µs",
        "fwd TFLOP/s",
        "bwd data µs",
        "bwd data TFLOP/s",
        "bwd filter µs",
        "bwd filter TFLOP/s",
    ):
        table.add_column(name, justify="left" if name in ("shape", "dtype", "status") else "right")
    for row in metrics["rows"]:
        table.add_row(
            row["shape"],
            row["dtype"],
            row["status"],
            *(
                _cell(row, f"{p}_{what}", fmt)
                for p in ("fwd", "bwd_data", "bwd_filter")
                for what, fmt in (("time_us_median", ".1f"), ("tflops_median", ".3f"))
            ),
        )
    return table


def memory_table(metrics: dict[str, Any]) -> Table:
    table = Table(title="memory bandwidth (GB/s = 1e9 bytes/s)")
    for name in ("kind", "size", "bytes count", "GB/s median", "GB/s best", "time µs median"):
        table.add_column(name, justify="left" if name in ("kind", "bytes count") else "right")
    for row in metrics["rows"]:
        table.add_row(
            row["kind"],
            f"{row['size_bytes'] / 2**20:.0f} MiB",
            row["counts"],
            _cell(row, "bandwidth_gbps_median", ".1f"),
            _cell(row, "bandwidth_gbps_best", ".1f"),
            _cell(row, "time_us_median", ".1f"),
        )
    return table


def p2p_text(metrics: dict[str, Any]) -> str:
    """The matrices as p2pBandwidthLatencyTest prints them: a block per measure and mode
    (times: device time between CUDA events, see trainperf.micro.p2p)."""
    size_mib = metrics["size_bytes"] / 2**20
    lines = [f"devices: {', '.join(metrics['devices'])}; {size_mib:.0f} MiB per copy"]
    n = len(metrics["devices"])

    def block(title: str, matrix: list[list[Any]], fmt: str) -> None:
        lines.append(title)
        lines.append("   D\\D" + "".join(f"{j:>10}" for j in range(n)))
        for i, row in enumerate(matrix):
            lines.append(f"{i:>6} " + "".join(format(v, fmt).rjust(10) for v in row))

    per_copy = (
        f" per {metrics['latency_bytes']}-byte copy ({metrics['latency_copies']} queued)"
        if "latency_copies" in metrics  # absent from earlier versions' results
        else ""
    )
    block("peer access (1 = yes)", [[int(v) for v in r] for r in metrics["connectivity"]], "d")
    for mode, label in (
        ("peer", "peer access"),
        ("staged", "staged through host (peer access off)"),
    ):
        block(f"unidirectional GB/s, {label}", metrics[mode]["unidirectional_gbps"], ".2f")
        block(f"bidirectional GB/s, {label}", metrics[mode]["bidirectional_gbps"], ".2f")
        block(f"latency µs{per_copy}, {label}", metrics[mode]["latency_us"], ".2f")
    return "\n".join(lines)
