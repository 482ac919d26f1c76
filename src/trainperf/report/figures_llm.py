"""The report's language-model section: one workload trained with replicated weights (DDP)
or sharded ones (FSDP2), with or without activation checkpointing, side by side.

A workload is a system, model, sequence length, batch per device, precision, device type
and device count (every case field but the method's and the measurement policy's); a
method is the parallel mode (auto resolved) with its options and the activation
checkpointing: "ddp", "fsdp", "fsdp + full ckpt". One figure per workload of a language
model (an ok result has ``tokens_per_sample``) with results of at least two methods, the
newest per method, an ok one before a failed one; a failed method is an ``x`` at its place
on each axis and named in the caption, never drawn as if measured. Panels:

(a) tokens/s per device = samples/s × tokens_per_sample / devices, samples/s the mean over
    the runs of each run's median step; its 95% interval is the result's
    ``samples_per_s_ci95`` (Student t over the runs) scaled by the same factor.
(b) memory per rank (the largest rank's): parameters, gradients and optimizer state counted
    from the rank's tensors (its shards under fsdp), stacked, and on CUDA the activations
    one forward pass holds (``trainperf.measure.memory``); the measured peak a marker.
(c) communication per step the compute did not hide (``trainperf.step.rank_case``):
    ddp's all-reduce = median step - median step without gradient sync; fsdp's all-gather
    and reduce-scatter from steps with those collectives replaced by local copies.

Under each figure a table: tokens/s per device, MFU, peak memory and the exposed share of
the step per method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure as MplFigure
from matplotlib.patches import Patch

from trainperf.analysis.scaling import (
    DDP_OPTIONS,
    FSDP_OPTIONS,
    ddp_options,
    device_count,
    setting_key,
)
from trainperf.case.modes import RANK_MODES
from trainperf.case.spec import label_of, parallel_mode
from trainperf.report.figure_kit import (
    Drawing,
    Figure,
    failed_note,
    hostname,
    make_figure,
    mark_failed,
    plain,
    slug,
    unique_keys,
)

# Case fields outside the workload besides scaling.NOT_IN_SETTING (devices, parallel, ...);
# batch_size and scaling re-enter as the batch per device.
NOT_WORKLOAD = (
    "activation_checkpointing",
    *FSDP_OPTIONS,
    *DDP_OPTIONS,
    "batch_size",
    "steps",
    "runs",
)
# What a workload is labelled as: its case without parallelism, method and options.
AS_WORKLOAD = {
    "devices": 1,
    "nodes": 1,
    "parallel": "none",
    "scaling": "weak",
    "activation_checkpointing": "none",
    "reshard_after_forward": True,
    "fsdp_reduce": "fp32",
}
MODES = ("none", *RANK_MODES)  # the order of the methods on the axes
CHECKPOINTING = ("none", "selective", "full")
MEMORY_PARTS = {
    "mem_params_bytes": "parameters",
    "mem_grads_bytes": "gradients",
    "mem_optimizer_bytes": "optimizer state",
    "mem_activations_bytes": "activations",
}
COMM_PARTS = {
    "ddp": {"comm_exposed_s": "all-reduce"},
    "fsdp": {
        "comm_exposed_all_gather_s": "all-gather",
        "comm_exposed_reduce_scatter_s": "reduce-scatter",
    },
}
# Panel (a) is all C0; each memory part and collective a colour of its own.
PART_COLORS = {
    "parameters": "C1",
    "gradients": "C2",
    "optimizer state": "C3",
    "activations": "C4",
    "all-gather": "C5",
    "reduce-scatter": "C6",
    "all-reduce": "C9",
}
# A peak this many times the largest training state (a CPU's process RSS counts the whole
# runtime) is written at the top of the axis, not drawn to a scale that flattens the bars.
PEAK_FAR = 4.0
# Interval tops beyond this multiple of the fastest method are cut at the top of the axis.
CI_CUT = 2.0
SIZE = (12.0, 4.4)


def method_of(case: dict[str, Any]) -> str:
    """'ddp', 'fsdp (no reshard)', 'fsdp + full ckpt': the parallel mode with its options
    and the activation checkpointing."""
    mode, options = parallel_mode(case), ddp_options(case)
    checkpointing = case.get("activation_checkpointing", "none")
    return (
        mode
        + (f" ({options})" if options else "")
        + (f" + {checkpointing} ckpt" if checkpointing != "none" else "")
    )


def _method_order(case: dict[str, Any]) -> tuple:
    mode, checkpointing = parallel_mode(case), case.get("activation_checkpointing", "none")
    return (
        MODES.index(mode) if mode in MODES else len(MODES),
        CHECKPOINTING.index(checkpointing) if checkpointing in CHECKPOINTING else 0,
        method_of(case),
    )


def batch_per_device(case: dict[str, Any]) -> int:
    """Samples per device per micro-batch: the batch size, or its share under strong scaling."""
    if case.get("scaling") == "strong":
        return case["batch_size"] // device_count(case)
    return case["batch_size"]


@dataclass(frozen=True)
class Workload:
    """One figure's data: a language model's workload under several methods."""

    hostname: str
    setting: str  # the case label of the workload without its method, batch per device
    devices: int
    device_type: str
    results: dict[str, dict[str, Any]]  # method -> its newest ok result, else newest failed

    def ok(self) -> dict[str, dict[str, Any]]:
        return {m: r for m, r in self.results.items() if r["status"] == "ok"}

    def failed(self) -> dict[str, dict[str, Any]]:
        return {m: r for m, r in self.results.items() if r["status"] != "ok"}


def workloads(results: Sequence[dict[str, Any]]) -> list[Workload]:
    """Every language-model workload with results of at least two methods (skips ignored)."""
    groups: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in results:  # oldest first: the newest wins, and a failure never hides an ok one
        if r["status"] == "skipped":
            continue
        case = r["case"]
        key = (
            r["system"]["fingerprint"],
            setting_key(case, NOT_WORKLOAD),
            device_count(case),
            batch_per_device(case),
        )
        methods = groups.setdefault(key, {})
        method = method_of(case)
        if r["status"] == "ok" or methods.get(method, r)["status"] != "ok":
            methods[method] = r
    found = []
    for methods in groups.values():
        ok = [r for r in methods.values() if r["status"] == "ok"]
        if len(methods) < 2 or not ok or any("tokens_per_sample" not in r["metrics"] for r in ok):
            continue
        ordered = dict(sorted(methods.items(), key=lambda m: _method_order(m[1]["case"])))
        case = next(iter(ordered.values()))["case"]
        found.append(
            Workload(
                hostname(next(iter(ordered.values()))),
                label_of(case | AS_WORKLOAD | {"batch_size": batch_per_device(case)}),
                device_count(case),
                case.get("device", "cpu"),
                ordered,
            )
        )
    return found


def tokens_per_device(result: dict[str, Any]) -> tuple[float, tuple[float, float] | None]:
    """(tokens/s per device, its 95% interval or None) of an ok result."""
    m = result["metrics"]
    scale = m["tokens_per_sample"] / (m.get("device_count") or device_count(result["case"]))
    interval = m.get("samples_per_s_ci95")
    return m["samples_per_s_median"] * scale, (
        (interval[0] * scale, interval[1] * scale) if interval else None
    )


def memory_parts(metrics: dict[str, Any]) -> dict[str, int]:
    """The measured parts of one rank's memory in bytes, by name, in stacking order."""
    return {
        name: metrics[key] for key, name in MEMORY_PARTS.items() if metrics.get(key) is not None
    }


