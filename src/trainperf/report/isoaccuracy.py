"""Rich table of an iso-accuracy comparison (``convergence.isoaccuracy.compare_curves``)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from trainperf.convergence.isoaccuracy import RELATIVE, diff_key
from trainperf.report.cells import escape


def run_name(document: dict[str, Any], side: str) -> str:
    """The label of run ``side`` ("a" or "b"), else its id, else the side."""
    run = document[side]
    if run.get("label"):
        return str(run["label"])
    return f"run {run['id']}" if run.get("id") is not None else side


def isoaccuracy_table(document: dict[str, Any]) -> Table:
    """One row per compared sample count: each metric of both runs and their difference;
    rows outside the tolerance in red; the verdict and its reason as the caption."""
    a, b = escape(run_name(document, "a")), escape(run_name(document, "b"))
    tolerance = document["tolerance"]
    notes = [f"{m} not compared: {why}" for m, why in document["not_compared"].items()]
    table = Table(
        title=f"iso-accuracy: {a} vs {b} at equal samples seen",
        caption=escape(
            f"{document['verdict']}: {document['reason']}"
            + "".join(f"; {note}" for note in notes)
            + "; values linearly interpolated between evaluations"
        ),
    )
    table.add_column("samples seen", justify="right")
    for metric in document["metrics"]:
        kind = "rel. diff" if metric in RELATIVE else "diff"
        table.add_column(f"{metric} {a}", justify="right")
        table.add_column(f"{metric} {b}", justify="right")
        limit = _difference(metric, tolerance[diff_key(metric)])
        table.add_column(f"{metric} {kind} (tol. {limit})", justify="right")
    for row in document["rows"]:
        cells = [f"{row['samples_seen']:,}"]
        for metric in document["metrics"]:
            cells += [
                _value(metric, row[f"{metric}_a"]),
                _value(metric, row[f"{metric}_b"]),
                _flagged(_difference(metric, row[diff_key(metric)]), metric in row["outside"]),
            ]
        table.add_row(*cells)
    return table


def _value(metric: str, value: float) -> str:
    return f"{value:.4f}" if metric in RELATIVE else f"{value:.2%}"


def _difference(metric: str, value: float) -> str:
    """Relative differences in %, accuracy differences in percentage points."""
    return f"{value:.2%}" if metric in RELATIVE else f"{value * 100:.2f} pt"


def _flagged(text: str, outside: bool) -> str:
    return f"[red]{text}[/red]" if outside else text
