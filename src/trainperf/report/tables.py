"""Rich tables and CSV rows for results and model analytics."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from rich.markup import escape
from rich.table import Table

from trainperf.case import parallel_mode
from trainperf.report.csv_safe import csv_lines

CASE_COLUMNS = ("model", "batch_size", "image_size", "seq_len", "precision", "device", "steps")
METRIC_COLUMNS = (
    "samples_per_s_median",
    "samples_per_s_mean",
    "ci95_relative",
    "runs",
    "runs_stop_reason",
    "within_run_cv",
    "between_run_cv",
    "cv",
    "jitter",
    "tokens_per_s_median",
    "steps_warmup",
    "steps_measured",
    "mem_peak_bytes",
    "mfu",
    "unstable",
    "data_wait_share",
    "compute_samples_per_s",
)
CSV_COLUMNS = (
    ("id", "created_at", "sweep_id", "system", "hostname")
    + CASE_COLUMNS
    + ("device_name", "status", "samples_per_s_ci95_low", "samples_per_s_ci95_high")
    + METRIC_COLUMNS
    + ("error",)
)


def add_columns(table: Table, columns: str) -> None:
    """Add ``columns`` to ``table``: names separated by ", ", a name ending in ">" is
    right-justified (as ">" aligns right in Python's format specifications)."""
    for column in columns.split(", "):
        right = column.endswith(">")
        table.add_column(column.removesuffix(">"), justify="right" if right else "left")


def _si(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.3g} {unit}".strip()


def _percent(value: float | None, absent: str = "-") -> str:
    return absent if value is None else f"{value:.1%}"


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:.2f} GiB"


def _size(case: dict[str, Any], metrics: dict[str, Any]) -> int | str:
    """The image size or sequence length used (metrics), else asked for (case)."""
    for key in ("image_size", "seq_len"):
        if metrics.get(key) or case.get(key):
            return metrics.get(key) or case[key]
    return "natural"


def results_table(results: Iterable[dict[str, Any]], title: str = "trainperf results") -> Table:
    """One row per result: the mean throughput of its runs, the ± of its between-run 95%
    interval, its runs, the between-run coefficient of variation, steps (warm-up +
    measured, over all runs) and what ended the runs. Cases on real data add their loader
    workers, the share of step time spent waiting for data and the samples/s of compute
    alone (data ready). Distributed cases add their parallel method and the training state
    per rank (parameters + gradients + optimizer state; sharded under fsdp). A missing MFU
    has its reasons in the caption."""
    results = list(results)
    with_data = any("data_wait_share" in (r.get("metrics") or {}) for r in results)
    with_ranks = any("mem_params_bytes" in (r.get("metrics") or {}) for r in results)
    table = Table(title=title)
    # With real data: workers after the device, the data split after the total samples/s.
    workers, split = ("workers>, ", "compute/s>, data wait>, ") if with_data else ("", "")
    state = "state/rank>, " if with_ranks else ""
    add_columns(
        table,
        f"model, batch>, size>, prec, device, {workers}status, samples/s>, {split}±CI95>, "
        f"runs>, between>, tokens/s>, MFU>, peak mem>, {state}steps>, runs ended",
    )
    no_mfu = sorted(
        {
            m["mfu_absent_reason"]
            for m in (r.get("metrics") or {} for r in results)
            if m.get("mfu") is None and m.get("mfu_absent_reason")
        }
    )
    if no_mfu:
        table.caption = escape("MFU -: " + "; ".join(no_mfu))
    for r in results:
        case, m = r["case"], r.get("metrics") or {}
        status = r["status"]
        if status == "ok" and r.get("reused"):
            status = "ok (earlier sweep)" + (" unstable" if m.get("unstable") else "")
        elif status == "ok" and m.get("unstable"):
            status = "ok (unstable)"
        elif status != "ok" and r.get("error"):
            status = escape(f"{status}: {r['error'].get('message', '')[:40]}")
        # Case fields are user text (a custom model is module:function; rows may come from
        # an imported file): escaped, so that "[/]" prints instead of breaking the markup.
        row = [
            escape(str(case["model"])),
            escape(str(case["batch_size"])),
            escape(str(_size(case, m))),
            escape(str(case["precision"])),
            escape(str(case["device"])),
            status,
            f"{m['samples_per_s_median']:.1f}" if "samples_per_s_median" in m else "-",
            _percent(m.get("ci95_relative"), "1 run" if m.get("runs") == 1 else "-"),
            str(m.get("runs", "-")),
            _percent(m.get("between_run_cv")),
            _si(m.get("tokens_per_s_median")),
            f"{m['mfu']:.1%}" if m.get("mfu") is not None else "-",
            _bytes(m.get("mem_peak_bytes")),
            f"{m['steps_warmup']}+{m['steps_measured']}" if "steps_measured" in m else "-",
            escape(str(m.get("runs_stop_reason", "-"))),
        ]
        if with_ranks:
            state_bytes = _state_bytes(m)
            row.insert(-2, "-" if state_bytes is None else _binary(state_bytes))
            row[4] = escape(f"{case['device']} {_method(case)}".strip())
        if with_data:
            workers, compute, wait = _data_cells(case, m)
            row[7:7] = [compute, wait]
            row.insert(5, workers)
        table.add_row(*row)
    return table


