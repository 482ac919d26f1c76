"""How the tables of trainperf are laid out and how they write what needs a caveat, in one
place, so that ``results``, ``compare``, ``scaling`` and ``predict`` say it the same way.

Width: a table is drawn to the console's width (trainperf.cli.common decides it: 100
columns piped, unless the terminal or ``COLUMNS`` says otherwise) and must fit it without
cutting a number or a name to "…". So the tables of many rows are compact (a rule under the
header, no vertical lines: two characters between columns, not three), and their columns
are chosen (``chosen``): a few by default, ``--wide`` for all; when even the default ones
do not fit, the droppable ones go in the order of their ``drop`` rank, and the caption says
which. Each column is one of two kinds:
- a **value** (a name, a count, a number): never wrapped, so Rich narrows the text columns
  first; a name longer than a squeezed column folds onto the next line, never an "…";
- a **text** (a status with its reason, a case label): wrapped at spaces, a word longer
  than the column folded, so nothing is cut mid-word or lost; counted at ``TEXT_MIN``
  characters when the columns are chosen.
In ``--format md`` and the HTML report the cells are the same strings, whole.

Intervals: a 95% interval counts when a decision may rest on it, from
``MIN_RUNS_FOR_DECISION`` (3) runs on each side (trainperf.measure.hierarchy). From fewer
the numbers stay in the JSON (a 2-run Student t interval has t = 12.7) but a table writes
"n/a (2 runs)" where the interval would be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.markup import escape as escape_markup
from rich.table import Table
from rich.text import Text

from trainperf.case.spec import label_options, parallel_mode
from trainperf.core.limits import visible_controls
from trainperf.measure.hierarchy import MIN_RUNS_FOR_DECISION

# Text columns (a status, a reason, a label) are given at least this many characters when
# the columns are chosen, and fill what the value columns leave.
TEXT_MIN = 12
# ``Column.drop`` of a column shown with ``--wide`` only.
WIDE = 99
GAP = 2  # characters between two columns of a compact table


def escape(text: str) -> str:
    """User text (a name, an error message, a reason) as Rich markup that prints it as it
    is: its brackets escaped, and its terminal control characters written as escapes
    (``limits.visible_controls``): an imported message holding ESC sequences neither
    colours nor clears the reader's terminal. Every table and line of trainperf's terminal
    output escapes user text with this one."""
    return escape_markup(visible_controls(text))


@dataclass(frozen=True)
class Column:
    """A column of a table: its header, its cells (Rich markup, user text escaped) and how it
    behaves: ``right``-aligned, ``text`` (wrapped at spaces) or a value (never wrapped), and
    ``drop``: 0 always shown, 1, 2, ... left out in that order when the table does not fit
    (1 first), ``WIDE`` shown with ``--wide`` only."""

    header: str
    cells: list[Any]
    right: bool = False
    text: bool = False
    drop: int = 0

    def width(self) -> int:
        """Characters the column needs: its widest cell, a text column at most ``TEXT_MIN``."""
        widest = max([_cell_len(self.header), *(_cell_len(c) for c in self.cells)])
        return min(widest, TEXT_MIN) if self.text else widest


def _cell_len(cell: Any) -> int:
    if isinstance(cell, Text):
        return max((line.cell_len for line in cell.split()), default=0)
    text = str(cell)
    if "[" in text or "\\" in text:  # markup or an escaped bracket: as printed
        text = Text.from_markup(text).plain
    return max((cell_len(line) for line in text.splitlines()), default=0)


def chosen(columns: Sequence[Column], width: int | None, wide: bool) -> list[Column]:
    """The columns to show: all with ``wide``; else those not ``WIDE``, and with a ``width``
    the droppable ones left out (``drop`` 1 first) until the rest fits in it."""
    shown = [c for c in columns if wide or c.drop != WIDE]
    if wide or width is None:
        return shown
    while _needed(shown) > width and any(c.drop for c in shown):
        first = min((c.drop, i) for i, c in enumerate(shown) if c.drop)[1]
        del shown[first]
    return shown


def _needed(columns: Sequence[Column]) -> int:
    return sum(c.width() for c in columns) + GAP * max(len(columns) - 1, 0)


def compact_table(
    title: str,
    columns: Sequence[Column],
    *,
    width: int | None = None,
    wide: bool = False,
    caption: str | None = None,
    sections: Sequence[bool] = (),
) -> Table:
    """A table of many rows (module doc) from ``columns`` as ``chosen`` for ``width``: a rule
    under the header, columns two characters apart. The caption says which columns were
    left out to fit. ``sections[i]``: a rule under row i."""
    shown = chosen(columns, width, wide)
    kept = {id(c) for c in shown}
    left_out = [c.header for c in columns if id(c) not in kept and c.drop != WIDE]
    notes = [caption] if caption else []
    if left_out:
        notes.append(
            escape(f"left out to fit {width} columns: {', '.join(left_out)}")
            + " (--wide shows every column)"
        )
    table = Table(
        title=title,
        caption="; ".join(notes) or None,
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
        show_edge=False,
    )
    for column in shown:
        justify = "right" if column.right else "left"
        if column.text:
            table.add_column(column.header, justify=justify, overflow="fold")
        else:
            table.add_column(column.header, justify=justify, no_wrap=True, overflow="fold")
    rows = zip(*(c.cells for c in shown), strict=True) if shown else iter(())
    for index, row in enumerate(rows):
        table.add_row(*row, end_section=index < len(sections) and sections[index])
    return table


def runs_text(runs: int) -> str:
    return f"{runs} run" + ("" if runs == 1 else "s")


def interval_counts(runs: int | None) -> bool:
    """Whether an interval from ``runs`` runs (the fewer of two sides) is shown."""
    return runs is not None and runs >= MIN_RUNS_FOR_DECISION


def not_enough(runs: int) -> str:
    """'n/a (2 runs)': where an interval from too few runs would be."""
    return f"n/a ({runs_text(runs)})"


def plus_minus(metrics: dict[str, Any]) -> str:
    """The ± of a result's between-run 95% interval, '±2.3%', or 'n/a (2 runs)'."""
    runs = metrics.get("runs")
    if runs is None:
        return "-"
    relative = metrics.get("ci95_relative")
    if relative is None or not interval_counts(runs):
        return not_enough(runs)
    return f"±{relative:.1%}"


def interval_range(ci: Sequence[float] | None, runs: int, fmt: str, absent: str = "-") -> str:
    """'0.95-1.05' (each end through ``fmt``), 'n/a (2 runs)', or ``absent``."""
    if not interval_counts(runs):
        return not_enough(runs)
    if not ci:
        return absent
    return f"{fmt.format(max(0.0, ci[0]))}-{fmt.format(ci[1])}"


def devices_text(case: dict[str, Any]) -> str:
    """'1', '2 ddp', '16 fsdp 2n': all the devices, the parallel mode, the nodes."""
    devices, nodes = case.get("devices", 1), case.get("nodes", 1)
    mode = parallel_mode(case)
    if mode == "none":
        return str(devices * nodes)
    return f"{devices * nodes} {mode}" + (f" {nodes}n" if nodes > 1 else "")


def options_text(case: dict[str, Any]) -> str:
    """What else sets a case apart (its label's end, trainperf.case.spec.label_options), or ''."""
    return " ".join(label_options(case))
