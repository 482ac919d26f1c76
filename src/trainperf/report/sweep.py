"""What a sweep shows while it runs (a progress line with ETA) and when it ends (a summary).

The estimate of the time left counts only measured cases: skipped cases and results taken
from an earlier run finish at once and would make a rate-based estimate far too hopeful.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

STATUS_ORDER = ("ok", "skipped", "oom", "timeout", "crashed", "error")


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class SweepDisplay:
    """Progress of a sweep on ``console``: case being run, done/total, elapsed, time left."""

    def __init__(self, console: Console, total: int) -> None:
        self.total = total
        self.measured_s: list[float] = []
        self.to_measure = total
        self._started = time.monotonic()
        self._case_started = self._started
        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            TextColumn("left ~{task.fields[eta]}"),
        )
        # A slow refresh: the parent shares the cores with the measured child.
        self.progress = Progress(*columns, console=console, transient=True, refresh_per_second=2)
        self.task = self.progress.add_task("starting", total=total, eta=_clock(None))

    def __enter__(self) -> SweepDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def eta_s(self) -> float | None:
        """Mean time of a measured case times the cases that may still be measured."""
        if not self.measured_s:
            return None
        return sum(self.measured_s) / len(self.measured_s) * self.to_measure

    def on_start(self, index: int, item: Any) -> None:
        self._case_started = time.monotonic()
        self.progress.update(
            self.task,
            description=f"[{index + 1}/{self.total}] {item.label}",
            eta=_clock(self.eta_s()),
        )

    def on_probe(self, index: int, probe: Any) -> None:
        verdict = "fits" if probe.fits else f"does not fit ({probe.status})"
        line = f"    largest-batch probe b{probe.batch_size}: {verdict}"
        self.progress.console.print(line, markup=False, highlight=False)

    def on_result(self, index: int, result: dict[str, Any]) -> None:
        self.to_measure -= 1
        if result["status"] != "skipped" and not result.get("reused"):
            self.measured_s.append(time.monotonic() - self._case_started)
        self.progress.update(self.task, advance=1, eta=_clock(self.eta_s()))
        # Messages quote paths and C++ sources ("[pair.cc:537]"): never read them as markup.
        self.progress.console.print(f"  {_one_line(result)}", markup=False, highlight=False)


def _one_line(result: dict[str, Any]) -> str:
    from trainperf.case import label_of

    label, metrics = label_of(result["case"]), result.get("metrics") or {}
    if result["status"] == "ok":
        rate = f"{metrics['samples_per_s_median']:.1f} samples/s"
        return f"{label}: {rate}" + (" (from an earlier run)" if result.get("reused") else "")
    return f"{label}: {result['status']}: {_reason(result)}"


def _reason(result: dict[str, Any]) -> str:
    error = result.get("error") or {}
    return str(error.get("message") or error.get("type") or "")


def summary_table(results: Iterable[dict[str, Any]], title: str = "summary") -> Table:
    """Cases grouped by status, each failure and skip with its reason."""
    from trainperf.case import label_of

    groups: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        groups.setdefault(result["status"], []).append(result)
    table = Table(title=title)
    table.add_column("status")
    table.add_column("cases", justify="right")
    table.add_column("case")
    table.add_column("reason")
    for status in sorted(groups, key=lambda s: STATUS_ORDER.index(s) if s in STATUS_ORDER else 99):
        members = groups[status]
        if status == "ok":
            reused = sum(1 for r in members if r.get("reused"))
            note = f"{reused} from an earlier run" if reused else ""
            table.add_row(status, str(len(members)), "", note)
            continue
        for position, result in enumerate(members):
            table.add_row(
                status if position == 0 else "",
                str(len(members)) if position == 0 else "",
                escape(label_of(result["case"])),
                escape(_reason(result)[:120]),
            )
    return table
