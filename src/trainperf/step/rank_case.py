"""One data-parallel (ddp) case on one rank of a torchrun job; rank 0 derives the result.

Metrics added to the single-device ones (all from every rank's own step times):
- ``samples_per_s_*``: global throughput; step i takes the mean over ranks of their step i
  (``synchronized_steps``: the ranks wait for each other every step, so each rank's step i
  spans the same two synchronization points);
- ``step_over_ranks``: "mean", how step i is taken from the ranks' (results stored
  before 2026-11-26 lack it: they took the slowest rank's step i);
- ``ranks``: per rank its host, median step time and own throughput (device batch /
  median step time); ``slowest_rank`` and ``rank_spread`` = (slowest - fastest) / fastest
  median step time, which shows stragglers;
- ``compute_step_s_median``: the median step with gradient synchronization off (DDP
  ``no_sync``; the ranks then run apart, and a synchronized step without communication
  would wait for the slowest, so the slowest rank per step); ``comm_exposed_s`` = median
  step - compute step, the all-reduce time the backward pass did not hide, and
  ``comm_exposed_share`` = comm_exposed_s / median step. Noise can make it slightly
  negative; it is reported as measured.
- fsdp: the step without communication replaces FSDP's collectives by local copies of the
  same bytes (trainperf.parallel.fsdp.local_collectives): first the all-gathers
  (``gather_free_step_s_median``), then the reduce-scatters too (``compute_step_s_median``).
  ``comm_exposed_all_gather_s`` = median step - gather-free step and
  ``comm_exposed_reduce_scatter_s`` = gather-free step - compute step; they add up to
  ``comm_exposed_s``. The swap spoils the weights, so these steps come last.
- memory per rank (``ranks``, and the largest rank's at the top level): parameters,
  gradients and optimizer state counted from this rank's tensors (its shards under fsdp),
  and the activations a step saves for its backward (``mem_activations_bytes``, counted
  from autograd's saved tensors on every device: trainperf.measure.memory).
A non-finite loss on any rank ends the case as ``diverged``, naming the earliest step and
its rank (trainperf.measure.divergence): every rank's losses are gathered with its times.
With real data each rank loads its own DistributedSampler shard; the data wait of step i
is its longest over the ranks (trainperf.step.benchmark's data metrics), and ``ranks`` gives
each rank's ``data_wait_s_median``. The no-sync steps fetch their data too, so the data
wait is in both medians and cancels from ``comm_exposed_s``.
"""

from __future__ import annotations

import socket
import statistics
from collections.abc import Callable
from typing import Any

import torch

from trainperf.case.spec import Case, model_of
from trainperf.measure.divergence import Diverged, LossWatch, earliest
from trainperf.measure.memory import read_peak, reset_peak
from trainperf.measure.policy import parse_policy
from trainperf.measure.probes import CaseProbes, probe_metrics
from trainperf.measure.timed_steps import StepRecord, measure_steps
from trainperf.measure.timer import make_timer
from trainperf.parallel.fsdp import local_collectives
from trainperf.parallel.group import AgreedPolicy, RankGroup, default_threads
from trainperf.step.training_step import TrainingStep, build_training_step, fp32_math_mode

COMPUTE_WARMUP_STEPS = 2
COMPUTE_MIN_STEPS, COMPUTE_MAX_STEPS = 5, 100


def run_distributed_case(case: Case, on_phase: Callable[[str], None]) -> dict[str, Any] | None:
    """Measure this rank's part; rank 0 returns the result, the others None."""
    from trainperf.step.benchmark import (
        after_measuring,
        derive_metrics,
        device_info,
        flag_gpu_instability,
    )

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
        losses = LossWatch()
        record = measure_steps(
            training.step,
            policy,
            make_timer(job.device.type),
            probes=probes,
            data_timer=training.data_timer,
            losses=losses,
        )
        losses.add(training.step())  # one more step, outside the timing: the final loss
        final_loss = float(losses.losses[-1])
        memory = after_measuring(training, case)
        on_phase("measuring compute only")
        compute = measure_without_communication(case, training, len(record.step_s), job.device)
        training.close()
        on_phase("gathering")
        mine = {
            "rank": job.ranks.rank,
            "host": socket.gethostname(),
            "device": device_info(job.device) | fp32_math_mode(job.device),
            "warmup_s": record.warmup_s,
            "step_s": record.step_s,
            "data_wait_s": record.data_wait_s,
            **compute,
            "memory": memory,
            "mem_peak_bytes": read_peak(job.device).mem_peak_bytes,
            "final_loss": final_loss,
            "diverged": losses.first_non_finite(),
            "readings": probes.readings,
            "context_start": probes.start_context,
            "context_end": probes.end_context,
        }
        everyone = job.gather(mine)
        on_phase("done")
        if everyone is None:
            return None
        if (found := earliest([r["diverged"] for r in everyone])) is not None:
            raise Diverged(**found)  # on any rank: the case diverged (there, first)
        job_steps = StepRecord(
            warmup_s=synchronized_steps([r["warmup_s"] for r in everyone]),
            step_s=synchronized_steps([r["step_s"] for r in everyone]),
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
            spec, case, training.size, job_steps, policy.ci_target, info["name"], case.replicas
        )
        metrics |= rank_metrics(everyone, case)
        metrics |= probe_metrics(
            [reading for r in everyone for reading in r["readings"]],
            len(job_steps.step_s) * case.global_batch,
            record.measure_elapsed_s,
            [r["context_start"] for r in everyone],
            [r["context_end"] for r in everyone],
            job.device.type,
        )
        flag_gpu_instability(metrics)
        metrics["final_loss"] = final_loss
        return {"device": info, "metrics": metrics}


