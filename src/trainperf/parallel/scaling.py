"""Speedup and scaling efficiency against the measured one-device result of the same setting.

For N devices (devices per node x nodes):
    speedup(N)    = throughput(N) / throughput(1)
    efficiency(N) = throughput(N) / (N x throughput(1))
with throughput the global median samples/s. The baseline is the newest ok one-device
result of the same system and setting: every case field except devices, nodes, parallel
mode, seed, timeout and threads, the DDP and FSDP options (bucket size, gradient
compression, static graph; resharding, reduce dtype: a single device has no collective to
tune), and (a one-device run being both) the scaling mode. Results differing in parallel
mode (ddp, fsdp, dp) or in those options stay apart as rows; activation checkpointing is
part of the setting (the one-device baseline recomputes as the N-device run does).
``batch_size`` stays in the setting: for weak scaling it is the batch per device, for
strong scaling the global batch, so in both cases the baseline has the batch it should.
Without a baseline, speedup and efficiency are absent with the reason, never guessed.

Throughputs are the means over each result's runs (trainperf.case_result), and the
speedup's 95% interval is Fieller's interval of the ratio of the two means from the
variation between runs (trainperf.measure.hierarchy.ratio_interval); the efficiency's is
that interval over N. With fewer than 2 runs on a side the intervals are absent with the
reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from trainperf.case import label_of, parallel_mode
from trainperf.case_result import run_estimates
from trainperf.measure.hierarchy import MIN_RUNS_FOR_INTERVAL, UNBOUNDED, ratio_interval

# Fields that may differ between the N-device result and its baseline.
NOT_IN_SETTING = ("devices", "nodes", "parallel", "seed", "timeout_s", "threads", "scaling")
DDP_OPTIONS = ("bucket_mb", "grad_compression", "static_graph")
FSDP_OPTIONS = ("reshard_after_forward", "fsdp_reduce")
PARALLEL_OPTIONS = DDP_OPTIONS + FSDP_OPTIONS
NO_BASELINE = "no ok 1-device result of the same setting on this system"


def speedup_efficiency(throughput: float, devices: int, baseline: float) -> tuple[float, float]:
    """(speedup, efficiency) of ``throughput`` on ``devices`` against one device's."""
    speedup = throughput / baseline
    return speedup, speedup / devices


def setting_key(case: dict[str, Any], without: tuple[str, ...] = ()) -> str:
    ignored = NOT_IN_SETTING + without
    return json.dumps({k: v for k, v in case.items() if k not in ignored}, sort_keys=True)


def ddp_options(case: dict[str, Any]) -> str:
    """The options of the case's parallel mode away from PyTorch's defaults: 'bucket 1 MiB,
    fp16 gradients, static graph' (DDP), 'no reshard, bf16 reduce' (FSDP), or ''."""
    options = []
    if case.get("bucket_mb"):
        options.append(f"bucket {case['bucket_mb']:g} MiB")
    if case.get("grad_compression", "none") != "none":
        options.append(f"{case['grad_compression']} gradients")
    if case.get("static_graph"):
        options.append("static graph")
    if case.get("reshard_after_forward") is False:
        options.append("no reshard")
    if case.get("fsdp_reduce", "fp32") != "fp32":
        options.append(f"{case['fsdp_reduce']} reduce")
    return ", ".join(options)


def device_count(case: dict[str, Any]) -> int:
    return case.get("devices", 1) * case.get("nodes", 1)


def scaling_rows(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per system, setting, scaling mode and device count (newest result wins)."""
    newest: dict[tuple[str, str, str, str, int], dict[str, Any]] = {}
    baselines: dict[tuple[str, str], dict[str, Any]] = {}
    for result in results:  # oldest first: later ones replace earlier ones
        if result["status"] != "ok":
            continue
        case = result["case"]
        count = device_count(case)
        scaling = case.get("scaling", "weak") if count > 1 else "any"
        system = result["system"]["fingerprint"]
        mode = parallel_mode(case)
        newest[(system, setting_key(case), mode, scaling, count)] = result
        if count == 1:
            baselines[(system, setting_key(case, PARALLEL_OPTIONS))] = result

    rows = []
    emitted_baselines = set()
    for (system, _, _, scaling, count), result in newest.items():
        if count == 1:
            continue
        baseline = baselines.get((system, setting_key(result["case"], PARALLEL_OPTIONS)))
        rows.append(_row(result, count, scaling, baseline))
        if baseline is not None and (baseline["id"], scaling) not in emitted_baselines:
            emitted_baselines.add((baseline["id"], scaling))
            rows.append(_row(baseline, 1, scaling, baseline))
    rows.sort(
        key=lambda r: (
            r["model"],
            r["hostname"],
            r["setting"],
            r["scaling"],
            r["devices"] > 1,
            r["parallel"],
            r["devices"],
        )
    )
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
        "parallel": parallel_mode(case),
        "ddp_options": ddp_options(case),
        "scaling": scaling,
        "devices": count,
        "nodes": case.get("nodes", 1),
        "global_batch": metrics.get("global_batch"),
        "samples_per_s": throughput,
        "samples_per_s_ci95": metrics.get("samples_per_s_ci95"),
        "runs": len(run_estimates(result)),
        "comm_exposed_share": metrics.get("comm_exposed_share"),
        "rank_spread": metrics.get("rank_spread"),
        "result_id": result["id"],
    }
    if baseline is None:
        return row | {
            "speedup": None,
            "efficiency": None,
            "speedup_ci95": None,
            "efficiency_ci95": None,
            "absent_reason": NO_BASELINE,
        }
    base = baseline["metrics"]["samples_per_s_median"]
    speedup, efficiency = speedup_efficiency(throughput, count, base)
    row |= {"speedup": speedup, "efficiency": efficiency, "baseline_samples_per_s": base}
    interval = ratio_interval(run_estimates(baseline), run_estimates(result))
    if interval is None or not interval.bounded:
        fewest = min(len(run_estimates(baseline)), len(run_estimates(result)))
        reason = (
            f"{fewest} run on a side: an interval needs {MIN_RUNS_FOR_INTERVAL} on each"
            if interval is None
            else UNBOUNDED
        )
        return row | {
            "speedup_ci95": None,
            "efficiency_ci95": None,
            "interval_absent_reason": reason,
        }
    return row | {
        "speedup_ci95": [interval.low, interval.high],
        "efficiency_ci95": [interval.low / count, interval.high / count],
    }
