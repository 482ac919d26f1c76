"""Tables of ``trainperf predict``: the predicted scaling, the assumptions, the calibration."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from typing import Any

from rich.table import Table

from trainperf.report.cells import WIDE, Column, compact_table, escape
from trainperf.report.tables import add_columns

GIB = 2**30


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _fits(row: dict[str, Any]) -> str:
    """'yes 4.6/16.0': whether it fits, the GiB it needs and the GiB the device has."""
    memory = row["memory"]
    need = f"{memory['total_bytes'] / GIB:.1f}"
    if memory["available_bytes"] is None:
        return f"? {need}/unknown"
    verdict = "yes" if row["fits"] else "[red]no[/red]"
    return f"{verdict} {need}/{memory['available_bytes'] / GIB:.1f}"


def _links(inputs: dict[str, Any]) -> str:
    """'intra L, inter L' as given; the inter link with its NICs per node when not one."""
    links = [f"{scope} {inputs[scope]}" for scope in ("intra", "inter") if inputs.get(scope)]
    if inputs.get("inter") and inputs.get("nics_per_node", 1) != 1:
        links[-1] += f" x {inputs['nics_per_node']} NICs"
    return ", ".join(links)


def _machine(inputs: dict[str, Any]) -> str:
    """'on DEVICE, N per node; links', led by the catalog system where one was given."""
    links = _links(inputs)
    where = f"{inputs['device']}, {inputs['per_node']} per node"
    system = f"{inputs['system']}: " if inputs.get("system") else ""
    return f"on {system}{where}" + (f"; {links}" if links else "")


def _title(inputs: dict[str, Any]) -> str:
    return escape(
        f"predicted {inputs['scaling']} scaling of {inputs['model']} "
        f"({inputs['size']}, batch {inputs['batch_size']}, {inputs['precision']}) "
        + _machine(inputs)
    )


def _column(header: str, cells: list[str], drop: int = 0) -> Column:
    return Column(header, cells, right=True, drop=drop)


def _layout_columns(rows: list[dict[str, Any]]) -> list[Column]:
    """Devices, nodes and batch per device: the layout every prediction table (DDP's and
    FSDP's) starts with, nodes and batch dropped first on a narrow terminal."""
    return [
        _column("devices", [str(r["devices"]) for r in rows]),
        _column("nodes", [str(r["nodes"]) for r in rows], drop=2),
        _column("batch/dev", [str(r["device_batch"]) for r in rows], drop=1),
    ]


def prediction_table(
    prediction: dict[str, Any], *, wide: bool = False, width: int | None = None
) -> Table:
    """One row per device count of ``trainperf.predict.model.predict``'s answer, its
    columns chosen to fit ``width`` (trainperf.report.cells): devices, nodes, batch per
    device, compute and exposed communication, step time, samples/s, efficiency and
    whether it fits in memory; ``wide`` adds the communication in all, the stragglers,
    the per-step overhead, communication's share and the all-reduce algorithm."""
    rows = prediction["rows"]

    def ms(key: str) -> list[str]:
        return [_ms(r[key]) for r in rows]

    columns = [
        *_layout_columns(rows),
        _column("compute ms", ms("compute_s"), drop=3),
        _column("comm ms", ms("comm_s"), drop=WIDE),
        _column("exposed ms", ms("comm_exposed_s"), drop=4),
        _column("stragglers ms", ms("straggler_s"), drop=WIDE),
        _column("overhead ms", ms("overhead_s"), drop=WIDE),
        _column("step ms", ms("step_s")),
        _column("samples/s", [f"{r['samples_per_s']:,.1f}" for r in rows]),
        _column("efficiency", [f"{r['efficiency']:.1%}" for r in rows]),
        _column("comm share", [f"{r['comm_fraction']:.1%}" for r in rows], drop=WIDE),
        Column("all-reduce", [escape(str(r["algorithm"])) for r in rows], drop=WIDE),
        Column("fits GiB", [_fits(r) for r in rows]),
    ]
    return compact_table(
        _title(prediction["inputs"]),
        columns,
        width=width,
        wide=wide,
        caption="fits GiB: the memory a device needs / has; exposed: communication not "
        "hidden behind the backward pass",
    )


def fsdp_prediction_table(
    prediction: dict[str, Any], *, wide: bool = False, width: int | None = None
) -> Table:
    """One row per device count of ``trainperf.predict.fsdp.predict_fsdp``'s answer, its
    columns chosen to fit ``width``: devices, nodes, batch per device, compute, exposed
    communication, step time, the rate in all, MFU, efficiency and whether it fits;
    ``wide`` adds recomputation, the work on the parameters (optimizer step, FSDP's copies),
    communication in all, the rate per device and the memory per device (sharded state,
    gathered weights and gradients, activations)."""
    inputs = prediction["inputs"]
    search = prediction.get("search")
    title = escape(
        (f"smallest count that holds it: {search['smallest_devices']}; " if search else "")
        + f"predicted FSDP {inputs['scaling']} scaling of {inputs['model']} "
        f"({inputs['size']}, batch {inputs['batch_size']}, {inputs['precision']}, "
        f"checkpointing {inputs['activation_checkpointing']}"
        + ("" if inputs["reshard_after_forward"] else ", no reshard")
        + ") "
        + _machine(inputs)
    )
    rate = "tokens" if inputs["tokens_per_sample"] else "samples"
    rows = prediction["rows"]

    def ms(key: str) -> list[str]:
        return [f"{r[key] * 1e3:.1f}" for r in rows]

    def gib(part: Any) -> list[str]:
        return [f"{part(r['memory']) / GIB:.1f}" for r in rows]

    per_device = [r["tokens_per_s_per_device"] or r["samples_per_s_per_device"] for r in rows]
    total = [r["tokens_per_s"] or r["samples_per_s"] for r in rows]
    columns = [
        *_layout_columns(rows),
        _column("compute ms", ms("compute_s"), drop=4),
        _column("recompute ms", ms("recompute_s"), drop=WIDE),
        _column("params ms", ms("parameter_work_s"), drop=WIDE),
        _column("comm ms", ms("comm_s"), drop=WIDE),
        _column("exposed ms", ms("comm_exposed_s"), drop=3),
        _column("step ms", ms("step_s")),
        _column(f"{rate}/s/dev", [f"{v:,.0f}" for v in per_device], drop=WIDE),
        _column(f"{rate}/s", [f"{v:,.0f}" for v in total]),
        _column("MFU", ["-" if r["mfu"] is None else f"{r['mfu']:.1%}" for r in rows]),
        _column("efficiency", [f"{r['efficiency']:.1%}" for r in rows]),
        _column(
            "sharded GiB",
            gib(lambda m: m["weights_bytes"] + m["gradients_bytes"] + m["optimizer_bytes"]),
            drop=WIDE,
        ),
        _column(
            "gathered GiB",
            gib(lambda m: m["gathered_params_bytes"] + m["gathered_grads_bytes"]),
            drop=WIDE,
        ),
        _column("activations GiB", gib(lambda m: m["activations_bytes"]), drop=WIDE),
        Column("fits GiB", [_fits(r) for r in rows]),
    ]
    caption = (
        "fits GiB: the memory a device needs / has; exposed: communication not hidden behind "
        "compute"
    )
    if any(r["efficiency"] > 1 for r in rows):
        caption += f"; {SHARDED_ABOVE_ONE}"
    return compact_table(title, columns, width=width, wide=wide, caption=caption)


# Why a sharded device can beat the one-device baseline: the efficiency is its rate against
# one device's (inputs.scaled_rows), and that device steps the optimizer and casts every
# parameter where a sharded one does 1/N of them (predict/fsdp.py, parameter work).
SHARDED_ABOVE_ONE = (
    "efficiency over 100%: a sharded device updates 1/N of the parameters (optimizer step, "
    "casts), the one device it is measured against all of them"
)


def assumptions_text(
    assumptions: Iterable[str], markdown: bool = False, width: int | None = None
) -> str:
    """The assumptions as a list under the table: Markdown bullets, each whole; or indented
    lines, each wrapped at spaces to ``width`` under its own bullet."""
    if markdown:
        return "\n".join(["**Assumptions**", *("- " + a for a in assumptions)]) + "\n"
    lines = ["assumptions:"]
    for assumption in assumptions:
        if width is None:
            lines.append("  - " + assumption)
            continue
        lines += textwrap.wrap(
            assumption,
            width,
            initial_indent="  - ",
            subsequent_indent="    ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(lines) + "\n"


def calibration_table(calibration: dict[str, Any]) -> Table:
    """What was fitted, from which stored rows, and how well it reproduces them."""
    cal = calibration
    table = Table(title=escape(f"calibration of {cal['model']} on system {cal['system']}"))
    add_columns(table, "result>, devices>, batch>, scaling, measured/s>, predicted/s>, error>")
    for r in cal["fit_rows"]:
        predicted = r.get("predicted_samples_per_s")
        table.add_row(
            str(r["result_id"]),
            str(r["devices"]),
            str(r["batch_size"]),
            r["scaling"],
            _measured(r),
            f"{predicted:,.1f}" if predicted is not None else "-",
            f"{r['error_pct']:+.1f}%" if predicted is not None else escape(r.get("reason", "")),
        )
    table.caption = escape("; ".join(calibration_lines(cal)))
    return table


def _measured(row: dict[str, Any]) -> str:
    """The measured throughput and the ± of its 95% interval over runs, when it has one."""
    measured, ci = row["measured_samples_per_s"], row.get("measured_ci95")
    return f"{measured:,.1f}" + (f" ±{(ci[1] - ci[0]) / 2 / measured:.0%}" if ci else "")


def calibration_lines(cal: dict[str, Any]) -> list[str]:
    """The fitted values and the reasons for those absent, one line each."""
    lines = []
    if cal.get("achieved_fraction") is not None:
        lines.append(f"achieved fraction of peak {cal['achieved_fraction']:.1%}")
    if cal.get("single_device_throughput") is not None:
        lines.append(
            f"single-device {cal['single_device_throughput']:,.1f} samples/s "
            f"at batch {cal['throughput_batch']}"
        )
    if cal.get("alpha_s") is not None:
        lines.append(
            f"{cal['link_scope']} link α {cal['alpha_s'] * 1e6:.3g} µs, "
            f"β {cal['beta_bytes_per_s'] / 1e9:.3g} GB/s"
        )
    lines += [f"{name} absent: {reason}" for name, reason in cal.get("absent", {}).items()]
    return lines


def compute_curve_table(prediction: dict[str, Any]) -> Table:
    """``predict --explain``: one device's compute time against its batch, as the rows read
    it (a fixed part and a part per sample when a batch curve was measured)."""
    table = Table(title="compute of one device against its batch")
    for header in ("batch/dev", "compute ms", "samples/s", "ms per sample"):
        table.add_column(header, justify="right")
    for point in prediction["compute_curve"]:
        table.add_row(
            str(point["device_batch"]),
            _ms(point["compute_s"]),
            f"{point['samples_per_s']:,.1f}",
            _ms(point["compute_s"] / point["device_batch"]),
        )
    return table
