"""A profile on every rank of a torchrun job (ddp, fsdp); rank 0 returns the result.

Every rank runs the passes of trainperf.profile.breakdown on its own process (the ranks
step together, since each step communicates), then the step without communication
(trainperf.step.rank_case.measure_without_communication: DDP's ``no_sync``, or FSDP's
collectives replaced by local copies; last, since under FSDP that spoils the weights).
Rank 0 gathers every rank's result:

- ``ranks``: per rank its host and its whole breakdown (operator categories with
  communication as its own, the top ops and kernels, the CUDA API and NCCL calls by call
  with counts, the per-layer table), ``comm_ms`` and ``comm_exposed_ms`` from the
  profiler's timeline (trainperf.profile.overlap: communication while nothing computed),
  ``compute_step_ms`` (median step without communication) and
  ``comm_exposed_by_difference_ms`` = ``step_ms_uninstrumented`` - ``compute_step_ms``:
  all the time communication added to the step, including computation slowed by the
  communication beside it (cores or SMs, memory bandwidth), which the timeline counts as
  overlapped. The two agree where communication has its own engine and differ by that
  contention where it does not (gloo on a CPU's cores).
- ``slowest_rank`` (the largest uninstrumented median step: the rank that sets the pace),
  ``fastest_rank`` and ``rank_spread`` = (slowest - fastest) / fastest;
- the top level: the slowest rank's breakdown, so that every view of a one-process
  profile shows the rank that sets the pace.
"""

from __future__ import annotations

import socket
import statistics
from typing import Any

from trainperf.case.spec import Case, model_of
from trainperf.parallel.group import RankGroup, default_threads
from trainperf.profile.breakdown import breakdown, process_settings
from trainperf.step.rank_case import measure_without_communication
from trainperf.step.training_step import build_training_step

RANK_ONLY = ("rank", "host")


def run_distributed_profile(case: Case, steps: int, warmup: int) -> dict[str, Any] | None:
    """Profile this rank's part of ``case``; rank 0 returns the result, the others None."""
    from trainperf.step.benchmark import device_info

    with RankGroup(case.device, case.timeout_s) as job:
        threads = case.threads
        if threads is None and case.device == "cpu":
            threads = default_threads(job.ranks.local_world_size)
        process_settings(case, threads)
        training = build_training_step(model_of(case), case, job.device, rank=job.ranks.rank)
        metrics = breakdown(training, job.device, steps, warmup)
        without = measure_without_communication(case, training, steps, job.device)
        training.close()
        mine = {
            "rank": job.ranks.rank,
            "host": socket.gethostname(),
            **metrics,
            **communication_by_difference(metrics["step_ms_uninstrumented"], without),
        }
        everyone = job.gather(mine)
        if everyone is None:
            return None
        device = device_info(job.device) | {"backend": job.backend}
        return {"device": device, "metrics": combine_ranks(everyone)}


def communication_by_difference(step_ms: float, without: dict[str, list[float]]) -> dict[str, Any]:
    """``compute_step_ms`` and ``comm_exposed_by_difference_ms`` (module docstring), or
    None for both with the reason when the mode has no step without communication."""
    times = without.get("compute_step_s") or []
    if not times:
        reason = "this parallel mode has no step without communication to time"
        return {
            "compute_step_ms": None,
            "compute_step_ms_absent_reason": reason,
            "comm_exposed_by_difference_ms": None,
            "comm_exposed_by_difference_ms_absent_reason": reason,
        }
    compute_ms = statistics.median(times) * 1e3
    return {"compute_step_ms": compute_ms, "comm_exposed_by_difference_ms": step_ms - compute_ms}


def combine_ranks(everyone: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's metrics from every rank's (module docstring)."""
    if not everyone:
        raise ValueError("no rank's result to combine")
    ordered = sorted(everyone, key=lambda r: r["rank"])
    slowest = max(ordered, key=lambda r: r["step_ms_uninstrumented"])
    fastest = min(ordered, key=lambda r: r["step_ms_uninstrumented"])
    spread = slowest["step_ms_uninstrumented"] / fastest["step_ms_uninstrumented"] - 1
    top = {key: value for key, value in slowest.items() if key not in RANK_ONLY}
    return top | {
        "world_size": len(ordered),
        "slowest_rank": slowest["rank"],
        "fastest_rank": fastest["rank"],
        "rank_spread": spread,
        "ranks": ordered,
    }
