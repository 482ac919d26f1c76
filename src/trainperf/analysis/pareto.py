"""The power-performance Pareto front: configurations no other beats on both speed and power.

Per network and input size (the studies drew one front per network), each ok result with a
measured average power is a point (samples/s, W). A point is dominated when another point
of the same network is at least as fast and draws at most as much power, and is strictly
better in one of the two. The front is the set of points no other dominates: the
configurations (system, devices, batch size, precision) worth considering for that
network; every other point is beaten on both counts by one of them.

A point is the mean over its result's runs; it carries the runs themselves
(``run_samples_per_s``, ``run_average_power_w``) and the 95% intervals over them, so a
front whose points overlap within their intervals can be read as such.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainperf.analysis.scaling import device_count

NO_ENERGY = "no average power recorded (no energy reading on that machine)"


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether point a = (throughput, power) dominates b: >= speed, <= power, one strict."""
    return a[0] >= b[0] and a[1] <= b[1] and (a[0] > b[0] or a[1] < b[1])


def front(points: list[tuple[float, float]]) -> list[int]:
    """Indexes of the points that no other point dominates (ties are all kept)."""
    return [
        i
        for i, p in enumerate(points)
        if not any(dominates(q, p) for j, q in enumerate(points) if j != i)
    ]


def _point(result: dict[str, Any]) -> dict[str, Any]:
    case, m = result["case"], result["metrics"]
    return {
        "model": case["model"],
        "size": m.get("image_size") or m.get("seq_len"),
        "hostname": result["system"].get("hostname"),
        "system": result["system"]["fingerprint"],
        "device": case["device"],
        "devices": device_count(case),
        "batch_size": case["batch_size"],
        "precision": case["precision"],
        "samples_per_s": m["samples_per_s_median"],
        "samples_per_s_ci95": m.get("samples_per_s_ci95"),
        "average_power_w": m["average_power_w"],
        "average_power_w_ci95": m.get("average_power_w_ci95"),
        "run_samples_per_s": m.get("run_samples_per_s") or [m["samples_per_s_median"]],
        "run_average_power_w": m.get("run_average_power_w") or [m["average_power_w"]],
        "samples_per_s_per_w": m.get("samples_per_s_per_w"),
        "energy_per_sample_j": m.get("energy_per_sample_j"),
        "result_id": result["id"],
    }


def pareto_fronts(results: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Per network and size: all points, those on the front marked; and what was left out."""
    groups: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    left_out = 0
    for result in results:
        if result["status"] != "ok":
            continue
        if result["metrics"].get("average_power_w") is None:
            left_out += 1
            continue
        point = _point(result)
        groups.setdefault((point["model"], point["size"]), []).append(point)
    fronts = []
    for (model, size), points in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        on_front = set(front([(p["samples_per_s"], p["average_power_w"]) for p in points]))
        for index, point in enumerate(points):
            point["on_front"] = index in on_front
        points.sort(key=lambda p: p["samples_per_s"])
        fronts.append({"model": model, "size": size, "points": points})
    return {
        "fronts": fronts,
        "left_out": left_out,
        "left_out_reason": NO_ENERGY if left_out else None,
    }
