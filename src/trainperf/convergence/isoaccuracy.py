"""Iso-accuracy: do two training runs follow the same quality curve per sample seen?

The characterization studies required that a faster setup (more devices, a larger batch,
lower precision) still learns the same: at equal samples seen, the evaluation metrics of
two runs should agree. Their evaluations seldom fall on the same sample counts (other
batch sizes, other evaluation intervals), so both curves are linearly interpolated
(``numpy.interp``) at every sample count either run evaluated at, inside the range both
cover; never extrapolated.

Per point: top-1 and top-5 (fractions) differ by ``|a - b|``, compared with
``tolerance_top1`` (top-5 uses the same tolerance); the evaluation loss by the symmetric
relative difference ``|a - b| / ((|a| + |b|) / 2)``, compared with ``tolerance_loss_rel``.
A metric is compared when every evaluation of both runs has it. Verdict: ``agree`` when
every point is within tolerance, ``differ`` with the first sample count where a metric
leaves it (where the runs part), ``undecided`` with the reason when there is nothing to
compare (fewer than two evaluations, ranges that do not overlap, no common metric).
"""

from __future__ import annotations

from typing import Any

import numpy as np

METRICS = ("top1", "top5", "eval_loss")
RELATIVE = {"eval_loss"}  # compared by relative difference; the others by absolute


def compare_curves(
    run_a: dict[str, Any],
    run_b: dict[str, Any],
    tolerance_top1: float = 0.02,
    tolerance_loss_rel: float = 0.05,
) -> dict[str, Any]:
    """Compare the evaluation curves of two runs at equal samples seen (see the module doc).

    Each run: ``{"id", "label", "evaluations": [{"samples_seen", "top1", "top5",
    "eval_loss", ...}, ...]}``. Returns a document with both runs' summaries, the
    tolerances, the metrics compared (and why others are not), ``rows`` (per sample count:
    ``<metric>_a``, ``<metric>_b``, the difference named by ``diff_key`` and ``outside``,
    the metrics beyond tolerance there), ``max_diff``, ``verdict``, ``reason`` and, when
    they differ, ``parted_at_samples`` and ``parted_on``.
    """
    for name, value in (
        ("tolerance_top1", tolerance_top1),
        ("tolerance_loss_rel", tolerance_loss_rel),
    ):
        if not value >= 0:  # also refuses NaN
            raise ValueError(f"{name} must be >= 0, got {value}")
    tolerance = {"top1": tolerance_top1, "top5": tolerance_top1, "eval_loss": tolerance_loss_rel}
    curves = [_curve(run_a, "a"), _curve(run_b, "b")]
    not_compared = {}
    for metric in METRICS:
        lacking = [side for side, curve in zip("ab", curves, strict=True) if metric not in curve]
        if lacking:
            not_compared[metric] = f"run {' and '.join(lacking)} lacks it at some evaluation"
    metrics = [m for m in METRICS if m not in not_compared]
    document: dict[str, Any] = {
        "a": _summary(run_a, curves[0]),
        "b": _summary(run_b, curves[1]),
        "tolerance": {diff_key(m): tolerance[m] for m in METRICS},
        "metrics": metrics,
        "not_compared": not_compared,
        "samples_range": None,
        "rows": [],
        "max_diff": {},
        "parted_at_samples": None,
        "parted_on": [],
    }
    reason = _undecidable(curves, metrics)
    if reason:
        return document | {"verdict": "undecided", "reason": reason}
    low, high = _overlap(curves)
    points = np.union1d(curves[0]["samples"], curves[1]["samples"])
    points = points[(points >= low) & (points <= high)]
    rows = [{"samples_seen": int(p), "outside": []} for p in points]
    for m in metrics:
        a, b = (np.interp(points, curve["samples"], curve[m]) for curve in curves)
        diff = _difference(m, a, b)
        document["max_diff"][diff_key(m)] = float(diff.max())
        for i, row in enumerate(rows):
            row |= {f"{m}_a": float(a[i]), f"{m}_b": float(b[i]), diff_key(m): float(diff[i])}
            if diff[i] > tolerance[m]:
                row["outside"].append(m)
    document |= {"samples_range": [int(low), int(high)], "rows": rows}
    first = next((row for row in rows if row["outside"]), None)
    if first is None:
        reason = (
            f"{', '.join(metrics)} within tolerance at all {len(rows)} sample counts "
            f"from {int(low)} to {int(high)}"
        )
        return document | {"verdict": "agree", "reason": reason}
    parts = [f"{m} by {first[diff_key(m)]:.4g} > {tolerance[m]:g}" for m in first["outside"]]
    reason = f"the runs part at {first['samples_seen']} samples seen: {'; '.join(parts)}"
    return document | {
        "verdict": "differ",
        "reason": reason,
        "parted_at_samples": first["samples_seen"],
        "parted_on": first["outside"],
    }


def diff_key(metric: str) -> str:
    """The name of a metric's difference in rows, ``max_diff`` and ``tolerance``."""
    return f"{metric}_rel_diff" if metric in RELATIVE else f"{metric}_diff"


def _curve(run: dict[str, Any], side: str) -> dict[str, Any]:
    """Sample counts (increasing) and, per metric every evaluation has, its values."""
    evaluations = sorted(run.get("evaluations") or [], key=lambda e: e["samples_seen"])
    samples = np.array([e["samples_seen"] for e in evaluations], dtype=float)
    if np.any(np.diff(samples) <= 0):
        raise ValueError(
            f"run {side} ({run.get('label')}): two evaluations at the same samples_seen"
        )
    curve: dict[str, Any] = {"samples": samples}
    for metric in METRICS:
        found = [e.get(metric) for e in evaluations]
        if found and all(v is not None for v in found):
            curve[metric] = np.array(found, dtype=float)
    return curve


def _summary(run: dict[str, Any], curve: dict[str, Any]) -> dict[str, Any]:
    samples = curve["samples"]
    return {
        "id": run.get("id"),
        "label": run.get("label"),
        "evaluations": len(samples),
        "samples_range": [int(samples[0]), int(samples[-1])] if len(samples) else None,
    }


def _overlap(curves: list[dict[str, Any]]) -> tuple[float, float]:
    return (
        max(curve["samples"][0] for curve in curves),
        min(curve["samples"][-1] for curve in curves),
    )


def _undecidable(curves: list[dict[str, Any]], metrics: list[str]) -> str | None:
    for side, curve in zip("ab", curves, strict=True):
        if len(curve["samples"]) < 2:
            return f"run {side} has {len(curve['samples'])} evaluation(s): a curve needs at least 2"
    low, high = _overlap(curves)
    if low >= high:
        ranges = " and ".join(f"{int(c['samples'][0])}-{int(c['samples'][-1])}" for c in curves)
        return f"the runs' samples seen ({ranges}) do not overlap"
    if not metrics:
        return "no metric that both runs report at every evaluation"
    return None


def _difference(metric: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if metric not in RELATIVE:
        return np.abs(a - b)
    scale = (np.abs(a) + np.abs(b)) / 2
    return np.divide(np.abs(a - b), scale, out=np.zeros_like(a), where=scale > 0)
