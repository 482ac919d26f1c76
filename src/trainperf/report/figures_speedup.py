"""The report's speed-up figures of the studies: over devices per framework and parallel
mode, and of reduced precision over fp32.

Speed-up against devices (``speedup_figures``): one figure per workload (the case without
its device count, parallel mode and options, engine, measurement policy and threads; the
batch size stays, per device for weak scaling and global for strong) and scaling mode.
A line is a system, an engine (``figures_frameworks.engine_of``: PyTorch, PyTorch +
torch.compile, JAX) and a parallel mode with its options (ddp, fsdp, mesh, dp), its newest
ok result per device count, the one-device result of that system and engine shared by
every mode. speedup(N) = throughput(N) / throughput(N0), N0 the line's smallest device
count (1 where a one-device result exists, else the smallest measured: multi-node studies
seldom have one), throughputs the means over the runs; its 95% interval is Fieller's
interval of that ratio from the runs (``measure.hierarchy.ratio_interval``), absent below
2 runs a side. Dashed: the ideal speed-up N / N0.

Reduced-precision speed-up (``precision_figures``): one figure per reduced precision
(fp16, bf16), a row per case (the newest ok result in that precision and the newest ok
fp32 result of the same system and case otherwise: model, batch, size, device, devices,
parallel mode, framework and flags), the systems side by side in each row; speed-up =
throughput(precision) / throughput(fp32) with Fieller's interval as above.

Each figure carries its data table; with more than ``cap.SERIES_CAP`` lines or systems the
best are drawn and the others listed in a second, folded table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from matplotlib.figure import Figure as MplFigure

from trainperf.analysis.scaling import NOT_IN_SETTING, PARALLEL_OPTIONS, ddp_options
from trainperf.case.modes import device_count, parallel_mode
from trainperf.case.result import run_estimates
from trainperf.case.spec import label_of
from trainperf.measure.hierarchy import ratio_interval
from trainperf.report import cap
from trainperf.report.figure_kit import (
    Drawing,
    Figure,
    data_table,
    hostname,
    legend,
    log2_ticks,
    make_figure,
    plain,
    slug,
)
from trainperf.report.figures_frameworks import engine_of

# Case fields outside the workload besides scaling.NOT_IN_SETTING (devices, parallel, ...).
NOT_WORKLOAD = ("framework", "compile", "steps", "runs", *PARALLEL_OPTIONS)
# Case fields that may differ between a reduced-precision result and its fp32 baseline.
NOT_IN_PAIR = ("precision", "seed", "timeout_s", "threads", "steps", "runs")
REDUCED = ("fp16", "bf16")
ROWS_PER_FIGURE = 16
CI_TEXT = "bars: 95% interval of the ratio of the mean throughputs over the runs (Fieller)"


@dataclass(frozen=True)
class Point:
    """One device count of a line, or one case of a precision figure: the speed-up of a
    result over its baseline, with its 95% interval (None without one)."""

    devices: int
    samples_per_s: float
    speedup: float
    ci95: tuple[float, float] | None
    label: str = ""  # the case's row label (precision figures)


@dataclass(frozen=True)
class Line:
    """A system's engine and parallel mode over device counts (speed-up figures), or a
    system's speed-ups over cases (precision figures)."""

    system: str  # fingerprint
    host: str
    name: str  # 'PyTorch ddp', 'JAX mesh (bucket 1 MiB)', or the hostname
    points: list[Point] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.name if self.name == self.host else f"{self.host}: {self.name}"


def ratio(base: dict[str, Any], other: dict[str, Any]) -> tuple[float, tuple[float, float] | None]:
    """(throughput(other) / throughput(base), its Fieller 95% interval or None)."""
    value = other["metrics"]["samples_per_s_median"] / base["metrics"]["samples_per_s_median"]
    interval = ratio_interval(run_estimates(base), run_estimates(other))
    if interval is None or not interval.bounded:
        return value, None
    return value, (max(0.0, interval.low), interval.high)


def _ok(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in results if r["status"] == "ok" and r["metrics"].get("samples_per_s_median")]


