"""The report's per-layer figure across systems: one network's forward and backward time
per layer on each system that profiled it, side by side.

From the stored ``profile`` runs (``trainperf profile``: per-layer forward and backward
hooks, ``trainperf.profile.breakdown``), the newest ok one per system and workload (the
profiled case without its device type, seed and measurement policy: the same network,
batch, input size and precision on a CPU and on a GPU is one workload). One figure per
workload profiled on at least two systems. Layers are matched by their module name; the
``TOP_LAYERS`` with the longest forward + backward time on any drawn system are drawn, in
that order, a bar per system (forward solid, backward hatched beside it), and the caption
says how many layers were left out and how long they take together. With more than
``cap.SERIES_CAP`` systems those with the shortest step are drawn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure as MplFigure
from matplotlib.patches import Patch

from trainperf.case.spec import label_of
from trainperf.report import cap
from trainperf.report.figure_kit import (
    Drawing,
    Figure,
    data_table,
    make_figure,
    plain,
    slug,
)

TOP_LAYERS = 12
NOT_IN_WORKLOAD = ("device", "seed", "threads", "timeout_s", "steps", "runs")


def _layer_ms(layer: dict[str, Any]) -> float:
    return layer["fwd_ms"] + layer["bwd_ms"]


def _step_ms(run: dict[str, Any]) -> float:
    return sum(_layer_ms(layer) for layer in run["metrics"]["layers"])


def profiled_workloads(
    runs: Sequence[dict[str, Any]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """workload label -> system fingerprint -> the newest ok profile run with layers, for
    the workloads profiled on at least two systems (micro runs oldest first)."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs:
        if run["kind"] != "profile" or run["status"] != "ok":
            continue
        if not (run.get("metrics") or {}).get("layers"):
            continue
        case = run["params"]["case"]
        workload = json.dumps(
            {k: v for k, v in case.items() if k not in NOT_IN_WORKLOAD}, sort_keys=True
        )
        found.setdefault(workload, {})[run["system"]] = run
    labels = {}
    for workload, by_system in found.items():
        case = next(iter(by_system.values()))["params"]["case"]
        device = case.get("device", "cpu")
        labels[workload] = label_of(case).replace(f" {device}", "", 1)
    return {labels[w]: by_system for w, by_system in found.items() if len(by_system) > 1}


def top_layers(profiles: Sequence[dict[str, Any]], count: int = TOP_LAYERS) -> list[str]:
    """The names of the ``count`` layers with the longest forward + backward time on any of
    the ``profiles``, longest first."""
    longest: dict[str, float] = {}
    for run in profiles:
        for layer in run["metrics"]["layers"]:
            longest[layer["name"]] = max(longest.get(layer["name"], 0.0), _layer_ms(layer))
    return sorted(longest, key=lambda name: -longest[name])[:count]


def layer_figures(runs: Sequence[dict[str, Any]], hostnames: Mapping[str, str]) -> list[Figure]:
    """Forward and backward time per layer of one network across systems, per workload."""
    figures = []
    for workload, by_system in profiled_workloads(runs).items():
        shown, others = cap.top(by_system.items(), lambda item: _step_ms(item[1]), highest=False)
        hosts = [hostnames.get(system, system) for system, _ in shown]
        names = top_layers([run for _, run in shown])
        series = []
        for (_, run), host in zip(shown, hosts, strict=True):
            layers = {layer["name"]: layer for layer in run["metrics"]["layers"]}
            drawn = [layers.get(name) for name in names]
            rest = sum(_layer_ms(layer) for name, layer in layers.items() if name not in names)
            series.append(
                {
                    "host": host,
                    "layers": [
                        {k: layer[k] for k in ("fwd_ms", "bwd_ms")} if layer else None
                        for layer in drawn
                    ],
                    "rest_ms": rest,
                }
            )
        types = {}
        for _, run in shown:
            for layer in run["metrics"]["layers"]:
                types.setdefault(layer["name"], layer.get("type", ""))
        every = {layer["name"] for _, run in shown for layer in run["metrics"]["layers"]}
        left = len(every) - len(names)
        rest = "; ".join(f"{s['host']} {s['rest_ms']:.3g} ms" for s in series)
        note = (
            f"The other {left} layers are left out, so that the figure stays readable: "
            f"together they take {rest}."
            if left
            else ""
        )
        capped = cap.note(len(shown), len(others), "the shortest step", "not drawn")
        figures.append(
            make_figure(
                slug("layers-across-systems", workload),
                f"Time per layer across systems: {workload}",
                f"Forward (solid) and backward (hatched) time per training step in ms of the "
                f"{len(names)} layers of {workload} with the longest forward + backward time "
                f"on any system, from per-layer hooks of `trainperf profile` (the newest "
                f"profile of each system); a bar per system, layers matched by module name.",
                hosts,
                Drawing(
                    _draw,
                    ([f"{n} ({types.get(n, '')})" for n in names], series),
                    (7.2, 1.5 + 0.22 * len(names) * max(2, len(series))),
                ),
                f"{note} {capped}".strip(),
                _table(names, types, series),
            )
        )
    return figures


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _table(names: list[str], types: dict[str, str], series: list[dict]) -> dict[str, Any]:
    headers = ["layer", "type"]
    for s in series:
        headers += [f"{s['host']} fwd ms", f"{s['host']} bwd ms"]
    rows = []
    for i, name in enumerate(names):
        row = [name, types.get(name, "")]
        for s in series:
            layer = s["layers"][i]
            row += [_ms(layer and layer["fwd_ms"]), _ms(layer and layer["bwd_ms"])]
        rows.append(row)
    rows.append(["other layers", ""] + [c for s in series for c in (_ms(s["rest_ms"]), "")])
    return data_table(headers, ["left", "left"] + ["right"] * 2 * len(series), rows)


def _draw(fig: MplFigure, names: list[str], series: list[dict[str, Any]]) -> None:
    ax = fig.add_subplot()
    height = 0.8 / len(series)
    for i, s in enumerate(series):
        color = f"C{i}"
        ys = [row - 0.4 + height * (i + 0.5) for row in range(len(names))]
        fwd = [layer["fwd_ms"] if layer else 0.0 for layer in s["layers"]]
        bwd = [layer["bwd_ms"] if layer else 0.0 for layer in s["layers"]]
        ax.barh(ys, fwd, height, color=color, label=plain(s["host"]))
        ax.barh(ys, bwd, height, left=fwd, color=color, alpha=0.55, hatch="///", lw=0)
    handles, labels = ax.get_legend_handles_labels()
    ax.add_artist(ax.legend(handles, labels, loc="lower right", title="system"))
    ax.legend(
        [Patch(color="0.4"), Patch(facecolor="0.4", alpha=0.55, hatch="///")],
        ["forward", "backward"],
        loc="center right",
    )
    ax.set_yticks(range(len(names)), [plain(n) for n in names])
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlabel("time per step (ms)")
    ax.grid(axis="y", visible=False)
