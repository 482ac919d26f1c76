"""The doctor's verdict for people: one row per check, and the warning ``compare`` prints
when the compared sides were measured under different conditions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

from trainperf.doctor.conditions import Difference
from trainperf.report.cells import escape

# how each status is shown (the word stays: a table read without colour still says it)
STYLES = {"ok": "green", "warn": "yellow", "fail": "bold red", "absent": "dim"}


def doctor_table(verdict: Mapping[str, Any]) -> Table:
    """One row per check: its status, its name and what was seen; under what was seen, for
    a check that warned or failed, why it matters and the command that fixes it (never
    run by trainperf)."""
    counts = ", ".join(f"{n} {status}" for status, n in verdict["counts"].items())
    seconds = verdict.get("seconds")
    took = "" if seconds is None else f" in {seconds:.1f} s"
    table = Table(
        title=f"doctor: {verdict['verdict']} ({counts}){took}",
        caption="fixes are commands for you to run: trainperf changes nothing; "
        "--json gives every check's value",
    )
    table.add_column("status", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("seen", overflow="fold")
    for check in verdict["checks"]:
        status = check["status"]
        detail = escape(check["seen"])
        if status in ("warn", "fail"):
            detail += f"\n[dim]why: {escape(check['why'])}[/]"
            if check.get("fix"):
                detail += f"\n[dim]fix: {escape(check['fix'])}[/]"
        table.add_row(f"[{STYLES[status]}]{status}[/]", escape(check["name"]), detail)
    return table


def difference_lines(differences: list[Difference], width: int = 100) -> list[str]:
    """The warning of ``compare`` when a setting that changes results differs between the
    compared systems: one line per setting, each value with the systems that had it (the
    first few named, then a count), e.g.
    'host.governor: performance (node1, node2) vs powersave (node3)'."""
    if not differences:
        return []
    lines = [
        "warning: measured under different conditions (trainperf doctor); a difference "
        "below may be the configuration, not the hardware:"
    ]
    for difference in differences:
        parts = []
        for value, systems in difference.values.items():
            shown = ", ".join(systems[:3]) + (
                f", +{len(systems) - 3} more" if len(systems) > 3 else ""
            )
            parts.append(f"{value} ({shown})")
        lines.append(f"  {difference.name}: " + " vs ".join(parts))
    return lines
