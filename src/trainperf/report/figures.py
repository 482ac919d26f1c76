"""The report's figures of training results: scaling over devices and batch size, each a
``Figure`` with its caption (drawn with ``report.figure_kit``); ``figures_energy`` draws
power and energy.

Every function takes data already loaded (result documents of ``Store.results()``) and
returns ``Figure`` records, none where the data has none of that kind. A figure is drawn
when its SVG is first asked for: it holds its ``Drawing``, a module-level function and the
plain data it draws (``slim``: only what it shows), so that ``report.drawing`` can draw
many in other processes and cache each by its content. ``figures_micro`` draws profiles,
collectives and GEMMs. With many systems, each figure draws the best few and summarises
the others (``report.cap``). A failed case of a drawn setting is an ``x`` on the axis at
its batch size or device count, labelled by status and named in the caption.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from matplotlib.figure import Figure as MplFigure

from trainperf.analysis.scaling import device_count, scaling_rows
from trainperf.case.spec import label_of
from trainperf.report import cap
from trainperf.report.figure_kit import (
    CI_NOTE,
    NOT_FAILED,
    Drawing,
    Figure,
    ci_bar,
    failed_note,
    hostname,
    legend,
    log2_ticks,
    log_axis,
    make_figure,
    mark_failed,
    number_text,
    plain,
    result_size,
    slim,
    slug,
    span,
)


def _failed_label(result: dict[str, Any], several_hosts: bool) -> str:
    return result["status"] + (f", {hostname(result)}" if several_hosts else "")


def devices_figures(
    results: Sequence[dict[str, Any]], scaled: Sequence[dict[str, Any]] | None = None
) -> list[Figure]:
    """Throughput against devices (log-log, ideal line) and scaling efficiency, per setting
    (``scaled``: ``scaling_rows(results)`` when the caller has them already)."""
    by_id = {r["id"]: r for r in results}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in scaling_rows(results) if scaled is None else scaled:
        groups.setdefault((row["setting"], row["scaling"]), []).append(row)
    failed: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        if r["status"] not in NOT_FAILED and device_count(r["case"]) > 1:
            setting = label_of(r["case"] | {"devices": 1, "nodes": 1, "parallel": "none"})
            failed.setdefault((setting, r["case"].get("scaling", "weak")), []).append(r)
    figures = []
    for (setting, scaling), rows in groups.items():
        series: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for row in rows:
            series.setdefault((row["system"], row["ddp_options"]), []).append(row)
        strong = "strong" if scaling == "strong" else ""
        fixed = "global batch" if strong else "batch per device"
        how = f"{setting}, {scaling} scaling ({fixed} fixed)"
        bad = failed.get((setting, scaling), [])
        figures.append(_devices_figure(setting, scaling, how, series, bad, by_id))
        if any(row["efficiency"] is not None for row in rows):
            figures.append(_efficiency_figure(setting, scaling, how, series, bad))
    return figures


def _failures(
    bad: list[dict[str, Any]], drawn: Iterable[str], several: bool
) -> tuple[list[tuple[int, str]], list[str], str]:
    """(the failures of the drawn systems as (devices, label), their hosts, the note)."""
    drawn = set(drawn)
    mine = [r for r in bad if r["system"]["fingerprint"] in drawn]
    failures = [(device_count(r["case"]), _failed_label(r, several)) for r in mine]
    note = failed_note(f"{label} at {n} devices" for n, label in failures)
    if len(mine) < len(bad):
        note += f" {len(bad) - len(mine)} failed cases of the systems not drawn: see Failed cases."
    return failures, [hostname(r) for r in mine], note.strip()


def _devices_figure(
    setting: str, scaling: str, how: str, series: dict, bad: list, by_id: dict
) -> Figure:
    shown, others = cap.top(series.items(), lambda s: max(r["samples_per_s"] for r in s[1]))
    drawn = dict(shown)
    several = len({system for system, _ in series}) > 1
    failures, failed_hosts, note = _failures(bad, (system for system, _ in drawn), several)
    runs = {r["result_id"]: slim(by_id[r["result_id"]]) for rows in drawn.values() for r in rows}
    band: dict[int, list[float]] = {}
    for _, rows in others:
        for r in rows:
            band.setdefault(r["devices"], []).append(r["samples_per_s"])
    best = [max(rows, key=lambda r: r["samples_per_s"]) for _, rows in others]
    table, capped = cap.left_out(
        len(drawn),
        others,
        "the highest throughput",
        "the grey band (min–max at each device count)",
        "series",
        ["system", "highest samples/s", "at devices"],
        [[_series_text(r), number_text(r["samples_per_s"]), r["devices"]] for r in best],
        ["left", "right", "right"],
    )
    return _scaling_figure(
        "throughput-vs-devices",
        "Throughput against devices",
        setting,
        scaling,
        f"Training throughput (samples/s from the median step after warm-up, mean over "
        f"the runs; {CI_NOTE}) of {how} against the number of devices, log-log axes; "
        f"dashed: ideal linear scaling from each system's 1-device result.",
        drawn,
        failed_hosts,
        Drawing(_draw_devices, (drawn, failures, runs, band, cap.others_label(len(others)))),
        f"{note} {capped}".strip(),
        table,
    )


def _scaling_figure(
    name: str,
    title: str,
    setting: str,
    scaling: str,
    caption: str,
    drawn: dict,
    failed_hosts: list,
    drawing: Drawing,
    notes: str,
    table: dict | None,
) -> Figure:
    """One setting's figure against the device count (throughput or efficiency): both
    name the figure, title it and list its hosts alike, so the two stay one pair."""
    strong = "strong" if scaling == "strong" else ""
    return make_figure(
        slug(name, setting, strong),
        f"{title}: {setting}, {scaling} scaling",
        caption,
        [r["hostname"] or r["system"] for rows in drawn.values() for r in rows] + failed_hosts,
        drawing,
        notes,
        table,
    )


def _efficiency_figure(setting: str, scaling: str, how: str, series: dict, bad: list) -> Figure:
    def mean_efficiency(item: tuple) -> float | None:
        values = [r["efficiency"] for r in item[1] if r["efficiency"] is not None]
        return sum(values) / len(values) if values else None

    shown, others = cap.top(series.items(), mean_efficiency)
    drawn = dict(shown)
    several = len({system for system, _ in series}) > 1
    failures, failed_hosts, note = _failures(bad, (system for system, _ in drawn), several)
    ranges: dict[int, list[float]] = {}
    for _, rows in others:
        for r in rows:
            if r["efficiency"] is not None and r["devices"] > 1:
                ranges.setdefault(r["devices"], []).append(100 * r["efficiency"])
    table, capped = cap.left_out(
        len(drawn),
        others,
        "the highest mean efficiency",
        "the grey range (min–max, median as a tick) beside each device count's bars",
        "series",
        ["system", "mean efficiency", "devices"],
        [
            [
                _series_text(rows[0]),
                "-" if mean_efficiency(item) is None else f"{100 * mean_efficiency(item):.0f}%",
                span(r["devices"] for r in rows if r["devices"] > 1),
            ]
            for item in others
            for rows in [item[1]]
        ],
        ["left", "right", "right"],
    )
    return _scaling_figure(
        "scaling-efficiency",
        "Scaling efficiency",
        setting,
        scaling,
        f"Scaling efficiency = throughput(N) / (N × throughput(1)) of {how}, from the "
        f"throughputs (mean over runs) and the same system's 1-device result; 100% "
        f"is linear. Error bars: 95% interval from the variation between the runs "
        f"of both results (Fieller).",
        drawn,
        failed_hosts,
        Drawing(_draw_efficiency, (drawn, failures, ranges, cap.others_label(len(others)))),
        f"{note} {capped}".strip(),
        table,
    )


def _series_text(row: dict[str, Any]) -> str:
    name = row["hostname"] or row["system"]
    return name + (f" ({row['ddp_options']})" if row["ddp_options"] else "")


def _series_label(row: dict[str, Any]) -> str:
    return plain(_series_text(row))


def _draw_devices(
    fig: MplFigure, series: dict, failures: list, runs: dict, others: dict, others_label: str
) -> None:
    ax = fig.add_subplot()
    counts = [n for n, _ in failures] + [r["devices"] for rows in series.values() for r in rows]
    counts += list(others)
    for i, rows in enumerate(series.values()):
        rows = sorted(rows, key=lambda r: r["devices"])
        xs, ys = [r["devices"] for r in rows], [r["samples_per_s"] for r in rows]
        ax.plot(xs, ys, "o-", color=f"C{i}", label=_series_label(rows[0]))
        for r in rows:
            ci_bar(ax, r["devices"], runs.get(r["result_id"]), f"C{i}")
        if base := rows[0].get("baseline_samples_per_s"):
            top = max(counts)
            ax.plot(
                [1, top],
                [base, base * top],
                "--",
                color=f"C{i}",
                lw=1,
                alpha=0.8,
                label="ideal linear scaling" if i == 0 else None,
            )
    cap.band(ax, others, others_label)
    log_axis(ax)
    log2_ticks(ax, counts + [1])
    ax.set_xlabel("devices (log2 scale)")
    ax.set_ylabel("throughput (samples/s, log scale)")
    mark_failed(ax, failures)
    legend(ax)


def _draw_efficiency(
    fig: MplFigure, series: dict, failures: list, others: dict, others_label: str
) -> None:
    ax = fig.add_subplot()
    bars = [
        [r for r in rows if r["efficiency"] is not None and r["devices"] > 1]
        for rows in series.values()
    ]
    counts = sorted(
        {r["devices"] for rows in bars for r in rows} | {n for n, _ in failures} | set(others)
    )
    slots = len(series) + (1 if others else 0)
    width = 0.8 / slots
    for i, (rows, mine) in enumerate(zip(series.values(), bars, strict=True)):
        xs = [counts.index(r["devices"]) - 0.4 + width * (i + 0.5) for r in mine]
        ys = [100 * r["efficiency"] for r in mine]
        drawn = ax.bar(xs, ys, width, color=f"C{i}", label=_series_label(rows[0]))
        ax.bar_label(drawn, fmt="%.0f%%", fontsize=7, label_type="center")
        with_ci = [
            (x, y, r["efficiency_ci95"])
            for x, y, r in zip(xs, ys, mine, strict=True)
            if r.get("efficiency_ci95")
        ]
        for x, y, (low, high) in with_ci:
            ax.errorbar(x, y, [[y - 100 * low], [100 * high - y]], fmt="none", color="black", lw=1)
    last = {counts.index(n) - 0.4 + width * (slots - 0.5): ys for n, ys in others.items()}
    cap.ranges(ax, last, others_label, width)
    ax.axhline(100, color="black", lw=1, ls="--", label="linear scaling")
    ax.set_xticks(range(len(counts)), [str(n) for n in counts])
    ax.set_xlim(-0.6, len(counts) - 0.4)
    ax.set_xlabel("devices")
    ax.set_ylabel("scaling efficiency (%)")
    mark_failed(ax, [(counts.index(n), label) for n, label in failures])
    fig.legend(loc="outside lower center", ncols=4)


def _variant(case: dict[str, Any]) -> str:
    """Case flags that change the speed besides the batch: they split a figure's series."""
    parts = [flag for flag in ("channels_last", "compile") if case.get(flag)]
    if case.get("threads"):
        parts.append(f"{case['threads']} threads")
    if case.get("mkldnn") is False:
        parts.append("no oneDNN")
    if case.get("grad_accum", 1) > 1:
        parts.append(f"accumulation {case['grad_accum']}")
    return ", ".join(parts)