def measure_without_communication(
    case: Case, training: TrainingStep, steps: int, device: torch.device
) -> dict[str, list[float]]:
    """Step times without communication (module doc): ``compute_step_s`` (and under fsdp
    ``gather_free_step_s``), as many steps as measured, 5 to 100; empty lists when the
    mode has nothing to take away."""
    if case.mode == "fsdp":
        local_collectives(training.model, all_gather=True, reduce_scatter=False)
        gather_free = time_steps(training.step, steps, device.type)
        local_collectives(training.model, all_gather=False, reduce_scatter=True)
        return {
            "gather_free_step_s": gather_free,
            "compute_step_s": time_steps(training.step, steps, device.type),
        }
    if training.compute_only is None:
        return {"compute_step_s": []}
    return {"compute_step_s": time_steps(training.compute_only, steps, device.type)}


def time_steps(step: Callable[[], object], steps: int, device_type: str) -> list[float]:
    """Times of ``step()`` after a short warm-up (5 to 100 of them)."""
    for _ in range(COMPUTE_WARMUP_STEPS):
        step()
    timer = make_timer(device_type)
    for _ in range(min(max(steps, COMPUTE_MIN_STEPS), COMPUTE_MAX_STEPS)):
        timer.start()
        step()
        timer.stop()
    return timer.durations()


def synchronized_steps(per_rank: list[list[float]]) -> list[float]:
    """Step i of a job whose ranks wait for each other every step (DDP's all-reduce, FSDP's
    collectives): the mean over ranks of their step i.

    Every rank's step i spans the same two synchronization points S_{i-1} and S_i, shifted
    by the work the rank does after each (its optimizer step, its next forward up to the
    first collective): step_r(i) = S_i - S_{i-1} + d_r(i) - d_r(i-1). A late rank (a
    straggler) delays S_i for everyone, so every rank's step i holds it; each rank's steps
    add up to the job's time. The mean over ranks keeps both and averages the shifts out;
    the slowest rank's step would add E[max_r (d_r(i) - d_r(i-1))] every step, a bias that
    grows with the number of ranks (about 0.8·σ_d at 2 ranks, 4.3·σ_d at 512, σ_d the
    shift's noise) and that no step of the job ever takes."""
    return [statistics.fmean(times) for times in zip(*per_rank, strict=True)]


def slowest_per_step(per_rank: list[list[float]]) -> list[float]:
    """Step i of ranks that run apart (no communication): a synchronized step would wait
    for the slowest rank, so it lasts as long as their slowest step i."""
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
                **r["memory"],
            }
        )
        if r.get("data_wait_s") is not None:
            ranks[-1]["data_wait_s_median"] = statistics.median(r["data_wait_s"])
    medians = [r["step_s_median"] for r in ranks]
    step_median = statistics.median(synchronized_steps([r["step_s"] for r in everyone]))
    metrics: dict[str, Any] = {
        "world_size": len(everyone),
        # How step i is taken from the ranks' step i (synchronized_steps); results stored
        # before 2026-11-26 lack the key and took the slowest rank's.
        "step_over_ranks": "mean",
        "ranks": ranks,
        "slowest_rank": max(ranks, key=lambda r: r["step_s_median"])["rank"],
        "rank_spread": (max(medians) - min(medians)) / min(medians),
        "rank_step_s": [r["step_s"] for r in everyone],
        "mem_peak_bytes": max(r["mem_peak_bytes"] for r in everyone),
        "mem_peak_source": "max over ranks",
        # The rank whose state is largest (under fsdp the one with the padded shards).
        **max((r["memory"] for r in everyone), key=lambda m: m["mem_params_bytes"]),
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
    gather_free = [r.get("gather_free_step_s") for r in everyone]
    if all(compute) and all(gather_free):
        # Without all-gathers the reduce-scatters still synchronize the ranks every step.
        gather_free_median = statistics.median(synchronized_steps(gather_free))
        metrics |= {
            "gather_free_step_s_median": gather_free_median,
            "comm_exposed_all_gather_s": step_median - gather_free_median,
            "comm_exposed_reduce_scatter_s": gather_free_median - compute_median,
        }
    return metrics
