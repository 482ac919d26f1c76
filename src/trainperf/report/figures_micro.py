"""The report's figures from micro-benchmark runs: step profiles, collectives, GEMMs.

Each function takes the runs of ``Store.micro()`` (of any kind: it picks its own) and a
mapping of system fingerprints to hostnames, and returns ``figure_kit.Figure`` records. Where
several ok runs measured the same thing on one system, the newest wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure as MplFigure

from trainperf.case.spec import label_of
from trainperf.report import cap
from trainperf.report.figure_kit import (
    FAILED_COLOR,
    Drawing,
    Figure,
    legend,
    log2_ticks,
    log_axis,
    make_figure,
    plain,
    slug,
    span,
)

TOP_LAYERS = 15
STEP_PARTS = (  # (metric, legend label): the parts of an instrumented step, in order
    ("fwd_ms", "forward (layers)"),
    ("bwd_ms", "backward (layers)"),
    ("optimizer_ms", "optimizer step"),
    ("unattributed_ms", "unattributed (loss, zero_grad, framework)"),
)
# nccl-tests' bus bandwidth factors, busbw = algbw × factor for n ranks (micro/collective.py)
BUS_FACTORS = {
    "all_reduce": "2(n-1)/n",
    "all_gather": "(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "all_to_all": "(n-1)/n",
    "broadcast": "1",
    "reduce": "1",
    "sendrecv": "1",
}


def _ok_runs(runs: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in runs if r["kind"] == kind and r["status"] == "ok"]


def _param_span(runs: Sequence[dict[str, Any]], name: str) -> str:
    return span(str(run["params"].get(name, "?")) for run in runs)


def byte_label(size: float) -> str:
    """1024 -> '1 KiB'."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size:g} B"


def _step_ms(run: dict[str, Any]) -> float:
    """A profile's step time in ms: its parts added up."""
    return sum(max(0.0, run["metrics"].get(metric) or 0.0) for metric, _ in STEP_PARTS)


def profile_figures(runs: Sequence[dict[str, Any]], hostnames: Mapping[str, str]) -> list[Figure]:
    """The forward/backward/optimizer split of every profile, and the top layers of each.

    Per profiled case, the ``cap.SERIES_CAP`` systems with the shortest step are drawn (a
    row of the split, a figure of layers each); the others are listed under the split."""
    newest = {(r["system"], label_of(r["params"]["case"])): r for r in _ok_runs(runs, "profile")}
    if not newest:
        return []
    how = (
        f"per-layer forward and backward hooks and optimizer-step hooks, averaged over "
        f"{_param_span(list(newest.values()), 'steps')} profiled steps after "
        f"{_param_span(list(newest.values()), 'warmup')} warm-up steps"
    )
    by_case: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for (system, label), run in newest.items():
        by_case.setdefault(label, []).append((system, run))
    chosen, left_out = [], []
    for label, profiled in by_case.items():
        shown, others = cap.top(profiled, lambda item: _step_ms(item[1]), highest=False)
        chosen += [(system, label, run) for system, run in shown]
        left_out += [(system, label, run) for system, run in others]
    profiles = [
        (f"{label} · {hostnames.get(s, s)}", _slim_profile(run)) for s, label, run in chosen
    ]
    table, capped = cap.left_out(
        len(chosen),
        left_out,
        "the shortest step per case",
        "not drawn, nor their layers,",
        "profiles",
        ["case", "system", "step (ms, hooks included)"],
        [[label, hostnames.get(s, s), f"{_step_ms(run):.3g}"] for s, label, run in left_out],
        ["left", "left", "right"],
    )
    figures = [
        make_figure(
            "step-breakdown",
            "Where a training step goes: forward, backward, optimizer",
            f"Time per training step in ms split into forward, backward, optimizer step and "
            f"the unattributed rest, from {how}; black tick: the step time without hooks.",
            [hostnames.get(system, system) for system, _, _ in chosen],
            Drawing(_draw_split, (profiles,), (6.4, 2.2 + 0.5 * len(profiles))),
            capped,
            table,
        )
    ]
    for system, label, run in chosen:
        host = hostnames.get(system, system)
        layers = run["metrics"]["layers"]
        top = sorted(layers, key=lambda layer: -(layer["fwd_ms"] + layer["bwd_ms"]))[:TOP_LAYERS]
        rest = sum(layer["fwd_ms"] + layer["bwd_ms"] for layer in layers if layer not in top)
        key = slug("layer-breakdown", label, host)
        figures.append(
            make_figure(
                key,
                f"Time per layer: {label} on {host}",
                f"Forward and backward time per step in ms of the {len(top)} slowest of "
                f"{len(layers)} layers of {label}, from {how}.",
                [host],
                Drawing(_draw_layers, (top,), (6.4, 1.4 + 0.28 * len(top))),
                f"The other layers take {rest:.3g} ms together." if len(top) < len(layers) else "",
            )
        )
    return figures