def _binary(value: int) -> str:
    """Bytes in MiB below a GiB, else in GiB."""
    return f"{value / 2**20:.1f} MiB" if value < 2**30 else f"{value / 2**30:.2f} GiB"


def _state_bytes(m: dict[str, Any]) -> int | None:
    """Parameters + gradients + optimizer state of the largest rank, or None."""
    parts = [m.get(k) for k in ("mem_params_bytes", "mem_grads_bytes", "mem_optimizer_bytes")]
    return None if parts[0] is None else sum(p or 0 for p in parts)


def _method(case: dict[str, Any]) -> str:
    """'fsdp x2 ac-full': the parallel mode over its devices and the checkpointing."""
    mode, devices, nodes = parallel_mode(case), case.get("devices", 1), case.get("nodes", 1)
    parts = [f"{mode} x{devices}" + (f"x{nodes}n" if nodes > 1 else "")] if mode != "none" else []
    if (checkpointing := case.get("activation_checkpointing", "none")) != "none":
        parts.append(f"ac-{checkpointing}")
    return " ".join(parts)


def _data_cells(case: dict[str, Any], m: dict[str, Any]) -> list[str]:
    """Loader workers, compute-only samples/s and data-wait share (marked if input-bound)."""
    if case.get("data", "synthetic") == "synthetic":
        return ["-", "-", "-"]
    share = m.get("data_wait_share")
    wait = (
        "-" if share is None else f"{share:.1%}" + (" input-bound" if m.get("input_bound") else "")
    )
    compute = m.get("compute_samples_per_s")
    return [str(case.get("workers", 0)), "-" if compute is None else f"{compute:.1f}", wait]


def models_table(rows: Iterable[dict[str, Any]]) -> Table:
    table = Table(title="trainperf model zoo (natural input size)")
    for name in (
        "model",
        "family",
        "input",
        "params",
        "fwd FLOPs/sample",
        "train FLOPs/sample",
        "grad MB fp32",
        "FLOPs/param",
    ):
        table.add_column(name, justify="left" if name in ("model", "family", "input") else "right")
    for row in rows:
        table.add_row(
            escape(row["name"]),
            escape(row["family"]),
            f"{row['size_name']}={row['size']}",
            f"{row['params']:,}",
            _si(row["fwd_flops_per_sample"]),
            _si(row["train_flops_per_sample"]),
            f"{row['grad_bytes_fp32'] / 1e6:.1f}",
            f"{row['flops_per_param']:.0f}",
        )
    return table


