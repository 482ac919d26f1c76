"""The report's framework comparison: one workload trained by PyTorch, by PyTorch with
torch.compile and by JAX, on one device and on several.

One figure per system and workload that has results of at least two engines (an engine:
the framework, and torch.compile or not). The workload is the case without its engine,
device count and parallel mode (PyTorch: DDP, one process per device; JAX: one process,
the batch sharded over a mesh), measurement policy (steps, runs, seed, timeout) and
threads. DDP options split an engine's line, as they split a system's in the scaling
figures; weak and strong scaling are figures of their own, sharing the 1-device results.

Left: throughput against devices, one line per engine, its runs and 95% interval drawn as
in the other figures. Right: each engine's speed-up over its own 1-device result,
speedup(N) = throughput(N) / throughput(1), with Fieller's 95% interval, both taken from
``trainperf.analysis.scaling`` (its setting keeps framework and compile, so each engine is
its own baseline), and the ideal speed-up N. A failed case is an ``x`` on the axis at its
device count, named in the caption.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from matplotlib.figure import Figure as MplFigure

from trainperf.analysis.scaling import (
    DDP_OPTIONS,
    ddp_options,
    device_count,
    scaling_rows,
    setting_key,
)
from trainperf.case.spec import label_of, parallel_mode
from trainperf.report.figure_kit import (
    CI_NOTE,
    Drawing,
    Figure,
    ci_bar,
    failed_note,
    hostname,
    log2_ticks,
    make_figure,
    mark_failed,
    plain,
    slim,
    slug,
)

ENGINES = ("PyTorch", "PyTorch + torch.compile", "JAX")  # in the order of the legends
# Case fields outside the workload besides scaling.NOT_IN_SETTING (devices, parallel, ...).
NOT_WORKLOAD = ("framework", "compile", "steps", "runs", *DDP_OPTIONS)
SIZE = (9.6, 4.0)
# What a workload is labelled as: its 1-device PyTorch case.
AS_WORKLOAD = {
    "devices": 1,
    "nodes": 1,
    "parallel": "none",
    "framework": "pytorch",
    "compile": False,
}


def engine_of(case: dict[str, Any]) -> str:
    """'PyTorch', 'PyTorch + torch.compile' or 'JAX' (jax.jit always compiles)."""
    if case.get("framework", "pytorch") == "jax":
        return "JAX"
    return "PyTorch + torch.compile" if case.get("compile") else "PyTorch"


@dataclass(frozen=True)
class EngineSeries:
    """One engine's line: its newest result per device count and the speed-ups."""

    engine: str
    ddp_options: str
    results: dict[int, dict[str, Any]]  # devices -> newest ok result, else newest failed one
    speedups: dict[int, dict[str, Any]]  # devices > 1 of the ok results -> scaling_rows row

    @property
    def label(self) -> str:
        return self.engine + (f" ({self.ddp_options})" if self.ddp_options else "")

    def ok(self) -> dict[int, dict[str, Any]]:
        return {n: r for n, r in self.results.items() if r["status"] == "ok"}

    def failed(self) -> dict[int, dict[str, Any]]:
        return {n: r for n, r in self.results.items() if r["status"] != "ok"}


@dataclass(frozen=True)
class Comparison:
    """The data of one figure: a workload on one system under several engines."""

    hostname: str
    setting: str  # the workload's label (AS_WORKLOAD)
    scaling: str  # weak, strong, or any where no result has more than one device
    series: list[EngineSeries]


def comparisons(
    results: Sequence[dict[str, Any]], scaled: Sequence[dict[str, Any]] | None = None
) -> list[Comparison]:
    """Every system and workload with results of at least two engines (skips ignored);
    ``scaled``: ``scaling_rows(results)`` when the caller has them already."""
    scaled = scaling_rows(results) if scaled is None else scaled
    rows = {row["result_id"]: row for row in scaled if row["devices"] > 1}
    found = []
    for engines in _by_workload(results).values():
        ordered = sorted(engines.items(), key=lambda e: (ENGINES.index(e[0][0]), e[0][1]))
        scalings = sorted({s for _, points in ordered for _, s in points} - {"any"}) or ["any"]
        for scaling in scalings:
            series = []
            for (engine, ddp), points in ordered:
                mine = {n: r for (n, s), r in sorted(points.items()) if s in (scaling, "any")}
                speedups = {
                    n: rows[r["id"]] for n, r in mine.items() if n > 1 and r["status"] == "ok"
                }
                if mine:
                    series.append(EngineSeries(engine, ddp, mine, speedups))
            if len({s.engine for s in series}) > 1:
                first = next(iter(series[0].results.values()))
                setting = label_of(first["case"] | AS_WORKLOAD)
                found.append(Comparison(hostname(first), setting, scaling, series))
    return found


