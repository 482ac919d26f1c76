"""Tables of ``trainperf predict``: the predicted scaling, the assumptions, the calibration."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.markup import escape
from rich.table import Table

from trainperf.report.tables import add_columns

GIB = 2**30


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _fits(row: dict[str, Any]) -> str:
    memory = row["memory"]
    need = f"{memory['total_bytes'] / GIB:.1f}"
    if memory["available_bytes"] is None:
        return f"? ({need} GiB, capacity unknown)"
    verdict = "yes" if row["fits"] else "[red]no[/red]"
    return f"{verdict} ({need}/{memory['available_bytes'] / GIB:.1f} GiB)"


def _title(inputs: dict[str, Any]) -> str:
    links = ", ".join(
        f"{scope} {inputs[scope]}" for scope in ("intra", "inter") if inputs.get(scope)
    )
    return escape(
        f"predicted {inputs['scaling']} scaling of {inputs['model']} "
        f"({inputs['size']}, batch {inputs['batch_size']}, {inputs['precision']}) "
        f"on {inputs['device']}, {inputs['per_node']} per node" + (f"; {links}" if links else "")
    )


def prediction_table(prediction: dict[str, Any]) -> Table:
    """One row per device count of ``trainperf.predict.model.predict``'s answer."""
    table = Table(title=_title(prediction["inputs"]))
    add_columns(
        table,
        "devices>, nodes>, batch/dev>, compute ms>, comm ms>, exposed ms>, stragglers ms>, "
        "overhead ms>, step ms>, samples/s>, efficiency>, comm share>, all-reduce, fits (GiB)",
    )
    for r in prediction["rows"]:
        table.add_row(
            str(r["devices"]),
            str(r["nodes"]),
            str(r["device_batch"]),
            _ms(r["compute_s"]),
            _ms(r["comm_s"]),
            _ms(r["comm_exposed_s"]),
            _ms(r["straggler_s"]),
            _ms(r["overhead_s"]),
            _ms(r["step_s"]),
            f"{r['samples_per_s']:,.1f}",
            f"{r['efficiency']:.1%}",
            f"{r['comm_fraction']:.1%}",
            r["algorithm"],
            _fits(r),
        )
    return table


def fsdp_prediction_table(prediction: dict[str, Any]) -> Table:
    """One row per device count of ``trainperf.predict.fsdp.predict_fsdp``'s answer."""
    inputs = prediction["inputs"]
    links = ", ".join(f"{k} {inputs[k]}" for k in ("intra", "inter") if inputs.get(k))
    search = prediction.get("search")
    table = Table(
        title=escape(
            (f"smallest count that holds it: {search['smallest_devices']}; " if search else "")
            + f"predicted FSDP {inputs['scaling']} scaling of {inputs['model']} "
            f"({inputs['size']}, batch {inputs['batch_size']}, {inputs['precision']}, "
            f"checkpointing {inputs['activation_checkpointing']}"
            + ("" if inputs["reshard_after_forward"] else ", no reshard")
            + f") on {inputs['device']}, {inputs['per_node']} per node"
            + (f"; {links}" if links else "")
        )
    )
    rate = "tokens" if inputs["tokens_per_sample"] else "samples"
    add_columns(
        table,
        "devices>, nodes>, batch/dev>, compute ms>, recompute ms>, comm ms>, exposed ms>, "
        f"step ms>, {rate}/s/dev>, {rate}/s>, MFU>, efficiency>, sharded GiB>, "
        "gathered GiB>, activations GiB>, fits (GiB)",
    )
    for r in prediction["rows"]:
        memory = r["memory"]
        per_device = r["tokens_per_s_per_device"] or r["samples_per_s_per_device"]
        total = r["tokens_per_s"] or r["samples_per_s"]
        sharded = memory["weights_bytes"] + memory["gradients_bytes"] + memory["optimizer_bytes"]
        gathered = memory["gathered_params_bytes"] + memory["gathered_grads_bytes"]
        table.add_row(
            str(r["devices"]),
            str(r["nodes"]),
            str(r["device_batch"]),
            *(f"{r[k] * 1e3:.1f}" for k in ("compute_s", "recompute_s", "comm_s")),
            f"{r['comm_exposed_s'] * 1e3:.1f}",
            f"{r['step_s'] * 1e3:.1f}",
            f"{per_device:,.0f}",
            f"{total:,.0f}",
            "-" if r["mfu"] is None else f"{r['mfu']:.1%}",
            f"{r['efficiency']:.1%}",
            f"{sharded / GIB:.1f}",
            f"{gathered / GIB:.1f}",
            f"{memory['activations_bytes'] / GIB:.1f}",
            _fits(r),
        )
    return table


def assumptions_text(assumptions: Iterable[str], markdown: bool = False) -> str:
    """The assumptions as a list under the table (Markdown bullets or indented lines)."""
    bullet = "- " if markdown else "  - "
    head = "**Assumptions**" if markdown else "assumptions:"
    return "\n".join([head, *(bullet + a for a in assumptions)]) + "\n"


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