def batch_figures(results: Sequence[dict[str, Any]]) -> list[Figure]:
    """One-device throughput against batch size per model, size, precision and device."""
    groups: dict[tuple, dict[tuple[str, str], dict[int, dict[str, Any]]]] = {}
    for r in results:
        case = r["case"]
        if device_count(case) != 1 or r["status"] == "skipped":
            continue
        if not isinstance(case.get("batch_size"), int):
            continue
        group = (case["model"], case.get("image_size"), case.get("seq_len"))
        group += (case["precision"], case["device"])
        series = (r["system"]["fingerprint"], _variant(case))
        points = groups.setdefault(group, {}).setdefault(series, {})
        if r["status"] == "ok" or points.get(case["batch_size"], r)["status"] != "ok":
            points[case["batch_size"]] = r  # the newest wins; a failure does not hide an ok
    figures = []
    for (model, *_, precision, device), series in groups.items():
        every = [r for points in series.values() for r in points.values()]
        if len({r["case"]["batch_size"] for r in every}) < 2:
            continue
        ok = [r for r in every if r["status"] == "ok"]
        size = next((result_size(r) for r in ok), None) or result_size(every[0])
        setting = f"{model}" + (f" @{size}" if size else "") + f" {precision} {device}"
        steps = span(r["metrics"].get("steps_measured", 0) for r in ok) if ok else "0"
        figures.append(_batch_figure(model, size, precision, device, setting, steps, series))
    return figures


