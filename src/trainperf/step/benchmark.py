"""One case, measured in this process: build, warm up, measure, derive the metrics.

The worker calls ``run_case`` in a fresh child process; benchmarks/ and notebooks may call
it directly. It raises on failure; the worker turns exceptions into result statuses.

A ddp case runs under torchrun and is measured on every rank by
trainperf.step.rank_case, which derives its metrics with the functions of this module
(the worker chooses between the two). The global throughput of step i is the global batch
over the job's step i: the mean over ranks of their step i, which all span the same two
synchronization points (rank_case.synchronized_steps says why not the slowest rank's).
Never rank 0's times multiplied by N.

A case with real data (``data`` not synthetic, see trainperf.step.training_step) splits every
measured step into the time it waited for its data and the rest. Metrics (``global_batch`` B):
- ``data_wait_s``: per step, the data wait (all micro-batches); ``data_wait_s_median``;
- ``compute_only_s_median``: median over steps of (step time - its data wait): forward,
  backward and optimizer step with the data already there;
- ``data_wait_share``: total data wait / total step time over the measured steps;
- ``samples_per_s_median`` stays the throughput of whole steps (data + compute), which
  is what training on this input pipeline achieves; ``compute_samples_per_s`` = B /
  compute_only_s_median is what it would achieve if the data were always ready;
- ``input_bound``: data_wait_share > INPUT_BOUND_SHARE (10%): the input pipeline, not
  the device, sets the pace; more loader workers (or a faster pipeline) would help.
Under ddp, the data wait of a step is its longest over the ranks (the step cannot end
before its last rank has its batch) and the step time the job's, as above.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable
from typing import Any

import torch

from trainperf import models
from trainperf.analysis.peaks import peak_flops
from trainperf.case.result import INPUT_BOUND_SHARE
from trainperf.case.spec import Case, model_of
from trainperf.measure import clock_events
from trainperf.measure.divergence import LossWatch
from trainperf.measure.memory import memory_split, read_peak, reset_peak
from trainperf.measure.policy import parse_policy
from trainperf.measure.probes import CaseProbes, probe_metrics
from trainperf.measure.stats import instability_reasons, summarize
from trainperf.measure.timed_steps import StepRecord, measure_steps
from trainperf.measure.timer import make_timer
from trainperf.models.attention import AttentionWatch
from trainperf.models.blocks import blocks_of, kept_op_packets
from trainperf.models.flops import count_flops
from trainperf.parallel.wrap import dp_device_ids
from trainperf.step.training_step import build_training_step, fp32_math_mode
from trainperf.system.inventory import cpu_name


def device_info(device: torch.device) -> dict[str, Any]:
    """What the case ran on: device name, compute capability, torch threads."""
    info: dict[str, Any] = {
        "type": device.type,
        "threads": torch.get_num_threads(),
        "mkldnn_enabled": torch.backends.mkldnn.enabled,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info |= {
            "name": props.name,
            "capability": [props.major, props.minor],
            "memory_bytes": props.total_memory,
            "multiprocessors": props.multi_processor_count,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
        }
    else:
        info["name"] = cpu_name()
    return info


def run_case(case: Case, on_phase: Callable[[str], None] = lambda phase: None) -> dict[str, Any]:
    """Measure ``case`` and return ``{"device": ..., "metrics": ...}``.

    Under torchrun, ranks other than 0 return None. ``on_phase`` hears where the case is
    ("building", "measuring", ...), which names the stuck rank when a distributed case hangs.
    """
    if case.launch == "torchrun":
        raise ValueError(
            f"a {case.mode} case runs on every rank of a torchrun job: measure it with "
            "`trainperf run`, or call trainperf.step.rank_case.run_distributed_case "
            "on each rank"
        )
    if case.threads:
        torch.set_num_threads(case.threads)
    torch.backends.mkldnn.enabled = case.mkldnn
    spec = model_of(case)
    device = torch.device(case.device)
    policy = parse_policy(case.steps)

    # DataParallel: one process on several GPUs, every one metered and read.
    indices = dp_device_ids(case) if case.mode == "dp" else None
    reset_peak(device, indices)
    on_phase("building")
    training = build_training_step(spec, case, device)
    on_phase("measuring")
    probes = CaseProbes(device, device_indices=indices)
    losses = LossWatch()
    record = measure_steps(
        training.step,
        policy,
        make_timer(device.type),
        probes=probes,
        data_timer=training.data_timer,
        losses=losses,
    )
    losses.add(training.step())  # one more step, outside the timing: the final loss
    losses.check()  # a non-finite loss anywhere: Diverged
    final_loss = float(losses.losses[-1])
    # DataParallel's replicas run the forward in threads of their own: no split for dp.
    split = after_measuring(training, case) if case.mode == "none" else {}
    training.close()
    # The math of float32 matmuls and convolutions, read back from torch after the step set
    # it (fp32_matmul, fp32_conv: "ieee" or "tf32"; trainperf.step.training_step.fp32_math_mode).
    info = device_info(device) | fp32_math_mode(device)
    if case.mode == "dp":
        info["devices"] = case.devices
    metrics = case_metrics(spec, case, training.size, record, probes, info["name"])
    peak = read_peak(device, indices)
    metrics |= {"mem_peak_bytes": peak.mem_peak_bytes, "mem_peak_source": peak.source}
    if peak.mem_reserved_peak_bytes is not None:
        metrics["mem_reserved_peak_bytes"] = peak.mem_reserved_peak_bytes
    if peak.mem_peak_bytes_per_device is not None:
        metrics["mem_peak_bytes_per_device"] = peak.mem_peak_bytes_per_device
    metrics["final_loss"] = final_loss
    metrics |= split
    if training.loaders is not None:
        metrics["data_train_samples"] = training.loaders.train_samples
    return {"device": info, "metrics": metrics}


def after_measuring(training: Any, case: Case) -> dict[str, Any]:
    """What one more step, outside the timing, tells: the training state and what a
    forward pass saves for the backward (trainperf.measure.memory), and the attention
    kernel that ran (``attention_backend``, trainperf.models.attention; not looked into
    under torch.compile, whose graph picks its own)."""
    checkpointing = case.activation_checkpointing
    checkpointed = blocks_of(training.model, case.model) if checkpointing != "none" else ()
    kept = kept_op_packets() if checkpointing == "selective" else frozenset()
    watch = AttentionWatch()
    with watch if not case.compile else contextlib.nullcontext():
        split = memory_split(training.model, training.optimizer, training.step, checkpointed, kept)
    return split | watch.metrics()


def case_metrics(
    spec: models.ModelSpec,
    case: Case,
    size: int,
    record: StepRecord,
    probes: CaseProbes,
    device_name: str,
) -> dict[str, Any]:
    """Every metric of a measured case but its memory: throughput and its statistics,
    FLOP rate and MFU over the case's replicas, energy and the devices' context (both
    frameworks derive them here, so their results have one shape)."""
    ci_target = parse_policy(case.steps).ci_target
    metrics = derive_metrics(spec, case, size, record, ci_target, device_name, case.replicas)
    samples = len(record.step_s) * case.global_batch
    metrics |= probe_metrics(
        probes.readings,
        samples,
        record.measure_elapsed_s,
        probes.start_contexts,
        probes.end_contexts,
        probes.device.type,
    )
    flag_gpu_instability(metrics)
    return metrics


def flag_gpu_instability(metrics: dict[str, Any]) -> None:
    """A case whose GPU slowed down for heat or by its hardware, or whose SM clock varied
    during the window, is unstable: its throughput is not the device's. A power cap alone
    is a condition, not a reason (trainperf.measure.clock_events says which is which)."""
    reasons = clock_events.instability(metrics)
    if reasons:
        metrics["unstable"] = True
        metrics["unstable_reasons"] = [*metrics["unstable_reasons"], *reasons]


def derive_metrics(
    spec: models.ModelSpec,
    case: Case,
    size: int,
    record: StepRecord,
    ci_target: float | None,
    device_name: str,
    device_count: int = 1,
) -> dict[str, Any]:
    """Throughput, uncertainty, stability, FLOP rate and MFU from the raw step times.

    ``record.step_s`` are the times of whole steps (the job's when distributed),
    each processing ``case.global_batch`` samples on ``device_count`` devices.
    """
    summary = summarize(record.step_s, case.global_batch)
    metrics: dict[str, Any] = summary.as_dict()
    metrics[spec.size_name] = size  # the size used, also when the case left it natural
    tokens = spec.tokens_per_sample(size)
    if tokens:
        metrics["tokens_per_sample"] = tokens
        metrics["tokens_per_s_median"] = summary.samples_per_s_median * tokens
        metrics["tokens_per_s_mean"] = summary.samples_per_s_mean * tokens

    flops = count_flops(spec, size)
    achieved = flops.train_flops_per_sample * summary.samples_per_s_median
    metrics |= {
        "fwd_flops_per_sample": flops.fwd_flops_per_sample,
        "train_flops_per_sample": flops.train_flops_per_sample,
        "achieved_tflops": achieved / 1e12,
    }
    metrics |= {
        "global_batch": case.global_batch,
        "device_batch": case.device_batch,
        "device_count": device_count,
    }
    peak = peak_flops(device_name, case.precision)
    if peak.flops_per_s:
        mfu = achieved / (peak.flops_per_s * device_count)
        metrics |= {"mfu": mfu, "mfu_peak_source": peak.source}
    else:
        metrics |= {"mfu": None, "mfu_absent_reason": peak.absent_reason}

    reasons = instability_reasons(record.step_s, summary, ci_target=ci_target)
    metrics |= {
        "unstable": bool(reasons),
        "unstable_reasons": reasons,
        "steps_warmup": len(record.warmup_s),
        "warmup_reason": record.warmup_reason,
        "stop_reason": record.stop_reason,
        "policy": case.steps,
        "measure_elapsed_s": record.measure_elapsed_s,
        "step_s": record.step_s,
        "warmup_step_s": record.warmup_s,
    }
    if record.data_wait_s is not None:
        metrics |= data_metrics(record.step_s, record.data_wait_s, case.global_batch)
    return metrics


def data_metrics(step_s: list[float], wait_s: list[float], global_batch: int) -> dict[str, Any]:
    """Data wait against compute per step (definitions in the module doc)."""
    compute_median = statistics.median([s - w for s, w in zip(step_s, wait_s, strict=True)])
    share = sum(wait_s) / sum(step_s)
    return {
        "data_wait_s_median": statistics.median(wait_s),
        "compute_only_s_median": compute_median,
        "data_wait_share": share,
        "compute_samples_per_s": global_batch / compute_median if compute_median > 0 else None,
        "input_bound": share > INPUT_BOUND_SHARE,
        "data_wait_s": wait_s,
    }
