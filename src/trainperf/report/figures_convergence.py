"""The report's time-to-accuracy figures: evaluation curves of ``trainperf train`` runs.

One figure per model and data set: the target metric against samples seen (the x axis of
iso-accuracy, where runs on different systems or device counts should coincide), every
stored run a line, the target a dashed line, and a second panel against wall-clock time
(where the systems differ). Runs that ended without finishing keep their status in the
legend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure as MplFigure

from trainperf.report import cap
from trainperf.report.figure_kit import Drawing, Figure, make_figure, plain, slug

WIDE = (11.0, 4.2)


def _label(run: dict[str, Any]) -> str:
    c = run["config"]
    status = "" if run["status"] == "ok" else f", {run['status']}"
    return (
        f"run {run['id']} {run['system'].get('hostname', '?')} x{c.get('devices', 1)} "
        f"{c.get('precision', '')}{status}"
    )


def convergence_figures(runs: Sequence[dict[str, Any]]) -> list[Figure]:
    """Curves of the stored training runs, one figure per model, data and target."""
    groups: dict[tuple[str, str, str, float], list[dict[str, Any]]] = {}
    for run in runs:
        if not run["evaluations"]:
            continue
        c = run["config"]
        key = (c["model"], c["data"], c["target_metric"], c["target_value"])
        groups.setdefault(key, []).append(run)
    figures = []
    for (model, data, metric, target), every in groups.items():
        members, others = cap.top(
            every, lambda r: r["time_to_target_s"] if r["reached"] else None, highest=False
        )
        reached = [r for r in members if r["reached"]]
        times = ", ".join(f"run {r['id']}: {r['time_to_target_s']:.1f} s" for r in reached)
        caption = (
            f"{metric} of {model} on {data} at each evaluation of every stored training run, "
            "against samples seen (left: runs that train the same way coincide) and against "
            "wall-clock time from the end of initialisation (right), evaluations included. "
            + (f"Time to {metric} {target:g}: {times}." if times else "No run reached it.")
        )
        table = None
        if others:
            table = cap.others_table(
                "runs",
                ["run", "system", "status", f"time to {metric} {target:g} (s)"],
                [
                    [
                        r["id"],
                        r["system"].get("hostname", "?"),
                        r["status"],
                        f"{r['time_to_target_s']:.1f}" if r["reached"] else "not reached",
                    ]
                    for r in others
                ],
                ["right", "left", "left", "right"],
            )
        capped = cap.note(
            len(members), len(others), "the shortest time to target", "not drawn", "runs"
        )
        curves = [
            {
                "label": _label(r),
                "evaluations": [
                    {k: e.get(k) for k in ("samples_seen", "time_s", metric)}
                    for e in r["evaluations"]
                ],
            }
            for r in members
        ]
        figures.append(
            make_figure(
                slug("convergence", model, data.split(":")[0], metric, f"{target:g}"),
                f"Time to accuracy: {model} on {data.split(':')[0]}",
                caption,
                [r["system"].get("hostname", "?") for r in members],
                Drawing(_draw, (curves, metric, target), WIDE),
                capped,
                table,
            )
        )
    return figures


def _draw(fig: MplFigure, curves: list[dict[str, Any]], metric: str, target: float) -> None:
    by_samples, by_time = fig.subplots(1, 2)
    for curve in curves:
        evaluations = [e for e in curve["evaluations"] if e.get(metric) is not None]
        x = [e["samples_seen"] for e in evaluations]
        t = [e["time_s"] for e in evaluations]
        y = [e[metric] for e in evaluations]
        by_samples.plot(x, y, marker="o", label=plain(curve["label"]))
        by_time.plot(t, y, marker="o", label=plain(curve["label"]))
    for ax, xlabel in ((by_samples, "samples seen"), (by_time, "wall-clock time (s)")):
        ax.axhline(target, linestyle="--", color="grey", label=f"target {target:g}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
    by_time.legend(fontsize="small")