def comm_parts(result: dict[str, Any]) -> dict[str, float]:
    """The exposed communication per step in s by collective; empty without any."""
    metrics, mode = result["metrics"], parallel_mode(result["case"])
    parts = COMM_PARTS.get(mode, {})
    return {name: metrics[key] for key, name in parts.items() if metrics.get(key) is not None}


def _activations_absent(w: Workload) -> str:
    """Why activations are missing from some bar, or ''."""
    reasons = {
        r["metrics"].get("mem_activations_absent") or "not stored"
        for r in w.ok().values()
        if r["metrics"].get("mem_activations_bytes") is None
    }
    return "; ".join(sorted(reasons))


def _tokens_top(w: Workload) -> float | None:
    """The top of the tokens/s axis where an interval reaches far above every bar, else None."""
    points = [tokens_per_device(r) for r in w.ok().values()]
    top = CI_CUT * max(value for value, _ in points)
    return top if any(ci and ci[1] > top for _, ci in points) else None


@dataclass(frozen=True)
class LlmFigure:
    """A figure of the section and the table shown under it (``markdown.plain_table``'s form)."""

    figure: Figure
    table: dict[str, Any]


def llm_figures(results: Sequence[dict[str, Any]]) -> list[LlmFigure]:
    """Tokens/s, memory and exposed communication per method, per language-model workload."""
    found = []
    for w in workloads(results):
        what = f"{w.setting} on {w.devices} device{'s' * (w.devices > 1)}"
        absent = _activations_absent(w)
        note = failed_note(f"{m}: {r['status']}" for m, r in w.failed().items())
        if absent:
            note += f" Activations not measured on {w.device_type.upper()}: {absent}."
        if _peak_off_scale(w):
            note += " The peaks are far above the training state: written at the top of (b)."
        if _tokens_top(w):
            note += f" Intervals above {CI_CUT:g}× the fastest method are cut at the axis top."
        figure = make_figure(
            slug("llm", w.setting, f"x{w.devices}", w.hostname),
            f"Language models: {what}, {w.hostname}",
            f"Training of {what} under {', '.join(w.results)}. (a) Tokens/s per device: "
            f"samples/s (median step after warm-up, mean over the runs) × tokens per sample / "
            f"devices; dots: the runs; bars: 95% interval of the mean over the runs, scaled "
            f"alike. (b) Memory per rank (the largest): parameters, gradients and optimizer "
            f"state counted from the rank's tensors (its shards under fsdp) and activations "
            f"held after the forward (CUDA only), stacked; marker: the measured peak "
            f"({_peak_sources(w)}). (c) Communication per step the compute did not hide: "
            f"median step - median step without it (ddp: all-reduce, gradient sync off; "
            f"fsdp: all-gather and reduce-scatter, collectives replaced by local copies); "
            f"noise can make a part slightly negative, drawn as measured.",
            [w.hostname],
            Drawing(draw, (w,), SIZE),
            note.strip(),
        )
        found.append((figure, method_table(w)))
    keyed = unique_keys(figure for figure, _ in found)
    return [LlmFigure(figure, table) for figure, (_, table) in zip(keyed, found, strict=True)]