def speedup_lines(results: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[Line]]:
    """(workload label, scaling) -> the lines with at least two device counts, each point
    its speed-up over the line's smallest device count (module doc); results oldest first."""
    workload_of: dict[str, str] = {}
    singles: dict[tuple[str, str, str], dict[str, Any]] = {}  # (system, workload, engine)
    multi: dict[tuple[str, str, str, str, str], dict[int, dict[str, Any]]] = {}
    for r in _ok(results):  # oldest first: the newest wins
        case, n = r["case"], device_count(r["case"])
        workload = json.dumps(
            {k: v for k, v in case.items() if k not in NOT_IN_SETTING + NOT_WORKLOAD},
            sort_keys=True,
        )
        workload_of.setdefault(workload, label_of(case | {"devices": 1, "nodes": 1} | _PLAIN))
        system, engine = r["system"]["fingerprint"], engine_of(case)
        if n == 1:
            singles[(system, workload, engine)] = r
            continue
        mode = parallel_mode(case) + (f" ({o})" if (o := ddp_options(case)) else "")
        key = (system, workload, engine, mode, case.get("scaling", "weak"))
        multi.setdefault(key, {})[n] = r
    found: dict[tuple[str, str], list[Line]] = {}
    for (system, workload, engine, mode, scaling), points in multi.items():
        one = singles.get((system, workload, engine))
        points = dict(sorted((({1: one} if one else {}) | points).items()))
        if len(points) < 2:
            continue
        smallest = next(iter(points.values()))
        line = Line(system, hostname(smallest), f"{engine} {mode}")
        for n, r in points.items():
            value, ci = ratio(smallest, r)
            line.points.append(Point(n, r["metrics"]["samples_per_s_median"], value, ci))
        found.setdefault((workload_of[workload], scaling), []).append(line)
    return found


_PLAIN = {"parallel": "none", "framework": "pytorch", "compile": False, "scaling": "weak"}


def speedup_figures(results: Sequence[dict[str, Any]]) -> list[Figure]:
    """Speed-up against devices per engine and parallel mode, per workload and scaling."""
    figures = []
    for (workload, scaling), lines in speedup_lines(results).items():
        shown, others = cap.top(lines, lambda ln: ln.points[-1].speedup / ln.points[-1].devices)
        fixed = "global batch" if scaling == "strong" else "batch per device"
        bases = sorted({ln.points[0].devices for ln in shown})
        caption = (
            f"Speed-up of {workload} ({scaling} scaling, {fixed} fixed) against the number of "
            f"devices, per engine and parallel mode: throughput(N) / throughput(N0), N0 the "
            f"line's smallest device count ({', '.join(map(str, bases))}), throughputs the "
            f"samples/s of the median step after warm-up, mean over the runs; {CI_TEXT}, "
            f"none below 2 runs a side. Dashed: ideal linear speed-up N / N0."
        )
        capped = cap.note(
            len(shown),
            len(others),
            "the highest speed-up per device at their largest device count",
            "not drawn",
            "lines",
        )
        figures.append(
            make_figure(
                slug("speedup-vs-devices", workload, "strong" if scaling == "strong" else ""),
                f"Speed-up against devices: {workload}, {scaling} scaling",
                caption,
                [ln.host for ln in shown],
                Drawing(_draw_speedup, (shown,)),
                capped,
                _speedup_table(shown, others),
            )
        )
    return figures


def _ci_text(ci: tuple[float, float] | None) -> str:
    return f"{ci[0]:.2f}–{ci[1]:.2f}" if ci else "-"


def _drawn(line: Line, others: list[Line]) -> list[str]:
    """The table's "drawn" cell of ``line``, only when some lines were not drawn."""
    return (["no" if line in others else "yes"]) if others else []


def _speedup_table(shown: list[Line], others: list[Line]) -> dict[str, Any]:
    return data_table(
        ["line", "devices", "samples/s", "speed-up", "95% interval", "ideal"]
        + (["drawn"] if others else []),
        ["left", "right", "right", "right", "right", "right", "left"],
        (
            [
                ln.label,
                p.devices,
                f"{p.samples_per_s:,.1f}",
                f"{p.speedup:.2f}",
                _ci_text(p.ci95),
                f"{p.devices / ln.points[0].devices:g}",
                *_drawn(ln, others),
            ]
            for ln in shown + others
            for p in ln.points
        ),
    )


def _draw_speedup(fig: MplFigure, lines: list[Line]) -> None:
    ax = fig.add_subplot()
    counts = sorted({p.devices for ln in lines for p in ln.points})
    for i, ln in enumerate(lines):
        color = f"C{i}"
        shift = 2 ** (0.03 * (i - (len(lines) - 1) / 2))  # lines apart, bars not overlapping
        xs = [p.devices * shift for p in ln.points]
        ax.plot(xs, [p.speedup for p in ln.points], "o-", color=color, label=plain(ln.label))
        for x, p in zip(xs, ln.points, strict=True):
            if p.ci95 and math.isfinite(p.ci95[1]):
                ax.vlines(x, *p.ci95, color=color, lw=1.2, alpha=0.7)
    for j, base in enumerate(sorted({ln.points[0].devices for ln in lines})):
        top = counts[-1]
        label = "ideal linear speed-up N / N0" if j == 0 else None
        ax.plot([base, top], [1, top / base], "--", color="black", lw=1, label=label)
    log2_ticks(ax, counts)
    ax.set_xlabel("devices (log2 scale)")
    ax.set_ylabel("speed-up over the line's smallest device count")
    ax.set_ylim(bottom=0)
    legend(ax)