def _slim_profile(run: dict[str, Any]) -> dict[str, Any]:
    """What the split draws of a profile run: its parts and the step without hooks."""
    keys = [metric for metric, _ in STEP_PARTS] + ["step_ms_uninstrumented"]
    return {"metrics": {k: run["metrics"].get(k) for k in keys}}


def _draw_split(fig: MplFigure, profiles: list[tuple[str, dict[str, Any]]]) -> None:
    ax = fig.add_subplot()
    rows = range(len(profiles))
    left = [0.0] * len(profiles)
    for i, (metric, label) in enumerate(STEP_PARTS):
        widths = [max(0.0, run["metrics"].get(metric) or 0.0) for _, run in profiles]
        ax.barh(rows, widths, 0.6, left=left, color=f"C{i}", label=label)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for i, (_, run) in enumerate(profiles):
        if ms := run["metrics"].get("step_ms_uninstrumented"):
            ax.vlines(
                ms,
                i - 0.4,
                i + 0.4,
                color="black",
                lw=2,
                label="step without hooks" if i == 0 else None,
            )
    ax.set_yticks(rows, [plain(label) for label, _ in profiles])
    ax.set_ylim(len(profiles) - 0.5, -0.5)
    ax.set_xlabel("time per step (ms)")
    ax.grid(axis="y", visible=False)
    fig.legend(loc="outside lower center", ncols=3, fontsize=7)


def _draw_layers(fig: MplFigure, layers: list[dict[str, Any]]) -> None:
    ax = fig.add_subplot()
    rows = range(len(layers))
    fwd = [layer["fwd_ms"] for layer in layers]
    ax.barh(rows, fwd, color="C0", label="forward")
    ax.barh(rows, [layer["bwd_ms"] for layer in layers], left=fwd, color="C1", label="backward")
    ax.set_yticks(rows, [plain(f"{layer['name']} ({layer['type']})") for layer in layers])
    ax.invert_yaxis()
    ax.set_xlabel("time per step (ms)")
    ax.grid(axis="y", visible=False)
    ax.legend(loc="lower right")


