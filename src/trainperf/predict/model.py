"""Predict the data-parallel training throughput of a model on hardware not at hand.

Per step and device, with B the batch per device:

1. **Compute**: t_compute = B × training FLOPs per sample / (peak FLOP/s × achieved
   fraction), the FLOPs counted by ``trainperf.analysis.flops`` and the fraction measured
   (``trainperf.predict.calibrate``), given, or the catalog's default for the device; or,
   from a measured single-device throughput X (samples/s at that batch), t_compute = B / X.
   Forward and backward take 1/3 and 2/3 of it (the backward computes the gradients of both
   activations and weights: about twice the forward's FLOPs).
2. **Communication**: the gradients, 4 bytes per trainable parameter in fp32/tf32 and 2 in
   fp16/bf16, are all-reduced in the α–β model of ``trainperf.predict.comm``.
3. **Overlap** (PyTorch DDP; Li et al., "PyTorch Distributed: experiences on accelerating
   data parallel training", VLDB 2020): gradients go in buckets of ``bucket_mb`` MiB in
   reverse layer order; gradients appear uniformly over the backward pass, so a bucket is
   ready at t_fwd + (bytes up to and including it / all bytes) · t_bwd (k/K for equal
   buckets). All-reduces run one at a time: start_k = max(ready_k, end_{k−1}),
   end_k = start_k + t_allreduce(bucket_k). Step = max(t_fwd + t_bwd, end_K);
   comm = Σ t_allreduce; exposed = step − compute; comm share = exposed / step.
4. **Scaling**: weak keeps the batch per device, strong splits the global batch.
   Throughput = global batch / step; efficiency(p) = throughput(p) / (p · throughput(1)),
   throughput(1) from the same model on one device (for strong scaling the whole batch on
   that device, whether or not it fits).
5. **Memory**: ``trainperf.predict.memory``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trainperf import models
from trainperf.analysis.flops import count_flops
from trainperf.models.custom import CustomModelError
from trainperf.precision import PRECISIONS  # what a case trains in
from trainperf.predict.comm import LinkCost, bucket_sizes, data_parallel_allreduce_s
from trainperf.predict.memory import ASSUMPTIONS as MEMORY_ASSUMPTIONS
from trainperf.predict.memory import memory_breakdown, shape_counts

GRAD_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
SCALINGS = ("weak", "strong")
MIB = 2**20
FORWARD_SHARE = 1 / 3  # forward : backward = 1 : 2


class PredictError(ValueError):
    """Inputs the model cannot use; the message is one line for the user."""


@lru_cache(maxsize=64)
def train_flops_per_sample(model: str, size: int | None = None) -> float:
    """Training FLOPs per sample (forward + backward), counted once per model and size."""
    spec = models.get(model)
    return count_flops(spec, spec.resolve_size(size)).train_flops_per_sample


def available_precisions(device: Any) -> list[str]:
    return [p for p in PRECISIONS if device.peak_flops(p)]


@dataclass(frozen=True)
class Compute:
    """Seconds of forward + backward per sample on one device, and where they come from."""

    seconds_per_sample: float
    source: str


def compute_rate(
    model: str,
    device: Any,
    precision: str,
    single_device_throughput: float | None = None,
    achieved_fraction: float | None = None,
    size: int | None = None,
) -> Compute:
    """t_compute per sample: 1/X from a measured throughput, else FLOPs / (peak × fraction)."""
    name = getattr(device, "id", "the device")
    allowed = available_precisions(device)
    if allowed and precision not in allowed:
        raise PredictError(f"{name} has no {precision} peak: allowed {', '.join(allowed)}")
    if single_device_throughput is not None:
        if single_device_throughput <= 0:
            raise PredictError(
                f"single-device throughput must be > 0, got {single_device_throughput}"
            )
        return Compute(
            1 / single_device_throughput,
            f"one device trains {single_device_throughput:g} samples/s",
        )
    peak = device.peak_flops(precision)
    if not peak:
        raise PredictError(
            f"{name} has no {precision} peak FLOP/s: give a single-device throughput instead"
        )
    fraction, source = achieved_fraction, ""
    if fraction is None:
        fraction, source = device.efficiency(precision), " (the catalog's default)"
    if fraction is None:
        raise PredictError(
            f"{name} has no default achieved fraction at {precision}: give one, "
            "or a single-device throughput"
        )
    if not 0 < fraction <= 1:
        raise PredictError(f"achieved fraction must be in (0, 1], got {fraction}")
    flops = train_flops_per_sample(model, size)
    return Compute(
        flops / (peak * fraction),
        f"{flops / 1e9:.3g} GFLOP/sample at {fraction:.1%}{source} of "
        f"{peak / 1e12:.4g} TFLOP/s {precision} peak",
    )


def ddp_step(
    t_fwd: float, t_bwd: float, buckets: Sequence[float], allreduce: Any
) -> tuple[float, float]:
    """(step_s, comm_s) of DDP's bucketed all-reduces overlapped with the backward pass.

    ``allreduce(n_bytes) -> seconds``; buckets in the order they become ready.
    """
    total = sum(buckets)
    done = end = comm = 0.0
    for size in buckets:
        done += size
        ready = t_fwd + done / total * t_bwd
        t = allreduce(size)
        end = max(ready, end) + t
        comm += t
    return max(t_fwd + t_bwd, end), comm


def _check_placement(counts: Sequence[int], per_node: int, intra: Any, inter: Any) -> None:
    if not counts or any(int(c) != c or c < 1 for c in counts):
        raise PredictError(f"device counts must be positive integers, got {list(counts)}")
    if per_node < 1:
        raise PredictError(f"devices per node must be >= 1, got {per_node}")
    for link, scope in ((intra, "intra"), (inter, "inter")):
        given = getattr(link, "scope", scope)
        if link is not None and given != scope:
            raise PredictError(f"{link.id} is an {given}-node link, not an {scope}-node one")
    for count in counts:
        if count > per_node and count % per_node:
            raise PredictError(
                f"{count} devices is not a whole number of nodes of {per_node} devices"
            )
        if count > per_node and inter is None:
            raise PredictError(f"{count} devices span several nodes: an inter-node link is needed")
        if min(count, per_node) > 1 and intra is None:
            raise PredictError(f"{count} devices share a node: an intra-node link is needed")


def _device_batches(batch_size: int, counts: Sequence[int], scaling: str) -> dict[int, int]:
    if scaling not in SCALINGS:
        raise PredictError(f"unknown scaling '{scaling}': allowed {', '.join(SCALINGS)}")
    if batch_size < 1:
        raise PredictError(f"batch size must be >= 1, got {batch_size}")
    if scaling == "weak":
        return {c: batch_size for c in counts}
    for c in counts:
        if batch_size % c:
            raise PredictError(
                f"strong scaling: batch {batch_size} does not split evenly over {c} devices"
                + (" (fewer than 1 sample each)" if batch_size < c else "")
            )
    return {c: batch_size // c for c in counts}


def predict(
    model: str,
    device: Any,
    devices: Sequence[int],
    per_node: int,
    intra: Any | None,
    inter: Any | None,
    batch_size: int,
    precision: str,
    scaling: str = "weak",
    single_device_throughput: float | None = None,
    achieved_fraction: float | None = None,
    bucket_mb: float = 25.0,
    size: int | None = None,
) -> dict[str, Any]:
    """One row per device count; see the module docstring for every formula.

    ``device`` is a catalog ``Device`` (or alike), ``intra``/``inter`` catalog ``Link``s
    (or alike). Returns ``{"rows", "assumptions", "inputs"}``; raises ``PredictError``.
    """
    if precision not in PRECISIONS:
        raise PredictError(f"unknown precision '{precision}': allowed {', '.join(PRECISIONS)}")
    if bucket_mb <= 0:
        raise PredictError(f"bucket size must be > 0 MiB, got {bucket_mb}")
    counts = sorted(set(devices))
    _check_placement(counts, per_node, intra, inter)
    batches = _device_batches(batch_size, counts, scaling)
    try:
        shapes = shape_counts(model, size)
    except (models.UnknownModelError, models.SizeError, CustomModelError) as exc:
        raise PredictError(str(exc)) from None
    compute = compute_rate(
        model, device, precision, single_device_throughput, achieved_fraction, shapes.size
    )
    links = {
        k: LinkCost.of(v) if v is not None else None
        for k, v in (("intra", intra), ("inter", inter))
    }
    grad_bytes = shapes.trainable_params * GRAD_BYTES[precision]
    buckets = bucket_sizes(grad_bytes, bucket_mb * MIB)
    gpu = getattr(device, "kind", "gpu") != "cpu"

    def row(count: int, device_batch: int) -> dict[str, Any]:
        t_compute = device_batch * compute.seconds_per_sample
        t_fwd = FORWARD_SHARE * t_compute

        def allreduce(n: float) -> float:
            return data_parallel_allreduce_s(n, count, per_node, links["intra"], links["inter"])[0]

        step, comm = ddp_step(t_fwd, t_compute - t_fwd, buckets, allreduce)
        algorithm = data_parallel_allreduce_s(
            max(buckets, default=0.0), count, per_node, links["intra"], links["inter"]
        )[1]
        memory = memory_breakdown(
            shapes, device_batch, precision, device.memory_bytes, devices=count, gpu=gpu
        )
        return {
            "devices": count,
            "nodes": 1 if count <= per_node else count // per_node,
            "device_batch": device_batch,
            "global_batch": device_batch * count,
            "compute_s": t_compute,
            "comm_s": comm,
            "comm_exposed_s": step - t_compute,
            "step_s": step,
            "samples_per_s": device_batch * count / step,
            "comm_fraction": (step - t_compute) / step,
            "fits": memory.fits,
            "memory": memory.as_dict(),
            "algorithm": algorithm,
        }

    baseline = row(1, batch_size)
    rows = []
    for count in counts:
        r = baseline if count == 1 else row(count, batches[count])
        r = r | {"efficiency": r["samples_per_s"] / (count * baseline["samples_per_s"])}
        rows.append(r)
    return {
        "rows": rows,
        "assumptions": _assumptions(compute, precision, bucket_mb, scaling, batch_size),
        "inputs": {
            "model": model,
            "size": shapes.size,
            "device": getattr(device, "id", None),
            "precision": precision,
            "scaling": scaling,
            "batch_size": batch_size,
            "per_node": per_node,
            "intra": getattr(intra, "id", None),
            "inter": getattr(inter, "id", None),
            "bucket_mb": bucket_mb,
            "params": shapes.params,
            "trainable_params": shapes.trainable_params,
            "grad_bytes": grad_bytes,
            "buckets": len(buckets),
            "compute_s_per_sample": compute.seconds_per_sample,
            "baseline": {
                k: baseline[k] for k in ("device_batch", "samples_per_s", "step_s", "fits")
            },
        },
    }


def _assumptions(
    compute: Compute, precision: str, bucket_mb: float, scaling: str, batch_size: int
) -> list[str]:
    bits = GRAD_BYTES[precision] * 8
    return [
        f"compute: {compute.source}; time linear in the batch; forward:backward = 1:2",
        f"gradients all-reduced in {bits}-bit ({GRAD_BYTES[precision]} B/param"
        + (", as with a 16-bit communication hook or 16-bit gradients" if bits == 16 else "")
        + ")",
        f"DDP buckets of {bucket_mb:g} MiB in reverse layer order, gradients produced "
        "uniformly over the backward pass, all-reduces one at a time overlapping it",
        "all-reduce: α–β model, the faster of ring and double binary tree per bucket; "
        "above one node hierarchical (reduce-scatter in node, all-reduce across nodes "
        "sharing the node's link, all-gather in node); no contention or congestion, no "
        "stragglers, no data-loading or optimizer-step time",
        (
            f"weak scaling: {batch_size} samples per device"
            if scaling == "weak"
            else f"strong scaling: global batch {batch_size} split over the devices; "
            "efficiency against the whole batch on one device"
        ),
        MEMORY_ASSUMPTIONS,
    ]