def _best(points: dict[Any, dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest ok result of a series' points, or None."""
    ok = [r for r in points.values() if r["status"] == "ok"]
    return max(ok, key=lambda r: r["metrics"]["samples_per_s_median"]) if ok else None


def _series_name(points: dict[Any, dict[str, Any]]) -> str:
    first = next(iter(points.values()))
    variant = _variant(first["case"])
    return hostname(first) + (f" ({variant})" if variant else "")


def _batch_figure(
    model: str, size: Any, precision: str, device: str, setting: str, steps: str, series: dict
) -> Figure:
    def peak(item: tuple) -> float | None:
        best = _best(item[1])
        return best["metrics"]["samples_per_s_median"] if best else None

    shown, others = cap.top(series.items(), peak)
    drawn = {key: {b: slim(r) for b, r in points.items()} for key, points in shown}
    every = [r for points in drawn.values() for r in points.values()]
    band: dict[int, list[float]] = {}
    for _, points in others:
        for b, r in points.items():
            if r["status"] == "ok":
                band.setdefault(b, []).append(r["metrics"]["samples_per_s_median"])
    table = None
    if others:
        rows = []
        for item in others:
            best, failed = _best(item[1]), [r for r in item[1].values() if r["status"] != "ok"]
            rows.append(
                [
                    _series_name(item[1]),
                    number_text(best and best["metrics"]["samples_per_s_median"]),
                    best["case"]["batch_size"] if best else "-",
                    ", ".join(f"{r['status']} at {r['case']['batch_size']}" for r in failed),
                ]
            )
        table = cap.others_table(
            "series",
            ["system", "highest samples/s", "at batch", "failed"],
            rows,
            ["left", "right", "right", "left"],
        )
    note = failed_note(
        f"{r['status']} at batch {r['case']['batch_size']} on {hostname(r)}"
        for r in every
        if r["status"] != "ok"
    )
    capped = cap.note(
        len(drawn),
        len(others),
        "the highest throughput",
        "the grey band (min–max at each batch size)",
        "series",
    )
    return make_figure(
        slug("throughput-vs-batch", model, size, precision, device),
        f"Throughput against batch size: {setting}",
        f"Training throughput of {setting} on one device (samples/s from the median "
        f"step after warm-up, mean over the runs, {steps} measured steps in all; "
        f"{CI_NOTE}) against the batch size, log2 axis.",
        [hostname(r) for r in every],
        Drawing(_draw_batch, (drawn, band, cap.others_label(len(others)))),
        f"{note} {capped}".strip(),
        table,
    )


def _draw_batch(fig: MplFigure, series: dict, others: dict, others_label: str) -> None:
    ax = fig.add_subplot()
    several = len({system for system, _ in series}) > 1
    failures, batches = [], list(others)
    for i, points in enumerate(series.values()):
        batches += list(points)
        failures += [
            (b, _failed_label(r, several)) for b, r in points.items() if r["status"] != "ok"
        ]
        ok = sorted((b, r) for b, r in points.items() if r["status"] == "ok")
        if not ok:
            continue
        ys = [r["metrics"]["samples_per_s_median"] for _, r in ok]
        ax.plot([b for b, _ in ok], ys, "o-", color=f"C{i}", label=plain(_series_name(points)))
        for b, r in ok:
            ci_bar(ax, b, r, f"C{i}")
    cap.band(ax, others, others_label)
    log2_ticks(ax, batches)
    ax.set_xlabel("batch size (log2 scale)")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_ylim(bottom=0)
    mark_failed(ax, sorted(failures))
    legend(ax)