def _by_workload(results: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict]:
    """(system, workload) -> (engine, DDP options) -> (devices, scaling or 'any' for one
    device) -> the newest result there: ok if there is one."""
    groups: dict[tuple[str, str], dict] = {}
    for r in results:  # oldest first: the newest wins, and a failure never hides an ok one
        if r["status"] == "skipped":
            continue
        case, n = r["case"], device_count(r["case"])
        engines = groups.setdefault(
            (r["system"]["fingerprint"], setting_key(case, NOT_WORKLOAD)), {}
        )
        points = engines.setdefault((engine_of(case), ddp_options(case)), {})
        point = (n, case.get("scaling", "weak") if n > 1 else "any")
        if r["status"] == "ok" or points.get(point, r)["status"] != "ok":
            points[point] = r
    return groups


def framework_figures(
    results: Sequence[dict[str, Any]], scaled: Sequence[dict[str, Any]] | None = None
) -> list[Figure]:
    """Throughput and speed-up against devices per engine, per system and workload
    (``scaled``: ``scaling_rows(results)`` when the caller has them already)."""
    figures = []
    for c in comparisons(results, scaled):
        engines = [s.label for s in c.series]
        several = [(s, n, r) for s in c.series for n, r in s.results.items() if n > 1]
        modes = dict.fromkeys(f"{s.label} {parallel_mode(r['case'])}" for s, _, r in several)
        how = {
            "weak": "Weak scaling (batch per device fixed). ",
            "strong": "Strong scaling (global batch fixed). ",
        }.get(c.scaling, "")
        how += f"Parallel mode: {', '.join(modes)}." if modes else ""
        notes = [
            f"{s.label} at {n} device{'s' * (n > 1)}: {r['status']}"
            for s in c.series
            for n, r in s.failed().items()
        ]
        note = failed_note(notes)
        absent = [
            f"{s.label} at {n} devices ({row['absent_reason']})"
            for s in c.series
            for n, row in s.speedups.items()
            if row["speedup"] is None
        ]
        note += f" No speed-up for {'; '.join(absent)}." if absent else ""
        strong = "strong" if c.scaling == "strong" else ""
        figures.append(
            make_figure(
                slug("framework", c.setting, c.hostname, strong),
                f"Frameworks compared: {c.setting} on {c.hostname}"
                + (f", {c.scaling} scaling" if c.scaling != "any" else ""),
                f"Training of {c.setting} under {', '.join(engines)}. Left: throughput "
                f"(samples/s from the median step after warm-up, mean over the runs; {CI_NOTE}) "
                f"against the number of devices. Right: each engine's speed-up over its own "
                f"1-device result, throughput(N) / throughput(1), its bar the 95% interval "
                f"(Fieller); dashed: ideal linear speed-up. {how}",
                [c.hostname],
                Drawing(_draw, (_slimmed(c),), SIZE),
                note.strip(),
            )
        )
    return figures


def _slimmed(c: Comparison) -> Comparison:
    """``c`` with only what the figure draws of each result (``figure_kit.slim``)."""
    series = [replace(s, results={n: slim(r) for n, r in s.results.items()}) for s in c.series]
    return replace(c, series=series)


def _draw(fig: MplFigure, c: Comparison) -> None:
    left, right = fig.subplots(1, 2)
    counts = [n for s in c.series for n in s.results]
    failures = sorted(
        (n, f"{s.label}: {r['status']}") for s in c.series for n, r in s.failed().items()
    )
    for i, s in enumerate(c.series):
        color = f"C{i}"
        # Engines side by side around each device count, so that their bars do not overlap.
        shift = 2 ** (0.04 * (i - (len(c.series) - 1) / 2))
        ok = s.ok()
        xs = [n * shift for n in ok]
        ys = [r["metrics"]["samples_per_s_median"] for r in ok.values()]
        left.plot(xs, ys, "o-", color=color, label=plain(s.label))
        for x, r in zip(xs, ok.values(), strict=True):
            ci_bar(left, x, r, color)
        measured = [(n, row) for n, row in s.speedups.items() if row["speedup"] is not None]
        if not measured:
            continue
        right.plot(
            [shift] + [n * shift for n, _ in measured],
            [1] + [row["speedup"] for _, row in measured],
            "o-",
            color=color,
        )
        for n, row in measured:
            low, high = row["speedup_ci95"] or (0, math.inf)
            if low > 0 and math.isfinite(high):
                right.vlines(n * shift, low, high, color=color, lw=1.2, alpha=0.7)
    top = max(counts)
    right.plot([1, top], [1, top], "--", color="black", lw=1, label="ideal linear speed-up")
    for ax in (left, right):
        log2_ticks(ax, counts + [1])
        ax.set_xlabel("devices (log2 scale)")
        ax.set_ylim(bottom=0)
        mark_failed(ax, failures)
        ax.legend()
    left.set_ylabel("throughput (samples/s)")
    right.set_ylabel("speed-up over the engine's 1 device")
