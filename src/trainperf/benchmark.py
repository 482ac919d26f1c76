"""One case, measured in this process: build, warm up, measure, derive the metrics.

The worker calls ``run_case`` in a fresh child process; benchmarks/ and notebooks may call
it directly. It raises on failure; the worker turns exceptions into result statuses.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainperf import models
from trainperf.analysis.flops import count_flops
from trainperf.analysis.peaks import peak_flops
from trainperf.case import Case
from trainperf.measure.loop import StepRecord, measure_steps
from trainperf.measure.memory import read_peak, reset_peak
from trainperf.measure.policy import parse_policy
from trainperf.measure.stats import instability_reasons, summarize
from trainperf.measure.timer import make_timer
from trainperf.system import cpu_name
from trainperf.train import build_training_step

RESULT_SCHEMA = 1


def device_info(device: torch.device) -> dict[str, Any]:
    """What the case ran on: device name, compute capability, torch threads."""
    info: dict[str, Any] = {"type": device.type, "threads": torch.get_num_threads()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info |= {
            "name": props.name,
            "capability": [props.major, props.minor],
            "memory_bytes": props.total_memory,
            "multiprocessors": props.multi_processor_count,
        }
    else:
        info["name"] = cpu_name()
    return info


def run_case(case: Case) -> dict[str, Any]:
    """Measure ``case`` and return ``{"device": ..., "metrics": ...}``."""
    if case.threads:
        torch.set_num_threads(case.threads)
    spec = models.get(case.model)
    device = torch.device(case.device)
    policy = parse_policy(case.steps)

    reset_peak(device)
    training = build_training_step(spec, case, device)
    record = measure_steps(training.step, policy, make_timer(device.type))
    final_loss = float(training.step().detach())  # one more step, outside the timing
    info = device_info(device)
    metrics = derive_metrics(spec, case, training.size, record, policy.ci_target, info["name"])
    peak = read_peak(device)
    metrics |= {"mem_peak_bytes": peak.mem_peak_bytes, "mem_peak_source": peak.source}
    if peak.mem_reserved_peak_bytes is not None:
        metrics["mem_reserved_peak_bytes"] = peak.mem_reserved_peak_bytes
    metrics["final_loss"] = final_loss if math.isfinite(final_loss) else None
    return {"device": info, "metrics": metrics}


def derive_metrics(
    spec: models.ModelSpec,
    case: Case,
    size: int,
    record: StepRecord,
    ci_target: float | None,
    device_name: str,
) -> dict[str, Any]:
    """Throughput, uncertainty, stability, FLOP rate and MFU from the raw step times."""
    summary = summarize(record.step_s, case.batch_size)
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
    peak = peak_flops(device_name, case.precision)
    if peak.flops_per_s:
        metrics |= {"mfu": achieved / peak.flops_per_s, "mfu_peak_source": peak.source}
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
    return metrics
