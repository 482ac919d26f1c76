"""One data-parallel (ddp) case on one rank of a torchrun job; rank 0 derives the result.

Metrics added to the single-device ones (all from every rank's own step times):
- ``samples_per_s_*``: global throughput; step i takes the time of its slowest rank;
- ``ranks``: per rank its host, median step time and own throughput (device batch /
  median step time); ``slowest_rank`` and ``rank_spread`` = (slowest - fastest) / fastest
  median step time, which shows stragglers;
- ``compute_step_s_median``: the median step with gradient synchronization off (DDP
  ``no_sync``; still the slowest rank per step); ``comm_exposed_s`` = median step -
  compute step, the all-reduce time the backward pass did not hide, and
  ``comm_exposed_share`` = comm_exposed_s / median step. Noise can make it slightly
  negative; it is reported as measured.
With real data each rank loads its own DistributedSampler shard; the data wait of step i
is its longest over the ranks (trainperf.benchmark's data metrics), and ``ranks`` gives
each rank's ``data_wait_s_median``. The no-sync steps fetch their data too, so the data
wait is in both medians and cancels from ``comm_exposed_s``.
"""

from __future__ import annotations

import socket
import statistics
from collections.abc import Callable
from typing import Any

import torch

from trainperf.case import Case, model_of
from trainperf.measure.memory import read_peak, reset_peak
from trainperf.measure.policy import parse_policy
from trainperf.measure.probes import CaseProbes, probe_metrics
from trainperf.measure.timed_steps import StepRecord, measure_steps
from trainperf.measure.timer import make_timer
from trainperf.parallel.group import AgreedPolicy, RankGroup, default_threads
from trainperf.training_step import TrainingStep, build_training_step

COMPUTE_WARMUP_STEPS = 2
COMPUTE_MIN_STEPS, COMPUTE_MAX_STEPS = 5, 100


def run_distributed_case(case: Case, on_phase: Callable[[str], None]) -> dict[str, Any] | None:
    """Measure this rank's part; rank 0 returns the result, the others None."""
    from trainperf.benchmark import derive_metrics, device_info, flag_throttling

    on_phase("joining")
    with RankGroup(case.device, case.timeout_s) as job:
        threads = case.threads
        if threads is None and case.device == "cpu":
            threads = default_threads(job.ranks.local_world_size)
        if threads:
            torch.set_num_threads(threads)
        spec = model_of(case)
        policy = AgreedPolicy(parse_policy(case.steps), job)
        reset_peak(job.device)
        on_phase("building")
        training = build_training_step(spec, case, job.device, rank=job.ranks.rank)
        on_phase("measuring")
        probes = CaseProbes(job.device, read_cpu_energy=job.ranks.local_rank == 0)
        record = measure_steps(
            training.step,
            policy,
            make_timer(job.device.type),
            probes=probes,
            data_timer=training.data_timer,
        )
        on_phase("measuring compute only")
        compute_s = measure_compute_only(training, len(record.step_s), job.device.type)
        final_loss = float(training.step().detach())
        training.close()
        on_phase("gathering")
        mine = {
            "rank": job.ranks.rank,
            "host": socket.gethostname(),
            "device": device_info(job.device),
            "warmup_s": record.warmup_s,
            "step_s": record.step_s,
            "data_wait_s": record.data_wait_s,
            "compute_step_s": compute_s,
            "mem_peak_bytes": read_peak(job.device).mem_peak_bytes,
            "final_loss": final_loss,
            "readings": probes.readings,
            "context_start": probes.start_context,
            "context_end": probes.end_context,
        }
        everyone = job.gather(mine)
        on_phase("done")
        if everyone is None:
            return None
        slowest = StepRecord(
            warmup_s=[max(steps) for steps in zip(*(r["warmup_s"] for r in everyone), strict=True)],
            step_s=slowest_per_step([r["step_s"] for r in everyone]),
            warmup_reason=record.warmup_reason,
            stop_reason=record.stop_reason,
            measure_elapsed_s=record.measure_elapsed_s,
            data_wait_s=(
                slowest_per_step([r["data_wait_s"] for r in everyone])
                if record.data_wait_s is not None
                else None
            ),
        )
        info = everyone[0]["device"] | {"backend": job.backend}
        metrics = derive_metrics(
            spec, case, training.size, slowest, policy.ci_target, info["name"], case.replicas
        )
        metrics |= rank_metrics(everyone, case)
        metrics |= probe_metrics(
            [reading for r in everyone for reading in r["readings"]],
            len(slowest.step_s) * case.global_batch,
            record.measure_elapsed_s,
            [r["context_start"] for r in everyone],
            [r["context_end"] for r in everyone],
            job.device.type,
        )
        flag_throttling(metrics)
        metrics["final_loss"] = final_loss
        return {"device": info, "metrics": metrics}


def measure_compute_only(training: TrainingStep, steps: int, device_type: str) -> list[float]:
    """Times of steps with no gradient synchronization (as many as measured, 5 to 100)."""
    if training.compute_only is None:
        return []
    for _ in range(COMPUTE_WARMUP_STEPS):
        training.compute_only()
    timer = make_timer(device_type)
    for _ in range(min(max(steps, COMPUTE_MIN_STEPS), COMPUTE_MAX_STEPS)):
        timer.start()
        training.compute_only()
        timer.stop()
    return timer.durations()


def slowest_per_step(per_rank: list[list[float]]) -> list[float]:
    """Step i of a synchronous job lasts as long as its slowest rank's step i."""
    return [max(times) for times in zip(*per_rank, strict=True)]


def rank_metrics(everyone: list[dict[str, Any]], case: Case) -> dict[str, Any]:
    """Per-rank throughput, stragglers and exposed communication (see the module doc)."""
    samples_per_rank_step = case.device_batch * case.grad_accum
    ranks = []
    for r in everyone:
        median = statistics.median(r["step_s"])
        ranks.append(
            {
                "rank": r["rank"],
                "host": r["host"],
                "step_s_median": median,
                "samples_per_s_median": samples_per_rank_step / median,
                "mem_peak_bytes": r["mem_peak_bytes"],
            }
        )
        if r.get("data_wait_s") is not None:
            ranks[-1]["data_wait_s_median"] = statistics.median(r["data_wait_s"])
    medians = [r["step_s_median"] for r in ranks]
    step_median = statistics.median(slowest_per_step([r["step_s"] for r in everyone]))
    metrics: dict[str, Any] = {
        "world_size": len(everyone),
        "ranks": ranks,
        "slowest_rank": max(ranks, key=lambda r: r["step_s_median"])["rank"],
        "rank_spread": (max(medians) - min(medians)) / min(medians),
        "rank_step_s": [r["step_s"] for r in everyone],
        "mem_peak_bytes": max(r["mem_peak_bytes"] for r in everyone),
        "mem_peak_source": "max over ranks",
    }
    compute = [r["compute_step_s"] for r in everyone]
    if all(compute):
        compute_median = statistics.median(slowest_per_step(compute))
        exposed = step_median - compute_median
        metrics |= {
            "compute_step_s_median": compute_median,
            "compute_step_s": slowest_per_step(compute),
            "comm_exposed_s": exposed,
            "comm_exposed_share": exposed / step_median,
        }
    return metrics
