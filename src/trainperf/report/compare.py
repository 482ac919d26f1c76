"""Rich tables of ``trainperf compare``, systems as rows, so that 100 systems are 100 rows:
per case, the baseline and then each other system with its throughput, the ratio to the
baseline, the ratio's 95% interval and the decision; then the geometric means per group,
a row per group and system. Columns are chosen to fit the width (trainperf.report.cells).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from trainperf.measure.hierarchy import UNBOUNDED
from trainperf.report.cells import Column, compact_table, escape, interval_range, plus_minus


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _others(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in document["systems"] if not s["baseline"]]


def baseline_line(document: dict[str, Any]) -> str:
    base = document["baseline"]
    return f"baseline {base['label']} ({base['fingerprint']}): {base['chosen']}"


def compare_table(document: dict[str, Any], width: int | None = None) -> Table:
    """Per case a row for the baseline, then one per other system: samples/s and the ± of
    its 95% interval, the ratio to the baseline, the ratio's 95% interval ("n/a (2 runs)"
    below 3 runs a side) and the decision. The case's label is on its first row."""
    base = document["baseline"]
    order = [base, *_others(document)]
    rows: list[tuple[str, dict[str, Any], dict[str, Any]]] = []  # (case label, system, entry)
    sections = []
    for case in document["cases"]:
        per = case["per_system"]
        for position, system in enumerate(order):
            rows.append((case["label"] if position == 0 else "", system, per[system["id"]]))
            sections.append(position == len(order) - 1 and len(order) > 1)
    base_runs = [
        case["per_system"][base["id"]]["runs"] for case in document["cases"] for _ in order
    ]
    columns = [
        Column("case", [escape(label) for label, _, _ in rows], text=True),
        Column("system", [escape(system["label"]) for _, system, _ in rows], text=True),
        Column("samples/s", [_throughput(entry) for _, _, entry in rows], right=True),
        Column("±95%", [_plus_minus(entry) for _, _, entry in rows], right=True, drop=2),
        Column("ratio", [_ratio(entry["ratio"]) for _, _, entry in rows], right=True),
        Column(
            "95% CI",
            [
                _ratio_interval(entry, runs)
                for (_, _, entry), runs in zip(rows, base_runs, strict=True)
            ],
            right=True,
            drop=1,
        ),
        # A short vocabulary ("no significant difference" the longest): never wrapped.
        Column("decision", [escape(_decision(entry)) for _, _, entry in rows]),
    ]
    caption = (
        escape(baseline_line(document))
        + "; samples/s: mean over the runs ± its 95% interval; 95% CI: of the ratio, "
        "Fieller's interval from the variation between runs (n/a below 3 runs on a side)"
    )
    return compact_table(
        f"throughput against {escape(base['label'])}",
        columns,
        width=width,
        caption=caption,
        sections=sections,
    )


def _throughput(entry: dict[str, Any]) -> str:
    """The mean over the runs, or the status of a case that is not ok."""
    if entry["status"] != "ok":
        return escape(entry["status"])
    return f"{entry['samples_per_s']:.1f}"


def _plus_minus(entry: dict[str, Any]) -> str:
    if entry["status"] != "ok" or not entry.get("samples_per_s"):
        return "-"
    ci = entry.get("samples_per_s_ci95")
    relative = (ci[1] - entry["samples_per_s"]) / entry["samples_per_s"] if ci else None
    return plus_minus({"runs": entry.get("runs", 1), "ci95_relative": relative})


def _ratio_interval(entry: dict[str, Any], base_runs: int) -> str:
    if entry["ratio"] is None:
        return "-"
    absent = "unbounded" if entry.get("absent_reason") == UNBOUNDED else "-"
    return interval_range(entry["ci95"], min(entry["runs"], base_runs), "{:.2f}", absent)


def _decision(entry: dict[str, Any]) -> str:
    """faster, slower, no significant difference; 'baseline'; 'no decision' when the runs
    are too few or vary too much (the interval column says which); else why not compared."""
    if entry["decision"]:
        return entry["decision"]
    if entry["status"] != "ok":
        return "-"  # the samples/s column says what became of it
    reason = entry.get("absent_reason") or "-"
    if reason.startswith("not enough runs") or reason == UNBOUNDED:
        return "no decision"
    return reason


def groups_table(document: dict[str, Any], width: int | None = None) -> Table:
    """Geometric mean of the ratios per group and system, a row each, with the number of
    cases counted; the group's label on its first row."""
    by = ", ".join(document["group_by"]) or "none"
    others = _others(document)
    rows = [
        (group["label"] if position == 0 else "", system, group["per_system"][system["id"]])
        for group in document["groups"]
        for position, system in enumerate(others)
    ]
    sections = [
        position == len(others) - 1 and len(others) > 1
        for _ in document["groups"]
        for position in range(len(others))
    ]
    columns = [
        Column("group", [escape(label) for label, _, _ in rows], text=True),
        Column("system", [escape(system["label"]) for _, system, _ in rows], text=True),
        Column("geomean", [_ratio(found["geomean_ratio"]) for _, _, found in rows], right=True),
        Column("%", [_difference(found["geomean_ratio"]) for _, _, found in rows], right=True),
        Column("cases", [str(found["cases"]) for _, _, found in rows], right=True),
    ]
    return compact_table(
        f"geometric mean of the ratios to {escape(document['baseline']['label'])}"
        f" (grouped by {escape(by)})",
        columns,
        width=width,
        caption="only cases ok on both sides count",
        sections=sections,
    )


def _difference(mean: float | None) -> str:
    return _percent(None if mean is None else mean - 1)
