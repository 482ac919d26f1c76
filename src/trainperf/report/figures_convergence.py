"""The report's time-to-accuracy figures: learning curves of ``trainperf train`` runs and
the relative time to train of the systems.

Learning curves (``convergence_figures``): one figure per model, data set and target, the
per-epoch evaluations of every stored run (``train_runs.evaluations``) overlaid, a colour
per system (its runs, other seeds or settings, share it): the target metric against
epochs (where runs that train the same way coincide; samples seen on the top axis when
every run's epoch has the same size) and against wall-clock time from the end of
initialisation (where the systems differ), the target dashed. Runs that ended without
finishing keep their status in the legend. Its table: each run's last evaluation.

Relative time to train (``relative_time_figures``): one figure per training recipe (the
run's configuration without seed, logging, loader workers, device type and data path)
that reached its target on at least two systems. Per system the mean time to target of
its runs that reached it, divided by the baseline system's: the system with the most runs
that reached it (the first seen on a tie), as ``compare`` picks the system with the most
ok results. Each seed is a dot (its time over the baseline's mean); the bar is Fieller's
95% interval of the ratio of the two means (``measure.hierarchy.ratio_interval``), absent
below 2 runs on a side.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure as MplFigure

from trainperf.measure.hierarchy import ratio_interval
from trainperf.report import cap
from trainperf.report.figure_kit import (
    Drawing,
    Figure,
    data_table,
    legend,
    make_figure,
    plain,
    slug,
)

WIDE = (11.0, 4.2)
# Configuration fields that may differ between the runs a relative time puts side by side.
NOT_IN_RECIPE = ("seed", "mllog", "workers", "device", "data")


def _label(run: dict[str, Any]) -> str:
    c = run["config"]
    status = "" if run["status"] == "ok" else f", {run['status']}"
    return (
        f"run {run['id']} {run['system'].get('hostname', '?')} x{c.get('devices', 1)} "
        f"{c.get('precision', '')} seed {c.get('seed', 0)}{status}"
    )


def _host(run: dict[str, Any]) -> str:
    return run["system"].get("hostname") or run["system"]["fingerprint"]


def _epoch_size(runs: Sequence[dict[str, Any]]) -> int | None:
    """The samples of one epoch when every evaluation of every run agrees on it, else None."""
    sizes = {
        e["samples_seen"] / e["epoch"] for r in runs for e in r["evaluations"] if e.get("epoch")
    }
    return int(sizes.pop()) if len(sizes) == 1 else None


def _last(run: dict[str, Any], metric: str) -> dict[str, Any]:
    return next((e for e in reversed(run["evaluations"]) if e.get(metric) is not None), {})


def convergence_figures(runs: Sequence[dict[str, Any]]) -> list[Figure]:
    """Learning curves of the stored training runs, one figure per model, data and target."""
    groups: dict[tuple[str, str, str, float], list[dict[str, Any]]] = {}
    for run in runs:
        if not run["evaluations"]:
            continue
        c = run["config"]
        # The data set by name: its path differs from machine to machine.
        key = (c["model"], c["data"].split(":")[0], c["target_metric"], c["target_value"])
        groups.setdefault(key, []).append(run)
    figures = []
    for (model, data, metric, target), every in groups.items():
        members, others = cap.top(
            every, lambda r: r["time_to_target_s"] if r["reached"] else None, highest=False
        )
        reached = [r for r in members if r["reached"]]
        times = ", ".join(f"run {r['id']}: {r['time_to_target_s']:.1f} s" for r in reached)
        epoch_size = _epoch_size(members)
        caption = (
            f"Learning curves: {metric} of {model} on {data} at each evaluation of every "
            "stored training run, a colour per system, against epochs (left: runs that train "
            "the same way coincide"
            + (f"; top axis: samples seen, {epoch_size:,} per epoch" if epoch_size else "")
            + ") and against wall-clock time from the end of initialisation (right), "
            "evaluations included. "
            + (f"Time to {metric} {target:g}: {times}." if times else "No run reached it.")
        )
        capped = cap.note(
            len(members), len(others), "the shortest time to target", "not drawn", "runs"
        )
        hosts = list(dict.fromkeys(_host(r) for r in members))
        curves = [
            {
                "label": _label(r),
                "color": f"C{hosts.index(_host(r)) % 10}",
                "evaluations": [
                    {k: e.get(k) for k in ("epoch", "time_s", metric)} for e in r["evaluations"]
                ],
            }
            for r in members
        ]
        figures.append(
            make_figure(
                slug("convergence", model, data, metric, f"{target:g}"),
                f"Time to accuracy: {model} on {data}",
                caption,
                [_host(r) for r in members],
                Drawing(_draw, (curves, metric, target, epoch_size), WIDE),
                capped,
                _curves_table(members, others, metric, target),
            )
        )
    return figures


def _curves_table(
    members: list[dict[str, Any]], others: list[dict[str, Any]], metric: str, target: float
) -> dict[str, Any]:
    rows = []
    for r in members + others:
        last = _last(r, metric)
        rows.append(
            [
                r["id"],
                _host(r),
                r["config"].get("seed", 0),
                r["status"],
                last.get("epoch", "-"),
                f"{last['time_s']:.1f}" if last else "-",
                f"{last[metric]:.4g}" if last else "-",
                f"{r['time_to_target_s']:.1f}" if r["reached"] else "not reached",
            ]
            + (["no" if r in others else "yes"] if others else [])
        )
    return data_table(
        ["run", "system", "seed", "status", "last epoch", "at (s)", metric]
        + [f"time to {metric} {target:g} (s)"]
        + (["drawn"] if others else []),
        ["right", "left", "right", "left", "right", "right", "right", "right", "left"],
        rows,
    )


def _draw(
    fig: MplFigure,
    curves: list[dict[str, Any]],
    metric: str,
    target: float,
    epoch_size: int | None,
) -> None:
    by_epoch, by_time = fig.subplots(1, 2)
    for curve in curves:
        evaluations = [e for e in curve["evaluations"] if e.get(metric) is not None]
        x = [e["epoch"] for e in evaluations]
        t = [e["time_s"] for e in evaluations]
        y = [e[metric] for e in evaluations]
        style = {"marker": "o", "color": curve["color"], "label": plain(curve["label"])}
        by_epoch.plot(x, y, **style)
        by_time.plot(t, y, **style)
    for ax, xlabel in ((by_epoch, "epochs"), (by_time, "wall-clock time (s)")):
        ax.axhline(target, linestyle="--", color="grey", label=f"target {target:g}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
    if epoch_size:
        top = by_epoch.secondary_xaxis(
            "top", functions=(lambda e: e * epoch_size, lambda n: n / epoch_size)
        )
        top.set_xlabel("samples seen")
    by_time.legend(fontsize="small")


def recipe_key(config: dict[str, Any]) -> tuple[str, str]:
    """(the recipe's label, its key): the configuration without ``NOT_IN_RECIPE``, the data
    set by its name (the path differs from machine to machine)."""
    kept = {k: v for k, v in config.items() if k not in NOT_IN_RECIPE}
    kept["data"] = config["data"].split(":")[0]
    label = (
        f"{config['model']} on {kept['data']} to {config['target_metric']} "
        f"{config['target_value']:g}, b{config['batch_size']} x{config.get('devices', 1)} "
        f"{config.get('precision', 'fp32')}"
    )
    return label, json.dumps(kept, sort_keys=True)


def relative_times(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """recipe label -> {"baseline": hostname, "systems": [per system: host, times (s) of its
    runs that reached the target, runs, relative (mean / the baseline's mean), ci95,
    seeds (each time / the baseline's mean)]}, for the recipes reached on 2+ systems."""
    recipes: dict[str, dict[str, dict[str, Any]]] = {}
    labels: dict[str, str] = {}
    for run in runs:
        if run["status"] == "running":
            continue
        label, key = recipe_key(run["config"])
        labels.setdefault(key, label)
        system = recipes.setdefault(key, {}).setdefault(
            run["system"]["fingerprint"], {"host": _host(run), "times": [], "runs": 0}
        )
        system["runs"] += 1
        if run["reached"] and run["time_to_target_s"] is not None:
            system["times"].append(run["time_to_target_s"])
    found = {}
    for key, systems in recipes.items():
        reached = [s for s in systems.values() if s["times"]]
        if len(reached) < 2:
            continue
        base = max(reached, key=lambda s: len(s["times"]))  # the first on a tie
        base_mean = sum(base["times"]) / len(base["times"])
        rows = []
        for s in reached:
            mean = sum(s["times"]) / len(s["times"])
            interval = ratio_interval(base["times"], s["times"])
            ci = None
            if interval is not None and interval.bounded:
                ci = (max(0.0, interval.low), interval.high)
            rows.append(
                s
                | {
                    "mean_s": mean,
                    "relative": mean / base_mean,
                    "ci95": ci,
                    "seeds": [t / base_mean for t in s["times"]],
                }
            )
        found[labels[key]] = {"baseline": base["host"], "systems": rows}
    return found


def relative_time_figures(runs: Sequence[dict[str, Any]]) -> list[Figure]:
    """Time to target per system relative to a baseline system, per training recipe."""
    figures = []
    for recipe, found in relative_times(runs).items():
        shown, others = cap.top(found["systems"], lambda s: s["relative"], highest=False)
        capped = cap.note(len(shown), len(others), "the shortest time to target", "not drawn")
        rows = [
            [
                s["host"],
                f"{len(s['times'])} of {s['runs']}",
                f"{s['mean_s']:.1f}",
                f"{s['relative']:.3g}",
                f"{s['ci95'][0]:.3g}–{s['ci95'][1]:.3g}" if s["ci95"] else "-",
            ]
            + (["no" if s in others else "yes"] if others else [])
            for s in shown + others
        ]
        figures.append(
            make_figure(
                slug("time-to-train-relative", recipe),
                f"Relative time to train: {recipe}",
                f"Time to target of {recipe} per system, the mean over its runs that reached "
                f"the target divided by that of the baseline system {found['baseline']} (the "
                f"one with the most such runs); below 1 is faster. Dots: each run (seed) "
                f"over the baseline's mean; bar: 95% interval of the ratio of the means "
                f"(Fieller), none below 2 runs on a side.",
                [s["host"] for s in shown],
                Drawing(_draw_relative, (shown, found["baseline"]), (6.4, 1.4 + 0.4 * len(shown))),
                capped,
                data_table(
                    [
                        "system",
                        "runs reached",
                        "mean time to target (s)",
                        "relative",
                        "95% interval",
                    ]
                    + (["drawn"] if others else []),
                    ["left", "right", "right", "right", "right", "left"],
                    rows,
                ),
            )
        )
    return figures


def _draw_relative(fig: MplFigure, systems: list[dict[str, Any]], baseline: str) -> None:
    ax = fig.add_subplot()
    for i, s in enumerate(systems):
        color = f"C{i}"
        ax.plot([s["relative"]], [i], "D", ms=6, color=color, label=plain(s["host"]))
        if len(s["seeds"]) > 1:
            ax.scatter(s["seeds"], [i] * len(s["seeds"]), s=14, color=color, alpha=0.5, lw=0)
        if s["ci95"]:
            ax.hlines(i, *s["ci95"], color=color, lw=2, alpha=0.6)
    ax.axvline(1, color="black", lw=1, ls="--", label=plain(f"baseline {baseline}"))
    ax.set_yticks(range(len(systems)), [plain(s["host"]) for s in systems])
    ax.set_ylim(len(systems) - 0.5, -0.5)
    ax.set_xlim(left=0)
    ax.set_xlabel("time to target relative to the baseline (lower is faster)")
    ax.grid(axis="y", visible=False)
    legend(ax, loc="lower right")
