"""The report's first figure: the throughput of every ok case, each run a dot.

Any store with an ok result draws it, whatever else it holds (the quick suite's first
sweep included). One row per case (model, batch, input size, precision, device, devices:
``case.label_of``), the newest ok result of each system: its throughput (samples/s from
the median step after warm-up, mean over the runs) as a marker, the 95% confidence
interval of that mean as a bar (Student t over the runs; none for a single run) and each
run as a small dot. The axis is logarithmic when the cases span more than a factor of 10.

With several systems the systems stand side by side within each case's row, in one
colour each: the ``cap.SERIES_CAP`` best by the geometric mean, over the cases they ran,
of their throughput relative to the fastest system on that case; the others are a grey
range (their minimum to maximum) in each row and rows of a table under the figure. Cases
come in figures of at most ``CASES_PER_FIGURE`` rows, in label order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure as MplFigure

from trainperf.case.spec import label_of
from trainperf.report import cap
from trainperf.report.figure_kit import (
    Drawing,
    Figure,
    hostname,
    log_axis,
    make_figure,
    plain,
    slim,
)

CASES_PER_FIGURE = 16
ROW_IN = 0.17  # height of a case's row per system drawn in it (inches)


def newest_ok(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """case label -> system fingerprint -> the newest ok result (results oldest first)."""
    cases: dict[str, dict[str, dict[str, Any]]] = {}
    for r in results:
        if r["status"] == "ok" and r["metrics"].get("samples_per_s_median"):
            cases.setdefault(label_of(r["case"]), {})[r["system"]["fingerprint"]] = r
    return dict(sorted(cases.items()))


def relative_speed(cases: dict[str, dict[str, dict[str, Any]]]) -> dict[str, float]:
    """system -> geometric mean over the cases it ran of throughput / the case's fastest."""
    logs: dict[str, list[float]] = {}
    for by_system in cases.values():
        fastest = max(r["metrics"]["samples_per_s_median"] for r in by_system.values())
        for system, r in by_system.items():
            logs.setdefault(system, []).append(
                math.log(r["metrics"]["samples_per_s_median"] / fastest)
            )
    return {system: math.exp(sum(v) / len(v)) for system, v in logs.items()}


def case_figures(results: Sequence[dict[str, Any]]) -> list[Figure]:
    """The throughput of every ok case; systems side by side when there are several."""
    cases = newest_ok(results)
    if not cases:
        return []
    speed = relative_speed(cases)
    shown, others = cap.top(speed, speed.get)
    labels = list(cases)
    parts = [labels[i : i + CASES_PER_FIGURE] for i in range(0, len(labels), CASES_PER_FIGURE)]
    return [
        _figure({label: cases[label] for label in part}, shown, others, speed, n + 1, len(parts))
        for n, part in enumerate(parts)
    ]


def _figure(
    cases: dict[str, dict[str, dict[str, Any]]],
    shown: list[str],
    others: list[str],
    speed: dict[str, float],
    part: int,
    parts: int,
) -> Figure:
    hosts = {system: hostname(r) for by_system in cases.values() for system, r in by_system.items()}
    drawn = [system for system in shown if system in hosts]
    rest = [system for system in others if system in hosts]
    rows = {
        label: [slim(by_system[s]) if s in by_system else None for s in drawn]
        for label, by_system in cases.items()
    }
    ranges = {
        label: [by_system[s]["metrics"]["samples_per_s_median"] for s in rest if s in by_system]
        for label, by_system in cases.items()
    }
    several = len(speed) > 1
    of = f" ({part} of {parts})" if parts > 1 else ""
    title = "Throughput per case" + (", systems side by side" if several else "")
    title += "" if several else f": {hosts[drawn[0]]}"
    caption = (
        "Training throughput of every case with an ok result (samples/s from the median "
        "step after warm-up, mean over the runs): marker the mean, bar its 95% confidence "
        "interval over the runs (Student t; none for a single run), small dots the runs "
        "(independent worker processes); the newest result of each case"
        + (" on each system" if several else "")
        + "."
    )
    if several:
        caption += (
            " Systems in the order of their geometric mean, over the cases they ran, of "
            "their throughput relative to the fastest system on each case."
        )
    table = None
    if rest:
        table = cap.others_table(
            "systems",
            ["system", "cases", "relative throughput (geometric mean)"],
            [
                [hosts[s], sum(s in by_system for by_system in cases.values()), f"{speed[s]:.0%}"]
                for s in rest
            ],
            ["left", "right", "right"],
        )
    slots = len(drawn) + (1 if rest else 0)
    height = 1.3 + len(cases) * max(0.35, ROW_IN * slots)
    return make_figure(
        "throughput-per-case" + (f"-{part}" if parts > 1 else ""),
        title + of,
        caption,
        [hosts[s] for s in drawn],
        Drawing(
            _draw,
            (rows, [hosts[s] for s in drawn], ranges, cap.others_label(len(rest))),
            (7.2, height),
        ),
        cap.note(
            len(drawn),
            len(rest),
            "the highest relative throughput",
            "a grey range (min–max) in each case's row",
        ),
        table,
    )


def _draw(
    fig: MplFigure,
    rows: dict[str, list[dict[str, Any] | None]],
    hosts: list[str],
    ranges: dict[str, list[float]],
    others_label: str,
) -> None:
    ax = fig.add_subplot()
    slots = len(hosts) + (1 if any(ranges.values()) else 0)
    step = 0.8 / slots
    values, named = [], set()
    for row, (label, results) in enumerate(rows.items()):
        for i, r in enumerate(results):
            if r is None:
                continue
            y = row - 0.4 + step * (i + 0.5)
            m = r["metrics"]
            color = f"C{i}"
            mean = m["samples_per_s_median"]
            runs = m.get("run_samples_per_s") or []
            values += [mean, *runs]
            low, high = m.get("samples_per_s_ci95") or (0, 0)
            if low > 0 and math.isfinite(high):
                ax.hlines(y, low, high, color=color, lw=2, alpha=0.6)
                values += [low, high]
            if len(runs) > 1:
                ax.scatter(runs, [y] * len(runs), s=10, color=color, alpha=0.5, lw=0, zorder=3)
            name = None if i in named else plain(hosts[i])
            named.add(i)
            ax.plot([mean], [y], "D", ms=5, color=color, label=name)
        others = ranges.get(label) or []
        if others:
            y = row - 0.4 + step * (slots - 0.5)
            ax.hlines(y, min(others), max(others), color=cap.OTHERS_COLOR, lw=4, alpha=0.5)
            values += others
    if any(ranges.values()):
        ax.plot([], [], lw=4, color=cap.OTHERS_COLOR, alpha=0.5, label=others_label)
    ax.set_yticks(range(len(rows)), [plain(label) for label in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    if values and max(values) > 10 * min(values) > 0:
        log_axis(ax, "x")
    else:
        ax.set_xlim(left=0)
    ax.set_xlabel("throughput (samples/s)" + (", log scale" if ax.get_xscale() == "log" else ""))
    ax.grid(axis="y", visible=False)
    if len(hosts) > 1 or any(ranges.values()):
        fig.legend(loc="outside lower center", ncols=min(4, len(hosts) + 1), fontsize=7)
