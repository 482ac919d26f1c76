"""At most a readable number of series per figure: a lab's fleet drawn as its best systems
and a summary of the rest.

A figure of many systems draws the ``SERIES_CAP`` best series by the figure's own metric
(the highest throughput, bandwidth or TFLOP/s; the lowest time or energy), each in a colour
of its own, in ranking order; the others are drawn together in grey as one band (their
minimum to maximum at each x: ``band``) or one range per group (``ranges``), labelled "N
other systems", and listed with their metric in a table under the figure
(``others_table``). The caption says what was capped and how (``note``). Below the cap
nothing changes: every series is drawn as before.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

# Ten colours in Matplotlib's default cycle; 8 series leave two for the lines every figure
# adds (ideal scaling, a front, a target) and stay apart in a legend.
SERIES_CAP = 8
OTHERS_COLOR = "0.55"


def top(
    items: Iterable[T],
    score: Callable[[T], float | None],
    *,
    highest: bool = True,
    cap: int = SERIES_CAP,
) -> tuple[list[T], list[T]]:
    """(the ``cap`` best items, the others), both best first; an item without a score
    (``None``) ranks last. All items are "best" when there are no more than ``cap``, and
    keep their order."""
    items = list(items)
    if len(items) <= cap:
        return items, []

    def rank(item: T) -> tuple[bool, float]:
        value = score(item)
        if value is None:
            return True, 0.0
        return False, -value if highest else value

    ranked = sorted(items, key=rank)  # stable: ties keep their order
    return ranked[:cap], ranked[cap:]


def note(shown: int, others: int, by: str, rest: str, what: str = "systems") -> str:
    """The caption's sentence on the cap, empty when nothing was capped."""
    if not others:
        return ""
    return (
        f"Capped at {shown} of {shown + others} {what}: the {shown} with {by} are drawn; "
        f"the other {others} are {rest} and listed in the table under the figure."
    )


def others_table(
    what: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    justify: Sequence[str],
    count: int | None = None,
) -> dict[str, Any]:
    """The table of the ``count`` series (default: one per row) not drawn, in
    ``markdown.plain_table``'s form, folded: the page shows its title, a click opens it."""
    return {
        "folded": True,
        "title": f"Not drawn: {len(rows) if count is None else count} other {what}",
        "caption": "",
        "headers": list(headers),
        "justify": list(justify),
        "rows": [[str(cell) for cell in row] for row in rows],
    }


def left_out(
    shown: int,
    others: Sequence[Any],
    by: str,
    rest: str,
    what: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    justify: Sequence[str],
) -> tuple[dict[str, Any] | None, str]:
    """(``others_table``, ``note``) of the ``others`` the cap left out: the table under the
    figure (None when nothing was capped) and the caption's sentence, built together so
    that both count the same ``what``."""
    table = others_table(what, headers, rows, justify) if others else None
    return table, note(shown, len(others), by, rest, what)


def others_label(others: int, what: str = "systems", how: str = " (min–max)") -> str:
    """The legend entry of the summarised series."""
    return f"{others} other {what}{how}"


def spread(values: Mapping[Any, list[float]]) -> list[tuple[Any, float, float]]:
    """(x, min, max) of the values at each x, x ascending."""
    return [(x, min(ys), max(ys)) for x, ys in sorted(values.items()) if ys]


def band(ax: Any, values: Mapping[float, list[float]], label: str) -> None:
    """The other series as one grey band from their minimum to their maximum at each x (a
    vertical line where only one x has values)."""
    points = spread(values)
    if not points:
        return
    xs, lows, highs = zip(*points, strict=True)
    if len(xs) == 1:
        ax.vlines(xs, lows, highs, color=OTHERS_COLOR, lw=6, alpha=0.35, label=label, zorder=1)
    else:
        ax.fill_between(xs, lows, highs, color=OTHERS_COLOR, alpha=0.3, lw=0, label=label, zorder=1)


def ranges(ax: Any, values: Mapping[float, list[float]], label: str, width: float) -> None:
    """The other series as a grey range (minimum to maximum) at each x, ``width`` wide, with
    their median as a tick; for bar charts, beside the drawn bars."""
    label_once = label
    for x, ys in sorted(values.items()):
        if not ys:
            continue
        ax.bar(
            x,
            max(ys) - min(ys),
            width,
            bottom=min(ys),
            color=OTHERS_COLOR,
            alpha=0.35,
            label=label_once,
        )
        ax.hlines(statistics.median(ys), x - width / 2, x + width / 2, color="0.3", lw=1.2)
        label_once = None
