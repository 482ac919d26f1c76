"""The profile of a training step in the terminal: layers, then operator categories; for a
profile of several ranks, first a line per rank (the slowest rank's breakdown follows)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from trainperf.report.cells import escape
from trainperf.report.tables import add_columns


def profile_view(m: dict[str, Any], label: str) -> Group:
    header = Text(
        f"{label}: step {m['step_ms']:.2f} ms instrumented, "
        f"{m['step_ms_uninstrumented']:.2f} ms without hooks "
        f"(instrumentation {m['instrumentation_overhead']:+.1%}); "
        f"forward {m['fwd_ms']:.2f} ms, backward {m['bwd_ms']:.2f} ms, optimizer "
        f"{m['optimizer_ms']:.2f} ms, unattributed {m['unattributed_ms']:.2f} ms; "
        f"data to device {m['data_ms']:.2f} ms per batch; {m['threads']} threads, "
        f"oneDNN {'on' if m['mkldnn_enabled'] else 'off'}"
    )
    layers = Table(title="per layer (ms per step)")
    add_columns(layers, "layer, type, fwd>, bwd>, share>")
    for layer in m["layers"]:
        layers.add_row(
            escape(layer["name"]),
            escape(layer["type"]),
            f"{layer['fwd_ms']:.3f}",
            f"{layer['bwd_ms']:.3f}",
            f"{layer['share']:.1%}",
        )
    layers.add_row(
        "optimizer step",
        "",
        "",
        f"{m['optimizer_ms']:.3f}",
        f"{m['optimizer_ms'] / m['step_ms']:.1%}",
    )
    layers.add_row(
        "unattributed",
        "",
        "",
        f"{m['unattributed_ms']:.3f}",
        f"{m['unattributed_ms'] / m['step_ms']:.1%}",
    )
    categories = Table(title=f"operator categories ({m.get('source', 'torch.profiler')})")
    for name in ("category", "ms per step", "share"):
        categories.add_column(name, justify="left" if name == "category" else "right")
    for c in m["categories"]:
        categories.add_row(c["category"], f"{c['ms']:.3f}", f"{c['share']:.1%}")
    top = Table(title="top operators")
    for name in ("operator", "category", "ms per step", "calls", "share"):
        top.add_column(name, justify="left" if name in ("operator", "category") else "right")
    for op in m["top_ops"]:
        top.add_row(
            escape(op["name"]),
            op["category"],
            f"{op['ms']:.3f}",
            f"{op['calls']:g}",
            f"{op['share']:.1%}",
        )
    parts: list[Any] = [header, *_communication(m), layers, categories, top]
    if m.get("cuda_api"):
        api = Table(title="CUDA API host time")
        for name in ("group", "ms per step", "calls", "share"):
            api.add_column(name, justify="left" if name == "group" else "right")
        for g in m["cuda_api"]:
            api.add_row(g["group"], f"{g['ms']:.3f}", f"{g['calls']:g}", f"{g['share']:.1%}")
        parts.append(api)
    elif m.get("cuda_api_absent_reason"):
        parts.append(Text(f"CUDA API: absent ({m['cuda_api_absent_reason']})"))
    return Group(*parts)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _communication(m: dict[str, Any]) -> list[Any]:
    """The communication line, and the per-rank table of a profile of several ranks."""
    if "comm_ms" not in m:  # a profile stored before communication was measured
        return []
    line = Text(
        f"communication {m['comm_ms']:.2f} ms per step, exposed {m['comm_exposed_ms']:.2f} ms "
        f"({m['comm_exposed_share']:.1%} of the profiled step, from the timeline)"
    )
    if not m.get("ranks"):
        return [line]
    spread = Text(
        f"{m['world_size']} ranks: rank {m['slowest_rank']} is the slowest, "
        f"{m['rank_spread']:+.1%} over rank {m['fastest_rank']}; the breakdown below is its own"
    )
    ranks = Table(title="per rank (ms per step)")
    add_columns(ranks, "rank>, host, step>, no comm>, comm>, exposed>, by difference>")
    for r in m["ranks"]:
        ranks.add_row(
            f"{r['rank']}{' *' if r['rank'] == m['slowest_rank'] else ''}",
            escape(r["host"]),
            _ms(r["step_ms_uninstrumented"]),
            _ms(r.get("compute_step_ms")),
            _ms(r["comm_ms"]),
            _ms(r["comm_exposed_ms"]),
            _ms(r.get("comm_exposed_by_difference_ms")),
        )
    return [line, spread, ranks]