def _with_interval(value: float | None, ci: list[float] | None, fmt: str, absent: str = "-") -> str:
    """'1.84 (1.62-2.09)': a value and its 95% interval, when it has one."""
    if value is None:
        return absent
    text = fmt.format(value)
    return text + (f" ({fmt.format(ci[0])}-{fmt.format(ci[1])})" if ci else "")


def scaling_table(rows: Iterable[dict[str, Any]]) -> Table:
    table = Table(
        title="scaling: speedup and efficiency against 1 device of the same setting",
        caption="in brackets: 95% interval from the variation between runs (2+ runs a side)",
    )
    add_columns(
        table,
        "host, setting, scaling, devices>, samples/s>, speedup>, efficiency>, exposed comm>, "
        "rank spread>",
    )
    for r in rows:
        share = r.get("comm_exposed_share")
        table.add_row(
            escape(str(r["hostname"])),
            escape(r["setting"] + (f" ({r['ddp_options']})" if r.get("ddp_options") else "")),
            escape(str(r["scaling"])),
            f"{r['devices']} {r['parallel']}" if r["devices"] > 1 else "1",
            f"{r['samples_per_s']:.1f}",
            _with_interval(r["speedup"], r.get("speedup_ci95"), "{:.2f}"),
            _with_interval(r["efficiency"], r.get("efficiency_ci95"), "{:.1%}", "no baseline"),
            f"{share:.1%}" if share is not None else "-",
            f"{r['rank_spread']:.1%}" if r.get("rank_spread") is not None else "-",
        )
    return table


def pareto_table(fronts: dict[str, Any], show_all: bool = False) -> Table:
    table = Table(title="power-performance Pareto front per network")
    add_columns(
        table,
        "network, host, devices>, batch>, prec, samples/s>, power W>, samples/s/W>, "
        "J/sample>, front",
    )
    for group in fronts["fronts"]:
        name = escape(group["model"] + (f" @{group['size']}" if group["size"] else ""))
        for p in group["points"]:
            if not (show_all or p["on_front"]):
                continue
            table.add_row(
                name,
                escape(str(p["hostname"])),
                str(p["devices"]),
                str(p["batch_size"]),
                escape(str(p["precision"])),
                f"{p['samples_per_s']:.1f}",
                f"{p['average_power_w']:.1f}",
                f"{p['samples_per_s_per_w']:.3f}" if p.get("samples_per_s_per_w") else "-",
                f"{p['energy_per_sample_j']:.4f}" if p.get("energy_per_sample_j") else "-",
                "yes" if p["on_front"] else "dominated",
            )
    return table


def suites_table(rows: Iterable[dict[str, Any]]) -> Table:
    table = Table(title="built-in suites")
    for column in ("name", "cases", "version", "description"):
        table.add_column(column, justify="right" if column == "cases" else "left")
    for row in rows:
        table.add_row(
            escape(row["name"]), str(row["cases"]), row["version"], escape(row["description"])
        )
    return table


def csv_row(r: dict[str, Any]) -> dict[str, Any]:
    case, m = r["case"], r.get("metrics") or {}
    low, high = m.get("samples_per_s_ci95") or (None, None)
    return {
        "id": r.get("id"),
        "created_at": r.get("created_at"),
        "sweep_id": r.get("sweep_id"),
        "system": r["system"]["fingerprint"],
        "hostname": r["system"]["hostname"],
        **{k: case.get(k) for k in CASE_COLUMNS},
        "device_name": (r.get("device") or {}).get("name"),
        "status": r["status"],
        "samples_per_s_ci95_low": low,
        "samples_per_s_ci95_high": high,
        **{k: m.get(k) for k in METRIC_COLUMNS},
        "error": (r.get("error") or {}).get("message"),
    }


def results_csv(results: Iterable[dict[str, Any]]) -> str:
    """The results as CSV, one line each, safe to open in a spreadsheet (``csv_safe``)."""
    return "".join(results_csv_lines(results))


def results_csv_lines(results: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The lines of ``results_csv``, one at a time, as ``results`` are read."""
    return csv_lines(CSV_COLUMNS, (csv_row(r) for r in results))