def collective_figures(
    runs: Sequence[dict[str, Any]], hostnames: Mapping[str, str]
) -> list[Figure]:
    """Bus bandwidth against message size, one figure per op and dtype."""
    # (op, dtype) -> (system, ranks, backend) -> (run, that op's rows); the newest run wins
    groups: dict[tuple[str, str], dict[tuple[str, Any, str], tuple[dict, list]]] = {}
    for run in _ok_runs(runs, "collective"):
        device = run["device"] or {}
        ranks = run["metrics"].get("world_size") or device.get("world_size")
        backend = device.get("backend") or run["params"].get("device", "?")
        measured = [row for row in run["metrics"].get("rows", []) if row.get("busbw_gbps")]
        for op in dict.fromkeys(row["op"] for row in measured):
            rows = [row for row in measured if row["op"] == op]
            dtype = rows[0].get("dtype", run["params"].get("dtype"))
            groups.setdefault((op, dtype), {})[(run["system"], ranks, backend)] = (run, rows)
    figures = []
    for (op, dtype), every in groups.items():
        # A series measured in place and out of place is two lines: the cap counts lines.
        lines = max(len({row.get("in_place", True) for row in rows}) for _, rows in every.values())
        shown, others = cap.top(
            every.items(),
            lambda item: max(row["busbw_gbps"] for row in item[1][1]),
            cap=cap.SERIES_CAP // lines,
        )
        series = {key: rows for key, (_, rows) in shown}
        chosen = [run for run, _ in every.values()]
        wrong = sum(row.get("wrong", 0) > 0 for rows in series.values() for row in rows)
        band: dict[int, list[float]] = {}
        for _, (_, rows) in others:
            for row in rows:
                band.setdefault(row["size_bytes"], []).append(row["busbw_gbps"])
        table, capped = cap.left_out(
            len(series),
            others,
            "the highest bus bandwidth",
            "the grey band (min–max at each size)",
            "series",
            ["system", "ranks", "backend", "highest busbw (GB/s)", "at size"],
            _best_of_others(
                others, hostnames, "busbw_gbps", lambda best: byte_label(best["size_bytes"])
            ),
            ["left", "right", "left", "right", "right"],
        )
        notes = [f"{wrong} sizes gave wrong results (marked x)." if wrong else "", capped]
        figures.append(
            make_figure(
                slug("collective-busbw", op, dtype),
                f"Bus bandwidth of {op} ({dtype})",
                f"Bus bandwidth in GB/s of {op} on {dtype} data against the message size, "
                f"with nccl-tests' definitions: algbw = size / time, busbw = algbw × "
                f"{BUS_FACTORS.get(op, 'the op factor')} for n ranks; time per iteration = "
                f"one window over {_param_span(chosen, 'iters')} iterations after "
                f"{_param_span(chosen, 'warmup')} warm-up, averaged over ranks "
                f"({', '.join(sorted({backend for _, _, backend in every}))}).",
                [hostnames.get(system, system) for system, _, _ in series],
                Drawing(
                    _draw_collective,
                    (
                        {
                            (s, hostnames.get(s, s), n, b): rows
                            for (s, n, b), rows in series.items()
                        },
                        band,
                        cap.others_label(len(others), "series"),
                    ),
                ),
                " ".join(filter(None, notes)),
                table,
            )
        )
    return figures


def _best_of_others(
    others: list, hostnames: Mapping[str, str], metric: str, at: Callable[[dict], str]
) -> list[list[Any]]:
    """The not-drawn table's rows of the collective and GEMM figures: each left-out series,
    keyed (system, two more fields), by its best point: the host, the two fields, the
    highest ``metric`` and ``at`` (where that point lies)."""
    return [
        [hostnames.get(system, system), second, third, f"{best[metric]:.3g}", at(best)]
        for (system, second, third), (_, rows) in others
        for best in [max(rows, key=lambda row: row[metric])]
    ]


def _draw_collective(fig: MplFigure, series: dict, others: dict, others_label: str) -> None:
    ax = fig.add_subplot()
    sizes = list(others)
    for i, ((_, host, ranks, backend), rows) in enumerate(series.items()):
        placements = sorted({row.get("in_place", True) for row in rows})
        for in_place in placements:
            mine = [r for r in rows if r.get("in_place", True) == in_place]
            mine.sort(key=lambda r: r["size_bytes"])
            sizes += [r["size_bytes"] for r in mine]
            label = f"{host}, {ranks} ranks, {backend}"
            dashed = in_place and len(placements) > 1
            if len(placements) > 1:
                label += ", in-place" if in_place else ", out-of-place"
            xs, ys = [r["size_bytes"] for r in mine], [r["busbw_gbps"] for r in mine]
            ax.plot(xs, ys, "s--" if dashed else "o-", ms=4, color=f"C{i}", label=plain(label))
            bad = [r for r in mine if r.get("wrong", 0) > 0]
            xs, ys = [r["size_bytes"] for r in bad], [r["busbw_gbps"] for r in bad]
            ax.plot(xs, ys, "x", color=FAILED_COLOR, ms=9, mew=2)
    cap.band(ax, others, others_label)
    log2_ticks(ax, sizes, byte_label)
    ax.tick_params(axis="x", labelrotation=45)
    log_axis(ax)
    ax.set_xlabel("message size (bytes, log2 scale)")
    ax.set_ylabel("bus bandwidth (GB/s, log scale)")
    legend(ax, fontsize=7)