def _peak_sources(w: Workload) -> str:
    sources = {r["metrics"].get("mem_peak_source") for r in w.ok().values()}
    return ", ".join(sorted(s for s in sources if s)) or "source not stored"


def _binary_unit(value: float) -> tuple[int, str]:
    """(factor, name) of the largest binary unit that ``value`` bytes fill at least once."""
    for factor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if value >= factor:
            return factor, unit
    return 1, "B"


def _bytes_text(value: float) -> str:
    factor, unit = _binary_unit(value)
    return f"{value / factor:.3g} {unit}"


def method_table(w: Workload) -> dict[str, Any]:
    """Per method: tokens/s per device (± relative half width of its 95% interval), MFU,
    peak memory and exposed communication share of the step; a failed method its status.
    A value absent is "—", its reason in the caption."""
    rows = []
    absent: dict[tuple[str, str], list[str]] = {}  # (column, reason) -> methods
    for method, r in w.results.items():
        if r["status"] != "ok":
            rows.append([method, f"failed: {r['status']}", "—", "—", "—"])
            continue
        m = r["metrics"]
        value, _ = tokens_per_device(r)
        relative = m.get("ci95_relative")
        mfu, peak, share = m.get("mfu"), m.get("mem_peak_bytes"), m.get("comm_exposed_share")
        for column, reason_key, missing in (
            ("MFU", "mfu_absent_reason", mfu is None),
            ("peak memory", "mem_peak_absent_reason", peak is None),
        ):
            if missing:
                reason = m.get(reason_key) or "not stored"
                absent.setdefault((column, reason), []).append(method)
        rows.append(
            [
                method,
                f"{value:,.0f}" + (f" ±{relative:.0%}" if relative is not None else ""),
                f"{mfu:.1%}" if mfu is not None else "—",
                _bytes_text(peak) if peak is not None else "—",
                f"{share:.1%}" if share is not None else "—",
            ]
        )
    ok = len(w.ok())
    notes = [
        f"{column} —: {reason}" + (f" ({', '.join(methods)})" if len(methods) < ok else "") + "."
        for (column, reason), methods in absent.items()
    ]
    return {
        "title": f"Per method: {w.setting} on {w.devices} devices, {w.hostname}",
        "caption": " ".join(
            [
                "Tokens/s per device ± the half width of its 95% interval relative to it; "
                "exposed comm: the share of the median step."
            ]
            + notes
        ),
        "headers": ["method", "tokens/s per device", "MFU", "peak memory", "exposed comm"],
        "justify": ["left", "right", "right", "right", "right"],
        "rows": rows,
    }