def precision_rows(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[Point]]]:
    """precision -> system -> a point per case with an fp32 baseline: the speed-up of the
    newest ok result in that precision over the newest ok fp32 result of the same system and
    case (``NOT_IN_PAIR`` aside); results oldest first."""
    newest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in _ok(results):
        case = r["case"]
        pair = json.dumps({k: v for k, v in case.items() if k not in NOT_IN_PAIR}, sort_keys=True)
        newest[(r["system"]["fingerprint"], pair, case.get("precision", "fp32"))] = r
    found: dict[str, dict[str, list[Point]]] = {}
    for (system, pair, precision), r in newest.items():
        base = newest.get((system, pair, "fp32"))
        if precision not in REDUCED or base is None:
            continue
        value, ci = ratio(base, r)
        label = label_of(r["case"]).replace(f" {precision} ", " ", 1)
        point = Point(
            device_count(r["case"]), r["metrics"]["samples_per_s_median"], value, ci, label
        )
        found.setdefault(precision, {}).setdefault(system, []).append(point)
    return {p: found[p] for p in REDUCED if p in found}


def precision_figures(results: Sequence[dict[str, Any]]) -> list[Figure]:
    """The speed-up of each reduced precision over fp32, per case, systems side by side."""
    hosts = {r["system"]["fingerprint"]: hostname(r) for r in results}
    figures = []
    for precision, by_system in precision_rows(results).items():
        lines = [Line(s, hosts[s], hosts[s], points) for s, points in by_system.items()]

        def mean_log(line: Line) -> float:
            return sum(math.log(p.speedup) for p in line.points) / len(line.points)

        shown, others = cap.top(lines, mean_log)
        devices = {p.label: p.devices for ln in shown for p in ln.points}
        rows = sorted(devices, key=lambda label: (devices[label], label))
        parts = [rows[i : i + ROWS_PER_FIGURE] for i in range(0, len(rows), ROWS_PER_FIGURE)]
        capped = cap.note(
            len(shown), len(others), "the highest geometric-mean speed-up", "not drawn"
        )
        for n, part in enumerate(parts, start=1):
            drawn = [ln for ln in (_within(line, part) for line in shown) if ln]
            rest = [ln for ln in (_within(line, part) for line in others) if ln]
            of = f" ({n} of {len(parts)})" if len(parts) > 1 else ""
            figures.append(
                make_figure(
                    slug("precision-speedup", precision) + (f"-{n}" if len(parts) > 1 else ""),
                    f"Speed-up of {precision} over fp32{of}",
                    f"Training throughput in {precision} (mixed precision) divided by that of "
                    f"the same case in fp32 on the same system (same model, batch, size, "
                    f"devices and parallel mode), throughputs the samples/s of the median step "
                    f"after warm-up, mean over the runs; {CI_TEXT}. Rows: the cases measured "
                    f"in both precisions (label without the precision); dashed: 1, no gain.",
                    [ln.host for ln in drawn],
                    Drawing(_draw_precision, (drawn, part), (7.2, 1.4 + 0.3 * len(part))),
                    capped,
                    _precision_table(drawn, rest),
                )
            )
    return figures


def _within(line: Line, labels: list[str]) -> Line | None:
    """``line`` with only its points of the cases ``labels``, in their order; None if none."""
    points = sorted(
        (p for p in line.points if p.label in labels), key=lambda p: labels.index(p.label)
    )
    return Line(line.system, line.host, line.name, points) if points else None


def _precision_table(shown: list[Line], others: list[Line]) -> dict[str, Any]:
    return data_table(
        ["case", "system", "samples/s", "speed-up over fp32", "95% interval"]
        + (["drawn"] if others else []),
        ["left", "left", "right", "right", "right", "left"],
        (
            [
                p.label,
                ln.host,
                f"{p.samples_per_s:,.1f}",
                f"{p.speedup:.2f}",
                _ci_text(p.ci95),
                *_drawn(ln, others),
            ]
            for ln in shown + others
            for p in ln.points
        ),
    )


def _draw_precision(fig: MplFigure, lines: list[Line], rows: list[str]) -> None:
    ax = fig.add_subplot()
    step = 0.8 / len(lines)
    for i, ln in enumerate(lines):
        color = f"C{i}"
        ys = [rows.index(p.label) - 0.4 + step * (i + 0.5) for p in ln.points]
        ax.barh(ys, [p.speedup for p in ln.points], step, color=color, label=plain(ln.host))
        for y, p in zip(ys, ln.points, strict=True):
            if p.ci95 and math.isfinite(p.ci95[1]):
                ax.hlines(y, *p.ci95, color="black", lw=1.2)
    ax.axvline(1, color="black", lw=1, ls="--", label="fp32 (no gain)")
    ax.set_yticks(range(len(rows)), [plain(label) for label in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(left=0)
    ax.set_xlabel("speed-up over fp32 (throughput ratio)")
    ax.grid(axis="y", visible=False)
    legend(ax, loc="lower right")
