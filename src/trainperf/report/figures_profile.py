"""The report's figures of profiles over device counts (``trainperf profile --devices N``):
where multi-device time goes as devices are added.

From the stored ``profile`` runs, the newest ok one per system, workload (the profiled
case without its device count, nodes and measurement settings) and device count
(devices x nodes); a workload and system profiled at two or more counts gets a figure:

- **Host API time by call against device count** (CUDA profiles): one stacked bar per
  device count, the host's time per step in each group of calls (kernel launch, memcpy,
  synchronize, malloc/free, NCCL calls, other; trainperf.profile.categories), of the
  slowest rank (the one whose breakdown the profile keeps at its top level). The table
  gives each group's time and calls per step, and the ranks' spread of step time.
- **Communication share of the step against device count**, one line per workload on a
  system: the communication on the profiler's timeline (``comm_ms``) and its exposed
  part (``comm_exposed_ms``: while nothing computed; dashed) over the profiled step time,
  of the slowest rank. The table adds the step-difference estimate
  (``comm_exposed_by_difference_ms``, trainperf.profile.ranks) beside the timeline's.

A profile stored before communication was measured has no ``comm_ms``; it is left out of
the second figure. A one-process profile has no communication: it is the curve's start.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure as MplFigure

from trainperf.case.modes import device_count, parallel_mode
from trainperf.case.spec import label_of
from trainperf.report.figure_kit import Drawing, Figure, data_table, make_figure, plain, slug

# What does not make a profile another workload (and the parallel mode, which makes it
# another series of the same workload).
NOT_IN_WORKLOAD = ("devices", "nodes", "parallel", "seed", "threads", "timeout_s", "steps", "runs")
API_GROUPS = ("kernel launch", "memcpy", "synchronize", "malloc/free", "NCCL calls", "other")


def by_device_count(
    runs: Sequence[dict[str, Any]],
) -> dict[tuple[str, str], dict[int, dict[str, Any]]]:
    """(system, series label) -> device count -> the newest ok profile run, for the series
    with two or more device counts (micro runs oldest first). A series is one workload in
    one parallel mode (ddp, fsdp); the workload's one-process profile starts every mode's."""
    single: dict[tuple[str, str], dict[str, Any]] = {}
    several: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = {}
    labels: dict[str, str] = {}
    for run in runs:
        if run["kind"] != "profile" or run["status"] != "ok":
            continue
        case = run["params"]["case"]
        workload = json.dumps(
            {k: v for k, v in case.items() if k not in NOT_IN_WORKLOAD}, sort_keys=True
        )
        labels[workload] = label_of({**case, "devices": 1, "nodes": 1, "parallel": "auto"})
        if device_count(case) == 1:
            single[(run["system"], workload)] = run  # a later run replaces an earlier one
        else:
            mode = parallel_mode(case)
            several.setdefault((run["system"], workload, mode), {})[device_count(case)] = run
    series = {}
    for (system, workload, mode), counts in several.items():
        start = single.get((system, workload))
        counts = ({1: start} if start else {}) | counts
        if len(counts) >= 2:
            series[(system, f"{labels[workload]} {mode}")] = dict(sorted(counts.items()))
    return series


def _spread(metrics: dict[str, Any]) -> str:
    spread = metrics.get("rank_spread")
    return "-" if spread is None else f"{spread:+.1%} (rank {metrics['slowest_rank']} slowest)"


def host_api_figures(runs: Sequence[dict[str, Any]], hostnames: Mapping[str, str]) -> list[Figure]:
    """One stacked-bar figure per system and workload with CUDA profiles at 2+ counts."""
    figures = []
    for (system, label), counts in by_device_count(runs).items():
        with_api = {n: r["metrics"] for n, r in counts.items() if r["metrics"].get("cuda_api")}
        if len(with_api) < 2:
            continue
        bars = {
            n: {g["group"]: (g["ms"], g["calls"]) for g in m["cuda_api"]}
            for n, m in with_api.items()
        }
        host = hostnames.get(system, system)
        rows = [
            [n, group, f"{ms:.3f}", f"{calls:g}", _spread(with_api[n])]
            for n in bars
            for group in API_GROUPS
            for ms, calls in [bars[n].get(group, (0.0, 0.0))]
        ]
        figures.append(
            make_figure(
                slug("host-api-vs-devices", label, host),
                f"Host API time by call against devices: {label} on {host}",
                "The host's time per step in the CUDA API calls and NCCL's collective calls "
                "(torch.profiler's self CPU time of each call), by group, at each device "
                "count, of the slowest rank.",
                [host],
                Drawing(
                    _draw_host_api,
                    ({str(n): {g: v[0] for g, v in groups.items()} for n, groups in bars.items()},),
                    (6.4, 3.4),
                ),
                table=data_table(
                    ["devices", "group", "ms per step", "calls per step", "rank spread"],
                    ["right", "left", "right", "right", "left"],
                    rows,
                ),
            )
        )
    return figures


def _draw_host_api(fig: MplFigure, bars: dict[str, dict[str, float]]) -> None:
    ax = fig.add_subplot()
    positions = range(len(bars))
    bottom = [0.0] * len(bars)
    for i, group in enumerate(API_GROUPS):
        heights = [groups.get(group, 0.0) for groups in bars.values()]
        ax.bar(positions, heights, 0.6, bottom=bottom, color=f"C{i}", label=group)
        bottom = [a + b for a, b in zip(bottom, heights, strict=True)]
    ax.set_xticks(list(positions), [plain(n) for n in bars])
    ax.set_xlabel("devices")
    ax.set_ylabel("host time per step (ms)")
    ax.legend(fontsize="small", ncols=2)


def communication_figures(
    runs: Sequence[dict[str, Any]], hostnames: Mapping[str, str]
) -> list[Figure]:
    """One figure per system: communication share against device count per workload."""
    per_system: dict[str, list[tuple[str, dict[int, dict[str, Any]]]]] = {}
    for (system, label), counts in by_device_count(runs).items():
        measured = {n: r["metrics"] for n, r in counts.items() if "comm_ms" in r["metrics"]}
        if len(measured) >= 2:
            per_system.setdefault(system, []).append((label, measured))
    figures = []
    for system, workloads in per_system.items():
        host = hostnames.get(system, system)
        lines = []
        rows = []
        for label, measured in workloads:
            points = []
            for n, m in measured.items():
                step = m["profiled_step_ms"]
                points.append((n, m["comm_ms"] / step, m["comm_exposed_ms"] / step))
                by_difference = m.get("comm_exposed_by_difference_ms")
                rows.append(
                    [
                        label,
                        n,
                        f"{step:.3g}",
                        f"{m['comm_ms']:.3g}",
                        f"{m['comm_ms'] / step:.1%}",
                        f"{m['comm_exposed_ms']:.3g}",
                        f"{m['comm_exposed_ms'] / step:.1%}",
                        "-" if by_difference is None else f"{by_difference:.3g}",
                        _spread(m),
                    ]
                )
            lines.append((label, points))
        figures.append(
            make_figure(
                slug("comm-share-vs-devices", host),
                f"Communication share of the step against devices on {host}",
                "Communication on the profiler's timeline (NCCL kernels on a GPU; gloo's "
                "collectives on a CPU) as a share of the profiled step time, solid; dashed: "
                "its exposed part, while nothing computed; of the slowest rank. The table "
                "adds the exposed time estimated by the step without communication.",
                [host],
                Drawing(_draw_shares, (lines,), (6.4, 3.4)),
                table=data_table(
                    [
                        "workload",
                        "devices",
                        "step ms",
                        "comm ms",
                        "comm share",
                        "exposed ms",
                        "exposed share",
                        "exposed by difference ms",
                        "rank spread",
                    ],
                    ["left"] + ["right"] * 7 + ["left"],
                    rows,
                ),
            )
        )
    return figures


def _draw_shares(fig: MplFigure, lines: list[tuple[str, list[tuple[int, float, float]]]]) -> None:
    ax = fig.add_subplot()
    counts = sorted({n for _, points in lines for n, _, _ in points})
    for i, (label, points) in enumerate(lines):
        xs = [n for n, _, _ in points]
        ax.plot(xs, [100 * c for _, c, _ in points], "o-", color=f"C{i}", label=plain(label))
        ax.plot(xs, [100 * e for _, _, e in points], "s--", color=f"C{i}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(n) for n in counts])
    ax.set_xlabel("devices")
    ax.set_ylabel("share of the step (%)")
    ax.set_ylim(bottom=0)
    # What the two line styles mean, beside the workloads' colours.
    ax.plot([], [], "o-", color="0.4", label="communication")
    ax.plot([], [], "s--", color="0.4", label="exposed (nothing computing)")
    ax.legend(fontsize="small")


def profile_scaling_figures(
    runs: Sequence[dict[str, Any]], hostnames: Mapping[str, str]
) -> list[Figure]:
    """Both figures of the module docstring."""
    return host_api_figures(runs, hostnames) + communication_figures(runs, hostnames)
