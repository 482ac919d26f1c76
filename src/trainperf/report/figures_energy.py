"""The report's figures of power and energy: throughput against power (the Pareto front
of each network) and energy per sample, from the results' energy readings (NVML on GPUs,
RAPL on CPUs). Each function takes result documents and returns ``Figure`` records, none
when no result carries a reading (as ``report.figures`` does for scaling and batch size).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from matplotlib.figure import Figure as MplFigure

from trainperf.analysis.pareto import pareto_fronts
from trainperf.case.spec import label_of
from trainperf.report import cap
from trainperf.report.figure_kit import (
    Drawing,
    Figure,
    hostname,
    legend,
    log_axis,
    make_figure,
    number_text,
    plain,
    result_size,
    slim,
    slug,
)

ENERGY_METRICS = ("energy_per_sample_j", "energy_complete")


def _sources(results: Iterable[dict[str, Any]]) -> str:
    found = sorted({s for r in results for s in r["metrics"].get("energy_sources") or []})
    return ", ".join(found) or "energy meters"


def power_figures(results: Sequence[dict[str, Any]]) -> list[Figure]:
    """Average power against throughput per network and size, the Pareto front connected."""
    by_id = {r["id"]: r for r in results}
    fronts = pareto_fronts(results)
    left = fronts["left_out"]
    note = f"{left} ok results without a power reading are left out." if left else ""
    figures = []
    for front in fronts["fronts"]:
        points = front["points"]
        if len(points) < 2:
            continue
        setting = front["model"] + (f" @{front['size']}" if front["size"] else "")
        by_system: dict[str, list[dict[str, Any]]] = {}
        for p in points:
            by_system.setdefault(p["system"], []).append(p)
        shown, others = cap.top(
            by_system.items(), lambda item: max(p["samples_per_s"] for p in item[1])
        )
        table = None
        if others:
            best = [max(mine, key=lambda p: p["samples_per_s"]) for _, mine in others]
            table = cap.others_table(
                "systems",
                ["system", "highest samples/s", "its average power (W)", "on the front"],
                [
                    [
                        p["hostname"] or p["system"],
                        number_text(p["samples_per_s"]),
                        number_text(p["average_power_w"]),
                        "yes" if any(q["on_front"] for q in mine) else "no",
                    ]
                    for p, (_, mine) in zip(best, others, strict=True)
                ],
                ["left", "right", "right", "left"],
            )
        capped = cap.note(
            len(shown),
            len(others),
            "the highest throughput",
            "grey dots (without their runs; the front is over every point)",
        )
        figures.append(
            make_figure(
                slug("power-vs-performance", front["model"], front["size"]),
                f"Power against performance: {setting}",
                f"Each point an ok result of {setting} (any system, device count, batch size, "
                f"precision): samples/s (mean over its runs) against the average power in W over "
                f"the measured steps ({_sources(by_id[p['result_id']] for p in points)}); small "
                f"dots: its runs, bars: 95% intervals over the runs. Connected: the Pareto "
                f"front, the points that no other point beats on both speed and power.",
                [p["hostname"] or p["system"] for _, mine in shown for p in mine],
                Drawing(
                    _draw_power,
                    (
                        dict(shown),
                        [p for _, mine in others for p in mine],
                        cap.others_label(len(others), how=""),
                    ),
                ),
                f"{note} {capped}".strip(),
                table,
            )
        )
    return figures


def _draw_power(
    fig: MplFigure, systems: dict[str, list[dict[str, Any]]], others: list, others_label: str
) -> None:
    ax = fig.add_subplot()
    for i, (system, mine) in enumerate(systems.items()):
        xs, ys = [p["samples_per_s"] for p in mine], [p["average_power_w"] for p in mine]
        ax.scatter(xs, ys, color=f"C{i}", label=plain(mine[0]["hostname"] or system), zorder=3)
        for p in mine:
            _run_cloud(ax, p, f"C{i}")
    if others:
        xs, ys = [p["samples_per_s"] for p in others], [p["average_power_w"] for p in others]
        ax.scatter(xs, ys, s=12, color=cap.OTHERS_COLOR, alpha=0.6, label=others_label, zorder=2)
    points = [p for mine in systems.values() for p in mine] + others
    front = sorted((p for p in points if p["on_front"]), key=lambda p: p["samples_per_s"])
    ax.plot(
        [p["samples_per_s"] for p in front],
        [p["average_power_w"] for p in front],
        "-",
        color="black",
        lw=1.2,
        label="Pareto front",
        zorder=2,
    )
    for p in front:
        if p["system"] not in systems:  # a point of the systems not drawn: grey, unnamed
            continue
        text = f"b{p['batch_size']} {p['precision']}"
        text += f" x{p['devices']}" if p["devices"] > 1 else ""
        ax.annotate(
            plain(text),
            (p["samples_per_s"], p["average_power_w"]),
            xytext=(4, -10),
            textcoords="offset points",
            fontsize=7,
        )
    for which, values in (
        ("x", [p["samples_per_s"] for p in points]),
        ("y", [p["average_power_w"] for p in points]),
    ):
        if max(values) > 10 * min(values) > 0:
            log_axis(ax, which)
    ax.set_xlabel("throughput (samples/s)")
    ax.set_ylabel("average power (W)")
    legend(ax)


def _run_cloud(ax: Any, point: dict[str, Any], color: str) -> None:
    """The runs of a Pareto point as small dots, its 95% intervals as error bars."""
    runs = [
        (x, y)
        for x, y in zip(point["run_samples_per_s"], point["run_average_power_w"], strict=False)
        if y is not None
    ]
    if len(runs) > 1:
        ax.scatter(*zip(*runs, strict=True), s=8, color=color, alpha=0.45, lw=0, zorder=2)
    x_ci, y_ci = point.get("samples_per_s_ci95"), point.get("average_power_w_ci95")
    x, y = point["samples_per_s"], point["average_power_w"]
    if x_ci or y_ci:
        ax.errorbar(
            x,
            y,
            yerr=[[y - y_ci[0]], [y_ci[1] - y]] if y_ci else None,
            xerr=[[x - x_ci[0]], [x_ci[1] - x]] if x_ci else None,
            fmt="none",
            color=color,
            lw=1,
            alpha=0.7,
        )


def energy_figures(results: Sequence[dict[str, Any]]) -> list[Figure]:
    """Energy per sample (J) of every ok result with an energy reading, per network and size."""
    groups: dict[tuple[str, Any], dict[tuple[str, str], dict[str, Any]]] = {}
    for r in results:
        if r["status"] == "ok" and r["metrics"].get("energy_per_sample_j") is not None:
            group = groups.setdefault((r["case"]["model"], result_size(r)), {})
            group[(r["system"]["fingerprint"], label_of(r["case"]))] = r  # the newest wins
    figures = []
    for (model, size), chosen in groups.items():
        every = sorted(chosen.values(), key=lambda r: r["metrics"]["energy_per_sample_j"])
        lowest = {r["system"]["fingerprint"]: r for r in reversed(every)}  # each system's best
        shown, others = cap.top(
            lowest.values(), lambda r: r["metrics"]["energy_per_sample_j"], highest=False
        )
        drawn = {r["system"]["fingerprint"] for r in shown}
        bars = [slim(r, *ENERGY_METRICS) for r in every if r["system"]["fingerprint"] in drawn]
        setting = model + (f" @{size}" if size else "")
        partial = sum(not r["metrics"].get("energy_complete", True) for r in bars)
        table = None
        if others:
            table = cap.others_table(
                "systems",
                ["system", "case", "J/sample"],
                [
                    [hostname(r), label_of(r["case"]), f"{r['metrics']['energy_per_sample_j']:.3g}"]
                    for r in every
                    if r["system"]["fingerprint"] not in drawn
                ],
                ["left", "left", "right"],
                len(others),
            )
        notes = [
            f"{partial} bars marked 'partial' miss a meter's reading." if partial else "",
            cap.note(len(shown), len(others), "the lowest energy per sample", "not drawn"),
        ]
        figures.append(
            make_figure(
                slug("energy-per-sample", model, size),
                f"Energy per sample: {setting}",
                f"Energy per training sample of {setting} in J: the energy read over the measured "
                f"steps ({_sources(every)}) divided by the samples trained in them.",
                [hostname(r) for r in bars],
                Drawing(_draw_energy, (bars,), (6.4, 1.4 + 0.3 * len(bars))),
                " ".join(filter(None, notes)),
                table,
            )
        )
    return figures


def _draw_energy(fig: MplFigure, bars: list[dict[str, Any]]) -> None:
    ax = fig.add_subplot()
    systems = list(dict.fromkeys(r["system"]["fingerprint"] for r in bars))
    labels = []
    for r in bars:
        text = label_of(r["case"]).removeprefix(r["case"]["model"] + " ") + f" · {hostname(r)}"
        partial = not r["metrics"].get("energy_complete", True)
        labels.append(plain(text + (" (partial)" if partial else "")))
    colors = [f"C{systems.index(r['system']['fingerprint'])}" for r in bars]
    values = [r["metrics"]["energy_per_sample_j"] for r in bars]
    ax.bar_label(ax.barh(range(len(bars)), values, color=colors), fmt="%.3g", fontsize=7, padding=2)
    ax.set_yticks(range(len(bars)), labels)
    ax.invert_yaxis()
    ax.margins(x=0.12)
    ax.set_xlabel("energy per sample (J)")
    ax.grid(axis="y", visible=False)
