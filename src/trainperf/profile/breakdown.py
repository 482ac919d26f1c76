"""Where the time of a training step goes: layers, optimizer, data movement, operator kinds.

``profile_case`` measures one case in three passes over the same model and batch:
1. uninstrumented: the step as the benchmark times it (``step_ms_uninstrumented``);
2. with per-layer hooks (trainperf.profile.layers) and optimizer-step hooks: every leaf
   layer's forward and backward time, the optimizer step, and the rest of the step
   (``unattributed_ms``: the loss, zero_grad and the framework between layers), with the
   instrumented step time (``step_ms``);
3. under torch.profiler (trainperf.profile.categories): time per operator category, the
   top operators, and on a GPU the CUDA API time.
``instrumentation_overhead`` = step_ms / step_ms_uninstrumented - 1 says how much the
hooks disturbed what they measured. ``data_ms`` is the time to move one batch from host
memory to the device (pinned memory on a GPU; a memory copy on a CPU): the benchmark's
batches are made on the device, so this is what a real input pipeline would add per step.
All times are per step, averaged over the profiled steps after warm-up.
"""

from __future__ import annotations

import statistics
import time
import warnings
from typing import Any

import torch

from trainperf import models
from trainperf.case.spec import Case
from trainperf.profile.layers import LayerTimer, out_of_place_activations
from trainperf.step.training_step import TrainingStep, build_training_step

DEFAULT_STEPS, DEFAULT_WARMUP = 10, 3


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_steps(step, device: torch.device, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        _sync(device)
        started = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - started)
    return times


def _data_ms(inputs: torch.Tensor, device: torch.device, steps: int) -> float:
    """Median ms to copy one batch from (pinned) host memory into a preallocated device
    tensor: the copy alone, with no allocation and no device-side clone in the window."""
    host = inputs.detach().cpu()
    if device.type == "cuda":
        host = host.pin_memory()
    target = torch.empty_like(host, device=device)
    times = _timed_steps(lambda: target.copy_(host, non_blocking=True), device, steps)
    return statistics.median(times) * 1e3


def process_settings(case: Case, threads: int | None) -> None:
    """This process's intra-op threads (None: torch's default) and the oneDNN switch."""
    if threads:
        torch.set_num_threads(threads)
    torch.backends.mkldnn.enabled = case.mkldnn


def profile_case(
    case: Case, steps: int = DEFAULT_STEPS, warmup: int = DEFAULT_WARMUP
) -> dict[str, Any]:
    """The breakdown of one training step of ``case`` (see the module docstring)."""
    from trainperf.step.benchmark import device_info

    process_settings(case, case.threads)
    device = torch.device(case.device)
    training = build_training_step(models.get(case.model), case, device)
    return {
        "device": device_info(device),
        "metrics": breakdown(training, device, steps, warmup),
    }


def breakdown(
    training: TrainingStep, device: torch.device, steps: int, warmup: int
) -> dict[str, Any]:
    """The three passes of the module docstring over ``training``'s step: the metrics."""
    from trainperf.profile.categories import profile_categories

    # The step as the benchmark times it: the model as built, in-place activations included
    # (the hooks' pass below needs them out of place, which costs memory traffic: about
    # 10% of a ResNet-18 step on a CPU, seen against a `run` of the same case).
    for _ in range(warmup):
        training.step()
    plain = statistics.median(_timed_steps(training.step, device, steps)) * 1e3
    with out_of_place_activations(training.model), warnings.catch_warnings():
        # The first layer's input needs no gradient: its backward hook still fires (on
        # the gradient of its output), which is what is timed; PyTorch warns about it.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        timer = LayerTimer(training.model, device)
        optimizer_s: list[float] = []
        started: list[float] = []

        def before_step(*_: object) -> None:
            _sync(device)
            started.append(time.perf_counter())

        def after_step(*_: object) -> None:
            _sync(device)
            optimizer_s.append(time.perf_counter() - started.pop())

        hooks = [
            training.optimizer.register_step_pre_hook(before_step),
            training.optimizer.register_step_post_hook(after_step),
        ]
        try:
            training.step()  # one instrumented warm-up step: hooks' own first-call costs
            timer.reset()
            optimizer_s.clear()
            step_times = _timed_steps(training.step, device, steps)
        finally:
            timer.remove()
            for hook in hooks:
                hook.remove()
        categories = profile_categories(training.step, device, steps=min(steps, 5), warmup=1)

    step_ms = statistics.fmean(step_times) * 1e3
    layers = [
        {
            "name": c.name,
            "type": c.type,
            "fwd_ms": c.fwd_s / steps * 1e3,
            "bwd_ms": c.bwd_s / steps * 1e3,
            "calls": c.calls // steps,
            "share": (c.fwd_s + c.bwd_s) / steps * 1e3 / step_ms,
        }
        for c in timer.clocks
    ]
    optimizer_ms = sum(optimizer_s) / steps * 1e3
    attributed = sum(layer["fwd_ms"] + layer["bwd_ms"] for layer in layers) + optimizer_ms
    metrics = {
        "steps": steps,
        "warmup_steps": warmup,
        "layers": layers,
        "fwd_ms": sum(layer["fwd_ms"] for layer in layers),
        "bwd_ms": sum(layer["bwd_ms"] for layer in layers),
        "optimizer_ms": optimizer_ms,
        "unattributed_ms": step_ms - attributed,
        "step_ms": step_ms,
        "step_ms_uninstrumented": plain,
        "instrumentation_overhead": step_ms / plain - 1,
        "data_ms": _data_ms(training.inputs, device, steps),
        "data_note": "one batch from host memory to the device (not part of the step)",
        "threads": torch.get_num_threads(),
        "mkldnn_enabled": torch.backends.mkldnn.enabled,
        **categories,
    }
    return metrics
