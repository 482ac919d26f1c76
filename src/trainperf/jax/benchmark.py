"""One JAX case, measured in this process, with the method of trainperf.step.benchmark.

The worker calls ``run_jax_case`` for a case whose framework is ``jax``, in the same fresh
child process a PyTorch case gets, under the same step policy; the metrics come from the
same functions (``trainperf.step.benchmark.case_metrics``), so a JAX result has the shape of a
PyTorch one (throughput with its interval, MFU, energy, memory, final loss). What it adds:

- ``compile_s``: seconds to trace, lower and compile the step, before the warm-up (never in
  the measured window, see trainperf.jax.step);
- ``compilations_while_measuring``: XLA compilations heard (``jax.monitoring``) from the
  first warm-up step to the last measured one: 0 shows that the window holds no
  compilation; ``compilations_before_measuring`` shows that the listener hears them;
- ``xla_flops_per_step``: XLA's cost analysis of the compiled step per device (all
  operations, element-wise and optimizer included, unlike the matmul/convolution count of
  ``train_flops_per_sample`` that MFU uses; see trainperf.jax.flops).

Step times: JAX offers no events on its streams, so the steps are timed by the host clock
with ``trainperf.measure.timer.InFlightTimer``: the host waits for a step only once two
later steps are queued behind it, so the device never idles for the host's round trip, and
each step's time runs from the end of the step before it to its own end, as the PyTorch
path's CUDA events time the device's steps back to back (docs/jax.md, "Timing").

Device record, beside the keys of trainperf.step.benchmark.device_info: ``fp32_matmul`` and
``fp32_conv`` (the math of the compiled program's float32 dots and convolutions, read from
it: trainperf.jax.step), ``xla_preallocate`` and ``xla_allocator`` (how XLA's GPU client
allocated: on demand in every JAX worker, trainperf.system.jax_environment).

Memory: on a GPU the largest ``peak_bytes_in_use`` of the case's devices (XLA's allocator,
over the process's life, compilation's autotuning included) and ``xla_mem_limit_bytes``, the
allocator's limit (the smallest ``bytes_limit`` of the devices); on a CPU the process's peak
RSS, as for PyTorch.

torch's CUDA is never initialised here (trainperf.system.jax_environment): the probes find the
GPUs' NVML handles through ``CUDA_VISIBLE_DEVICES`` rather than torch's device list, and do
not synchronise torch's devices (the timer waits for JAX's).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import jaxlib
import torch

from trainperf.case.precision import fp32_math_record
from trainperf.case.spec import Case, model_of
from trainperf.jax.step import JaxTrainingStep, build_jax_step
from trainperf.measure.divergence import LossWatch
from trainperf.measure.memory import read_peak
from trainperf.measure.policy import parse_policy
from trainperf.measure.probes import CaseProbes
from trainperf.measure.timed_steps import measure_steps
from trainperf.measure.timer import InFlightTimer
from trainperf.step.benchmark import case_metrics
from trainperf.system.inventory import cpu_name
from trainperf.system.jax_environment import allocator_settings

# jax.monitoring's event for one XLA backend compilation (jax._src.dispatch).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class CompileCounter:
    """XLA compilations in this process so far. jax.monitoring cannot remove a listener
    through its public API, so one counter is registered once per process."""

    def __init__(self) -> None:
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._heard)

    def _heard(self, event: str, duration_s: float, **kwargs: Any) -> None:
        if event == BACKEND_COMPILE_EVENT:
            self.count += 1


_COMPILATIONS = CompileCounter()


def device_info(case: Case, training: JaxTrainingStep) -> dict[str, Any]:
    """What the case ran on, in the keys of trainperf.step.benchmark.device_info, with how its
    float32 math ran and how XLA allocated (module doc)."""
    first = training.devices[0]
    info: dict[str, Any] = {
        "type": case.device,
        "framework": "jax",
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "platform": first.platform,
        "devices": len(training.devices),
    }
    # device_kind is the GPU's marketing name ("NVIDIA H100 80GB HBM3"), as torch's; on
    # the CPU it is only "cpu", so the processor's name comes from the system inventory.
    info["name"] = first.device_kind if case.device == "cuda" else cpu_name()
    mode = training.fp32_math
    unknown = "the program's dots and convolutions are not all at precision HIGHEST or HIGH"
    info |= fp32_math_record(mode, mode, case.device, os.environ, unknown)
    return info | allocator_settings()


def memory_metrics(case: Case, devices: list[Any]) -> dict[str, Any]:
    """Peak memory of the case's devices (GPU) or of the process (CPU)."""
    if case.device != "cuda":
        peak = read_peak(torch.device("cpu"))
        return {"mem_peak_bytes": peak.mem_peak_bytes, "mem_peak_source": peak.source}
    stats = [device.memory_stats() or {} for device in devices]
    limits = [s.get("bytes_limit") for s in stats]
    metrics: dict[str, Any] = {"xla_mem_limit_bytes": None}
    if None in limits:
        metrics["xla_mem_limit_bytes_absent_reason"] = "this jaxlib reports no bytes_limit"
    else:
        metrics["xla_mem_limit_bytes"] = min(limits)
    peaks = [s.get("peak_bytes_in_use") for s in stats]
    if any(p is None for p in peaks):
        return metrics | {
            "mem_peak_bytes": None,
            "mem_peak_absent_reason": "this jaxlib's device reports no peak_bytes_in_use",
        }
    metrics |= {
        "mem_peak_bytes": max(peaks),
        "mem_peak_source": "jax Device.memory_stats peak_bytes_in_use"
        + (" (max over devices)" if len(peaks) > 1 else ""),
    }
    if len(peaks) > 1:
        metrics["mem_peak_bytes_per_device"] = peaks
    return metrics


