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

Throughputs are the means over each result's runs (trainperf.case.result), and the
speedup's 95% interval is Fieller's interval of the ratio of the two means from the
variation between runs (trainperf.measure.hierarchy.ratio_interval); the efficiency's is
that interval over N, both with their low end clamped at 0. With fewer than 2 runs on a
side the intervals are absent with the reason; from 2 they are kept here but too wide to
rest anything on (t = 12.7), and the tables show "n/a (2 runs)" below
``MIN_RUNS_FOR_DECISION`` (3) runs on a side (``baseline_runs`` and ``runs``).

A speed-up above the device count (efficiency above 100%) is not what data parallelism
gives; it comes from a baseline measured slower than it should be (under load) or an
N-device result measured faster. Such a row is ``unstable`` with the reason in
``unstable_reasons``, unless its 95% interval (3 runs a side or more) reaches 100%:
efficiency above 100% by more than its interval, or above 100% without a usable interval.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from trainperf.case.modes import device_count, parallel_mode
from trainperf.case.result import run_estimates
from trainperf.case.spec import label_of
from trainperf.measure.hierarchy import (
    MIN_RUNS_FOR_DECISION,
    MIN_RUNS_FOR_INTERVAL,
    UNBOUNDED,
    ratio_interval,
)

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
        "unstable": False,
        "unstable_reasons": [],
    }
    if baseline is None:
        return row | {
            "speedup": None,
            "efficiency": None,
            "speedup_ci95": None,
            "efficiency_ci95": None,
            "baseline_runs": None,
            "absent_reason": NO_BASELINE,
        }
    base = baseline["metrics"]["samples_per_s_median"]
    speedup, efficiency = speedup_efficiency(throughput, count, base)
    row |= {"speedup": speedup, "efficiency": efficiency, "baseline_samples_per_s": base}
    row["baseline_runs"] = len(run_estimates(baseline))
    interval = ratio_interval(run_estimates(baseline), run_estimates(result))
    if interval is None or not interval.bounded:
        fewest = min(row["baseline_runs"], row["runs"])
        reason = (
            f"{fewest} run on a side: an interval needs {MIN_RUNS_FOR_INTERVAL} on each"
            if interval is None
            else UNBOUNDED
        )
        row |= {"speedup_ci95": None, "efficiency_ci95": None, "interval_absent_reason": reason}
    else:
        row |= {
            "speedup_ci95": [interval.low, interval.high],
            "efficiency_ci95": [interval.low / count, interval.high / count],
        }
    if reason := above_linear(row):
        row |= {"unstable": True, "unstable_reasons": [reason]}
    return row


def above_linear(row: dict[str, Any]) -> str | None:
    """Why the row's speed-up cannot be trusted, when it is above linear (module doc)."""
    efficiency, ci = row["efficiency"], row.get("efficiency_ci95")
    if efficiency is None or efficiency <= 1:
        return None
    usable = ci and min(row["runs"], row["baseline_runs"]) >= MIN_RUNS_FOR_DECISION
    if usable and ci[0] <= 1:
        return None  # above 100%, but within its interval
    within = (
        f" (efficiency {efficiency:.1%}, 95% interval {ci[0]:.1%}-{ci[1]:.1%})" if usable else ""
    )
    return (
        f"speed-up {row['speedup']:.2f}x on {row['devices']} devices: above linear{within}; "
        "the baseline or this result was measured under load (measure both again)"
    )