def gemm_figures(runs: Sequence[dict[str, Any]], hostnames: Mapping[str, str]) -> list[Figure]:
    """GEMM TFLOP/s against size, one figure per shape set, one series per system and dtype."""
    # shape set -> (system, device, dtype) -> (run, ok rows); the newest run wins
    groups: dict[str, dict[tuple[str, str, str], tuple[dict, list]]] = {}
    skipped: dict[str, set[str]] = {}
    for run in _ok_runs(runs, "gemm"):
        shapes = run["params"].get("shapes", "listed")
        device = run["params"].get("device") or (run["device"] or {}).get("type", "?")
        every = run["metrics"].get("rows", [])
        for dtype in dict.fromkeys(row["dtype"] for row in every):
            rows = [row for row in every if row["dtype"] == dtype]
            ok = [row for row in rows if row["status"] == "ok" and row.get("tflops_median")]
            if ok:
                groups.setdefault(shapes, {})[(run["system"], device, dtype)] = (run, ok)
            else:
                host = hostnames.get(run["system"], run["system"])
                why = rows[0].get("reason") or rows[0]["status"]
                skipped.setdefault(shapes, set()).add(f"{dtype} on {host} ({why})")
    figures = []
    for shapes, every in groups.items():
        shown, others = cap.top(
            every.items(), lambda item: max(row["tflops_median"] for row in item[1][1])
        )
        square = shapes == "square"
        series = {
            (system, hostnames.get(system, system), device, dtype): rows
            for (system, device, dtype), (_, rows) in shown
        }
        chosen = [run for run, _ in every.values()]
        flushed = all(run["metrics"].get("flush", run["params"].get("flush")) for run in chosen)
        gaps = "; ".join(sorted(skipped.get(shapes, ())))
        band: dict[float, list[float]] = {}
        for _, (_, rows) in others:
            for row in rows:
                band.setdefault(row["M"] if square else row["flops"], []).append(
                    row["tflops_median"]
                )
        table, capped = cap.left_out(
            len(series),
            others,
            "the highest TFLOP/s",
            "the grey band (min–max at each size)",
            "series",
            ["system", "device", "dtype", "highest TFLOP/s", "at M×N×K"],
            _best_of_others(
                others,
                hostnames,
                "tflops_median",
                lambda best: f"{best['M']}×{best['N']}×{best['K']}",
            ),
            ["left", "left", "left", "right", "right"],
        )
        notes = [f"Not run: {gaps}." if gaps else "", capped]
        figures.append(
            make_figure(
                slug("gemm-tflops", shapes),
                f"Matrix multiply throughput ({shapes} shapes)",
                f"GEMM throughput in TFLOP/s = 2·M·N·K / time (DeepBench's definition), the "
                f"time the median of {_param_span(chosen, 'iters')} timed calls after "
                f"{_param_span(chosen, 'warmup')} warm-up calls, caches "
                f"{'flushed' if flushed else 'not always flushed'} between calls; {shapes} "
                f"shapes.",
                [host for _, host, _, _ in series],
                Drawing(
                    _draw_gemm,
                    (series, square, band, cap.others_label(len(others), "series")),
                ),
                " ".join(filter(None, notes)),
                table,
            )
        )
    return figures


def _draw_gemm(fig: MplFigure, series: dict, square: bool, others: dict, others_label: str) -> None:
    ax = fig.add_subplot()
    everywhere = list(others)
    for i, ((_, host, device, dtype), rows) in enumerate(series.items()):
        rows = sorted(rows, key=lambda r: r["flops"])
        xs = [r["M"] if square else r["flops"] for r in rows]
        everywhere += xs
        label = plain(f"{host}, {device}, {dtype}")
        ys = [r["tflops_median"] for r in rows]
        ax.plot(xs, ys, "o-" if square else "o", ms=4, color=f"C{i}", label=label)
    cap.band(ax, others, others_label)
    if square:
        log2_ticks(ax, everywhere)
        ax.set_xlabel("M = N = K (log2 scale)")
    else:
        log_axis(ax, "x")
        ax.set_xlabel("FLOPs per call, 2·M·N·K (log scale)")
    log_axis(ax)
    ax.set_ylabel("throughput (TFLOP/s, log scale)")
    legend(ax, fontsize=7)
