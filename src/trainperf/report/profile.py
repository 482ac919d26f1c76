"""The profile of a training step in the terminal: layers, then operator categories."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

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
    parts: list[Any] = [header, layers, categories, top]
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