def draw(fig: MplFigure, w: Workload) -> None:
    """Panels (a), (b) and (c) of ``w`` side by side, one legend under them."""
    tokens, memory, comm = fig.subplots(1, 3)
    methods = list(w.results)
    failures = [(methods.index(m), r["status"]) for m, r in w.failed().items()]
    _draw_tokens(tokens, w, methods)
    _draw_memory(memory, w, methods)
    _draw_comm(comm, w, methods)
    legend: dict[str, Any] = {}  # one legend under the panels: label -> handle
    titles = ("(a) throughput", "(b) memory per rank", "(c) exposed communication")
    for ax, title in zip((tokens, memory, comm), titles, strict=True):
        # "fsdp\n+ selective\nckpt": methods side by side without their labels colliding
        labels = [plain(m.replace(" + ", "\n+ ").replace(" ckpt", "\nckpt")) for m in methods]
        ax.set_xticks(range(len(methods)), labels)
        ax.set_xlim(-0.6, len(methods) - 0.4)
        ax.grid(axis="x", visible=False)
        ax.set_title(title, loc="left")
        mark_failed(ax, failures)
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    if _activations_absent(w):
        absent = f"activations not measured on {w.device_type.upper()}"
        legend[absent] = Patch(fc="white", ec="grey", hatch="//")
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=4)


def _draw_tokens(ax: Any, w: Workload, methods: list[str]) -> None:
    for method, r in w.ok().items():
        x = methods.index(method)
        value, interval = tokens_per_device(r)
        ax.bar(x, value, 0.6, color="C0")
        m = r["metrics"]
        scale = value / m["samples_per_s_median"]
        runs = [run * scale for run in m.get("run_samples_per_s") or []]
        if len(runs) > 1:
            ax.scatter([x] * len(runs), runs, s=10, color="black", alpha=0.5, lw=0, zorder=3)
        if interval:
            ax.vlines(x, max(interval[0], 0), interval[1], color="black", lw=1.2, zorder=3)
    ax.set_ylim(0, _tokens_top(w))
    ax.set_ylabel("tokens/s per device")


def _draw_memory(ax: Any, w: Workload, methods: list[str]) -> None:
    stacks = {m: memory_parts(r["metrics"]) for m, r in w.ok().items()}
    peaks = {m: r["metrics"].get("mem_peak_bytes") for m, r in w.ok().items()}
    tallest = _tallest_state(w)
    far = _peak_off_scale(w)
    scale_to = tallest if far else max([tallest] + [p for p in peaks.values() if p])
    factor, unit = _binary_unit(scale_to)
    for method, parts in stacks.items():
        x, bottom = methods.index(method), 0.0
        for name, value in parts.items():
            ax.bar(x, value / factor, 0.6, bottom=bottom, color=PART_COLORS[name], label=name)
            bottom += value / factor
    top = 1.3 * tallest / factor
    label = "measured peak" + (" (off scale, value written)" if far else "")
    for method, peak in peaks.items():
        if not peak:
            continue
        x = methods.index(method)
        if far:  # the peak written at the top of the axis, its value in the label
            ax.plot([x], [top], "^", color="black", clip_on=False, label=label)
            ax.annotate(
                _bytes_text(peak),
                (x, top),
                xytext=(0, -12),
                textcoords="offset points",
                ha="center",
                fontsize=7,
            )
        else:
            ax.plot([x], [peak / factor], "_", ms=22, mew=2.2, color="black", label=label)
    if far:
        ax.set_ylim(0, top)
    ax.set_ylabel(f"memory per rank ({unit})")


def _tallest_state(w: Workload) -> int:
    return max([sum(memory_parts(r["metrics"]).values()) for r in w.ok().values()] + [1])


def _peak_off_scale(w: Workload) -> bool:
    """Whether a peak is so far above the training state (a CPU's process RSS) that it is
    written at the top of the axis instead of drawn to scale."""
    peaks = [r["metrics"].get("mem_peak_bytes") or 0 for r in w.ok().values()]
    return max(peaks) > PEAK_FAR * _tallest_state(w)


def _draw_comm(ax: Any, w: Workload, methods: list[str]) -> None:
    for method, r in w.ok().items():
        x = methods.index(method)
        parts = comm_parts(r)
        if not parts:
            mode = parallel_mode(r["case"])
            ax.annotate(
                "none" if mode == "none" else "not measured",
                (x, 0),
                xytext=(0, 4),
                textcoords="offset points",
                ha="center",
                fontsize=7,
            )
        up = down = 0.0  # negative parts (noise) stack downwards from 0
        for name, seconds in parts.items():
            ms = seconds * 1e3
            bottom = up if ms >= 0 else down
            ax.bar(x, ms, 0.6, bottom=bottom, color=PART_COLORS[name], label=name)
            up, down = (up + ms, down) if ms >= 0 else (up, down + ms)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_ylabel("exposed communication per step (ms)")
