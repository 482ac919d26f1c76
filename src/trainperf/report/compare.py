"""Rich tables of ``trainperf compare``: the cases side by side, and the geomeans per group."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _others(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in document["systems"] if not s["baseline"]]


def baseline_line(document: dict[str, Any]) -> str:
    base = document["baseline"]
    return f"baseline {base['label']} ({base['fingerprint']}): {base['chosen']}"


def compare_table(document: dict[str, Any]) -> Table:
    """One row per case: the baseline's samples/s, then per system samples/s, ratio, %, CI."""
    base = document["baseline"]
    table = Table(
        title=f"throughput against {escape(base['label'])}",
        caption=escape(baseline_line(document))
        + "; samples/s: mean over the runs ± its 95% interval (n runs); ratio CI: Fieller's "
        "95% interval from the variation between runs",
    )
    table.add_column("case", justify="left")
    table.add_column(f"{escape(base['label'])} samples/s", justify="right")
    for system in _others(document):
        name = escape(system["label"])
        for header in ("samples/s", "ratio", "%", "95% CI"):
            table.add_column(f"{name} {header}", justify="right")
        table.add_column(f"{name} decision", justify="left")
    for case in document["cases"]:
        per = case["per_system"]
        cells = [escape(case["label"]), _throughput(per[base["id"]])]
        for system in _others(document):
            cells += _cells(per[system["id"]])
        table.add_row(*cells)
    return table


def _throughput(entry: dict[str, Any]) -> str:
    """'682.8 ±4.2% n=3': the mean over the runs, its interval and the runs."""
    if entry["status"] != "ok":
        return entry["status"]
    text = f"{entry['samples_per_s']:.1f}"
    ci = entry.get("samples_per_s_ci95")
    if ci:
        text += f" ±{(ci[1] - ci[0]) / 2 / entry['samples_per_s']:.1%}"
    return text + f" n={entry.get('runs', 1)}"


def _cells(entry: dict[str, Any]) -> list[str]:
    if entry["status"] != "ok":
        return [entry["status"], "-", "-", "-", "-"]
    ci = entry["ci95"]
    decision = entry["decision"] or f"no decision: {entry['absent_reason']}"
    return [
        _throughput(entry),
        _ratio(entry["ratio"]),
        _percent(entry["difference"]),
        f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "-",
        escape(decision),
    ]


def groups_table(document: dict[str, Any]) -> Table:
    """Geometric mean of the ratios per group and system, with the number of cases counted."""
    by = ", ".join(document["group_by"]) or "none"
    table = Table(
        title=f"geometric mean of the ratios to {escape(document['baseline']['label'])}"
        f" (grouped by {escape(by)})",
        caption="only cases ok on both sides count",
    )
    table.add_column("group", justify="left")
    for system in _others(document):
        name = escape(system["label"])
        table.add_column(f"{name} geomean", justify="right")
        table.add_column(f"{name} %", justify="right")
        table.add_column(f"{name} cases", justify="right")
    for group in document["groups"]:
        cells = [escape(group["label"])]
        for system in _others(document):
            found = group["per_system"][system["id"]]
            mean = found["geomean_ratio"]
            cells += [
                _ratio(mean),
                _percent(None if mean is None else mean - 1),
                str(found["cases"]),
            ]
        table.add_row(*cells)
    return table
