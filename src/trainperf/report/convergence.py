"""Terminal views of time-to-accuracy runs: the evaluations of a run, the olympic mean."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from trainperf.report.cells import escape


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


def time_split_text(split: dict[str, Any]) -> str:
    """Where the wall-clock time to the target (or to the end) went, in two lines that fit
    100 columns (trainperf.convergence.time_split)."""
    until = "to target" if split["until"] == "target" else "to the end"
    where = split["measured_on"]
    if split["startup_from"] != "process launch":
        where += f", start-up from the {split['startup_from']}"
    total = split.get("total_s")
    if total is None:
        head = f"wall clock {until} ({where}): absent ({split.get('total_s_absent_reason')})"
    else:
        head = f"wall clock {until} ({where}): {total:.2f} s"
    parts = []
    for key, name in (
        ("startup_s", "start-up"),
        ("training_s", "training"),
        ("data_loading_s", "data loading"),
        ("evaluation_s", "evaluation"),
    ):
        value = split.get(key)
        parts.append(f"{name} " + ("absent" if value is None else f"{value:.2f} s"))
    return f"{head}\n  = {' + '.join(parts)}"