def run_jax_case(
    case: Case, on_phase: Callable[[str], None] = lambda phase: None
) -> dict[str, Any]:
    """Measure ``case`` (framework jax) and return ``{"device": ..., "metrics": ...}``."""
    spec = model_of(case)
    policy = parse_policy(case.steps)
    on_phase("building")
    compiled_before = _COMPILATIONS.count
    training = build_jax_step(spec, case)
    compilations_before = _COMPILATIONS.count - compiled_before
    on_phase("measuring")
    gpus = [d.local_hardware_id for d in training.devices] if case.device == "cuda" else None
    probes = CaseProbes(torch.device(case.device), device_indices=gpus, torch_cuda=False)
    measuring_from = _COMPILATIONS.count
    losses = LossWatch()
    timer = InFlightTimer(jax.block_until_ready)
    record = measure_steps(timer.timed(training.step), policy, timer, probes=probes, losses=losses)
    compilations_while = _COMPILATIONS.count - measuring_from
    losses.add(training.step())  # one more step, outside the timing: the final loss
    losses.check()  # a non-finite loss anywhere: Diverged
    final_loss = float(losses.losses[-1])
    info = device_info(case, training)
    metrics = case_metrics(spec, case, training.size, record, probes, info["name"])
    metrics |= memory_metrics(case, training.devices)
    metrics |= {
        "compile_s": training.compile_s,
        "compilations_before_measuring": compilations_before,
        "compilations_while_measuring": compilations_while,
        "xla_flops_per_step": training.xla_flops_per_step,
        "final_loss": final_loss,
        # The memory split of trainperf.measure.memory, as far as JAX shows it.
        "mem_params_bytes": training.params_bytes,
        "mem_optimizer_bytes": training.optimizer_bytes,
        "mem_grads_bytes": None,
        "mem_grads_absent": "the gradients live inside the compiled XLA step only",
        "mem_activations_bytes": None,
        "mem_activations_absent": "the activations live inside the compiled XLA step only",
    }
    return {"device": info, "metrics": metrics}
