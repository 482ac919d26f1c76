"""What a sweep shows while it runs (a progress line with ETA) and when it ends (a summary).

The estimate of the time left counts only measured runs: skipped cases and results taken
from an earlier sweep finish at once and would make a rate-based estimate far too hopeful.
A case's adaptive runs are counted as planned (their minimum) until the case needs more.

On a terminal the progress line is Rich's, redrawn in place. Piped or redirected output
(``make run | tee log``, a batch job's log) has no such line: Rich draws nothing there, and
a run of a few minutes would pass in silence. There each run says when it starts (a plain
line with the case, the cases done, the time elapsed and left) as well as when it ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from trainperf.report.cells import escape

STATUS_ORDER = ("ok", "skipped", "oom", "timeout", "crashed", "error", "diverged")


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class SweepDisplay:
    """Progress of a sweep on ``console``: the run being measured, cases done/total,
    elapsed time and the time left (mean time of a measured run x runs still planned)."""

    def __init__(self, console: Console, total: int) -> None:
        self.total = total
        self.run_s: list[float] = []
        self.runs_left = 0
        self.done = 0  # cases with a result
        self.plain = not console.is_terminal  # no live line: say each run's start too
        self._started = self._run_started = time.monotonic()
        self._waited: set[int] = set()  # cases already said to be another sweep's
        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} cases"),
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
        """Mean time of a measured run times the runs still planned."""
        if not self.run_s:
            return None
        return sum(self.run_s) / len(self.run_s) * self.runs_left

    def on_start(self, index: int, item: Any, run_number: int, runs_left: int) -> None:
        self._run_started = time.monotonic()
        self.runs_left = runs_left
        head = f"[case {index + 1}/{self.total}, run {run_number}] {item.label}"
        # The column reads markup: the label is user text, and "[case ...]" is literal.
        self.progress.update(self.task, description=escape(head), eta=_clock(self.eta_s()))
        if self.plain:
            elapsed = _clock(self._run_started - self._started)
            line = (
                f"{head}: started ({self.done}/{self.total} cases done, {elapsed} elapsed, "
                f"left ~{_clock(self.eta_s())})"
            )
            self.progress.console.print(line, markup=False, highlight=False)

    def on_probe(self, index: int, probe: Any) -> None:
        verdict = "fits" if probe.fits else f"does not fit ({probe.status})"
        line = f"    largest-batch probe b{probe.batch_size}: {verdict}"
        self.progress.console.print(line, markup=False, highlight=False)

    def on_run(self, index: int, run: dict[str, Any]) -> None:
        self.run_s.append(time.monotonic() - self._run_started)
        self.runs_left = max(self.runs_left - 1, 0)
        self.progress.update(self.task, eta=_clock(self.eta_s()))
        line = f"    {_run_line(run)}"
        self.progress.console.print(line, markup=False, highlight=False)

    def on_wait(self, index: int, item: Any, held: dict[str, Any]) -> None:
        """Say once per case that another sweep is measuring it (its lease)."""
        if index in self._waited:
            return
        self._waited.add(index)
        owner = f"pid {held.get('pid')} on {held.get('host')}"
        line = f"  {item.label}: being measured by another sweep ({owner}); its result will be used"
        self.progress.console.print(line, markup=False, highlight=False)

    def on_store_wait(self, line: str) -> None:
        """Say that the results database keeps the sweep waiting (trainperf.store.database)."""
        self.progress.console.print(line, markup=False, highlight=False)

    def on_result(self, index: int, result: dict[str, Any]) -> None:
        self.done += 1
        self.progress.update(self.task, advance=1, eta=_clock(self.eta_s()))
        # Messages quote paths and C++ sources ("[pair.cc:537]"): never read them as markup.
        self.progress.console.print(f"  {_one_line(result)}", markup=False, highlight=False)


def _run_line(run: dict[str, Any]) -> str:
    from trainperf.case.spec import label_of

    head = f"{label_of(run['case'])} run {run.get('run_number', '?')}"
    if run["status"] == "ok":
        return f"{head}: {run['metrics']['samples_per_s_median']:.1f} samples/s"
    return f"{head}: {run['status']}"


def _one_line(result: dict[str, Any]) -> str:
    from trainperf.case.spec import label_of

    label, metrics = label_of(result["case"]), result.get("metrics") or {}
    earlier = " (from an earlier sweep)" if result.get("reused") else ""
    if result["status"] == "ok":
        text = f"{label}: {metrics['samples_per_s_median']:.1f} samples/s {interval_text(metrics)}"
        return text + earlier
    return f"{label}: {result['status']}: {_reason(result)}{earlier}"


def interval_text(metrics: dict[str, Any]) -> str:
    """'±3.2% over 3 runs (ci_target)', or '(1 run: no between-run interval)'."""
    runs = metrics.get("runs", 1)
    if metrics.get("ci95_relative") is None:
        return f"({runs} run: no between-run interval)"
    stop = metrics.get("runs_stop_reason")
    return f"±{metrics['ci95_relative']:.1%} over {runs} runs" + (f" ({stop})" if stop else "")


def _reason(result: dict[str, Any]) -> str:
    error = result.get("error") or {}
    return str(error.get("message") or error.get("type") or "")


def summary_table(results: Iterable[dict[str, Any]], title: str = "summary") -> Table:
    """Cases grouped by status, each failure and skip with its reason in full: wrapped at
    spaces on the terminal (a word longer than the column folded, never cut), whole in
    ``--format md``."""
    from trainperf.case.spec import label_of

    groups: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        groups.setdefault(result["status"], []).append(result)
    table = Table(title=title)
    table.add_column("status", no_wrap=True)
    table.add_column("cases", justify="right", no_wrap=True)
    table.add_column("case", overflow="fold")
    table.add_column("reason", overflow="fold")
    for status in sorted(groups, key=lambda s: STATUS_ORDER.index(s) if s in STATUS_ORDER else 99):
        members = groups[status]
        if status == "ok":
            reused = sum(1 for r in members if r.get("reused"))
            note = f"{reused} from an earlier sweep" if reused else ""
            table.add_row(status, str(len(members)), "", note)
            continue
        for position, result in enumerate(members):
            table.add_row(
                status if position == 0 else "",
                str(len(members)) if position == 0 else "",
                escape(label_of(result["case"])),
                escape(_reason(result)),
            )
    return table
