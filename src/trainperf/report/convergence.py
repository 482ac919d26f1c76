"""Terminal views of time-to-accuracy runs: the evaluations of a run, the olympic mean."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table


def _number(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def run_table(run: dict[str, Any]) -> Table:
    """One row per evaluation: when it happened, how far training was, what it measured."""
    config = run["config"]
    target = f"{config['target_metric']} ≥ {config['target_value']:g}"
    if config["target_metric"] == "eval_loss":
        target = f"eval_loss ≤ {config['target_value']:g}"
    table = Table(
        title=escape(
            f"run {run['id']} ({run['uid'][:8]}): {config['model']} on {config['data']}, "
            f"{config['devices']} device(s), target {target}: {run['status']}"
        )
    )
    for name in ("epoch", "samples", "time s", "lr", "train loss", "eval loss", "top1", "top5"):
        table.add_column(name, justify="right")
    for e in run["evaluations"]:
        table.add_row(
            str(e["epoch"]),
            f"{e['samples_seen']:,}",
            f"{e['time_s']:.1f}",
            _number(e.get("lr"), ".4g"),
            _number(e.get("train_loss"), ".4f"),
            _number(e.get("eval_loss"), ".4f"),
            _number(e.get("top1"), ".4f"),
            _number(e.get("top5"), ".4f"),
        )
    return table


def olympic_line(olympic: dict[str, Any], runs: int) -> str:
    """The MLPerf-style result over the finished runs of this configuration."""
    mean = olympic.get("olympic_mean_s")
    if mean is not None:
        return (
            f"olympic mean time to target over {runs} finished run(s) of this configuration "
            f"(fastest and slowest dropped): {mean:.1f} s"
        )
    reason = olympic.get("olympic_mean_s_absent_reason")
    return f"olympic mean over {runs} finished run(s): absent ({reason})"
