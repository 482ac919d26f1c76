"""Speedup and scaling efficiency against the measured one-device result of the same setting.

For N devices (devices per node x nodes):
    speedup(N)    = throughput(N) / throughput(1)
    efficiency(N) = throughput(N) / (N x throughput(1))
with throughput the global median samples/s. The baseline is the newest ok one-device
result of the same system and setting: every case field except devices, nodes, parallel
mode, seed, timeout and threads, and (a one-device run being both) the scaling mode.
``batch_size`` stays in the setting: for weak scaling it is the batch per device, for
strong scaling the global batch, so in both cases the baseline has the batch it should.
Without a baseline, speedup and efficiency are absent with the reason, never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from trainperf.case import label_of

# Fields that may differ between the N-device result and its baseline.
NOT_IN_SETTING = ("devices", "nodes", "parallel", "seed", "timeout_s", "threads", "scaling")
NO_BASELINE = "no ok 1-device result of the same setting on this system"


def speedup_efficiency(throughput: float, devices: int, baseline: float) -> tuple[float, float]:
    """(speedup, efficiency) of ``throughput`` on ``devices`` against one device's."""
    speedup = throughput / baseline
    return speedup, speedup / devices


def setting_key(case: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in case.items() if k not in NOT_IN_SETTING}, sort_keys=True)


def device_count(case: dict[str, Any]) -> int:
    return case.get("devices", 1) * case.get("nodes", 1)


def scaling_rows(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per system, setting, scaling mode and device count (newest result wins)."""
    newest: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for result in results:  # oldest first: later ones replace earlier ones
        if result["status"] != "ok":
            continue
        case = result["case"]
        count = device_count(case)
        scaling = case.get("scaling", "weak") if count > 1 else "any"
        system = result["system"]["fingerprint"]
        newest[(system, setting_key(case), scaling, count)] = result

    rows = []
    for (system, key, scaling, count), result in newest.items():
        if count == 1:
            continue
        baseline = newest.get((system, key, "any", 1))
        rows.append(_row(result, count, scaling, baseline))
        if baseline is not None and not any(
            r["devices"] == 1 and r["result_id"] == baseline["id"] and r["scaling"] == scaling
            for r in rows
        ):
            rows.append(_row(baseline, 1, scaling, baseline))
    rows.sort(key=lambda r: (r["model"], r["hostname"], r["setting"], r["scaling"], r["devices"]))
    return rows


def _row(
    result: dict[str, Any], count: int, scaling: str, baseline: dict[str, Any] | None
) -> dict[str, Any]:
    case, metrics = result["case"], result["metrics"]
    throughput = metrics["samples_per_s_median"]
    row: dict[str, Any] = {
        "model": case["model"],
        "hostname": result["system"].get("hostname"),
        "system": result["system"]["fingerprint"],
        "setting": label_of(case | {"devices": 1, "nodes": 1, "parallel": "none"}),
        "scaling": scaling,
        "devices": count,
        "nodes": case.get("nodes", 1),
        "global_batch": metrics.get("global_batch"),
        "samples_per_s": throughput,
        "comm_exposed_share": metrics.get("comm_exposed_share"),
        "rank_spread": metrics.get("rank_spread"),
        "result_id": result["id"],
    }
    if baseline is None:
        return row | {"speedup": None, "efficiency": None, "absent_reason": NO_BASELINE}
    base = baseline["metrics"]["samples_per_s_median"]
    speedup, efficiency = speedup_efficiency(throughput, count, base)
    return row | {"speedup": speedup, "efficiency": efficiency, "baseline_samples_per_s": base}
