"""Predict the data-parallel training throughput of a model on hardware not at hand.

Per step and device, with B the batch per device:

1. **Compute**: t_compute = B × training FLOPs per sample / (peak FLOP/s × achieved
   fraction), the FLOPs counted by ``trainperf.models.flops`` and the fraction measured
   (``trainperf.predict.calibrate``), given, or the catalog's default for the device; or,
   from a measured single-device throughput X (samples/s at that batch), t_compute = B / X.
   Forward and backward take φ and 1 − φ of it, φ the forward's share of the time of the ops
   priced (``Compute.forward_share``); 1/3 for a measured step, which has no split (the
   backward computes the gradients of both activations and weights: about twice the
   forward's FLOPs; the roofline puts GPT-2's φ at 0.336 on a CPU, where one core measured
   615 of 1,835 ms, docs/predict.md).
2. **Communication**: the gradients are all-reduced in the α–β model of
   ``trainperf.predict.comm`` (or on a link's measured bus-bandwidth curve). They are fp32,
   4 bytes per trainable parameter, in every precision: automatic mixed precision keeps
   fp32 parameters, so their gradients are fp32 too; 2 bytes only with a 16-bit DDP
   communication hook (``grad_compression`` fp16 or bf16: ``fp16_compress_hook``,
   ``bf16_compress_hook`` of torch.distributed.algorithms.ddp_comm_hooks).
3. **Overlap** (PyTorch DDP; Li et al., "PyTorch Distributed: experiences on accelerating
   data parallel training", VLDB 2020): gradients go in buckets of ``bucket_mb`` MiB in
   reverse layer order; gradients appear uniformly over the backward pass, so a bucket is
   ready at t_fwd + (bytes up to and including it / all bytes) · t_bwd (k/K for equal
   buckets). All-reduces run one at a time: start_k = max(ready_k, end_{k−1}),
   end_k = start_k + t_allreduce(bucket_k). The first bucket is DDP's 1 MiB one, the last
   (the first layers' gradients, ready when the backward ends) never overlaps. Tied
   weights (GPT-2's token embedding, also its output layer) have their gradient complete
   only when the backward reaches their first use, at its end: a bucket of their own,
   reduced last (``ready_fractions``), the other buckets spread over the whole pass.
   t_sync = max(t_fwd + t_bwd, end_K); comm = Σ t_allreduce.
   Where communication shares the compute's cores (``terms.Contention``: CPU ranks, or as
   ``micro collective --under-load`` measured), an all-reduce and the backward running at
   once each advance at 1/s of their speed alone (``contended_ddp_step``; s at the running
   bucket's size where the slowdowns were measured per size); and where ranks
   share a host, every rank's compute is the single device's × the measured slowdown
   beside its neighbours' compute. Where the communication has k of a CPU rank's C cores to
   itself (MLSL's endpoint servers, oneCCL's workers: ``--comm-cores``), it overlaps for
   free and the compute on two ranks or more takes C / (C − k) of its time on one device.
   **Bucket copies**: with ``gradient_as_bucket_view=False`` (PyTorch's default, and
   trainperf's) DDP copies each gradient into its bucket as it is produced (scaled by
   1/N: ``Reducer::copy_grad_to_bucket``) and, once the backward has ended, each reduced
   bucket back into the gradients (``finalize_backward``, bucket by bucket after its
   all-reduce). Each copy reads and writes the fp32 gradients: t_copy = 2 × 4 B × params /
   W per direction, W the rank's streaming rate (measured with every rank streaming, else
   ``MEMORY_FRACTION`` of the catalog's bandwidth). The copy in lengthens the backward; the
   copies out run on the compute's side after it, each once its bucket is reduced. A GPU
   streams the 0.5 GB of GPT-2's gradients in under a millisecond; one CPU core at ~12 GB/s
   takes 80 ms each way, 8% of GPT-2's step on this VM's core and 30% of AlexNet's (both
   measured: DDP over one gloo rank against the bare model).
   **The optimizer's step** runs after the backward and its all-reduces (DDP's backward
   returns when every bucket is reduced): t_opt = ``OPTIMIZER_STEP_BYTES`` (AdamW 80 B,
   SGD with momentum 32 B per parameter, torch's foreach kernels) × params / W, W the
   copies' rate. The one device's step holds it (a measured step, or the roofline at a
   whole-step fraction of peak), so it is split out before the split of forward and
   backward: the backward the buckets overlap is the rest, the step's total unchanged. On
   one core of the dev VM torch's step took 90 ms for AlexNet's 61 M parameters (SGD) and
   563 ms for GPT-2's 124 M (AdamW), a third and a fifth of their steps: left in the
   backward, it had been hiding all-reduces that wait.
   Then the terms of ``trainperf.predict.terms``: stragglers s(N) = E[max of N step
   times] − E[one] and the per-step overhead o(N) = a + b·log2 N:
   step = t_sync + t_opt + s(N) + o(N); exposed communication = t_sync − (forward +
   backward); comm share = exposed / step.
4. **Scaling**: weak keeps the batch per device, strong splits the global batch.
   Throughput = global batch / step; efficiency(p) = throughput(p) / (p · throughput(1)),
   throughput(1) from the same model on one device (for strong scaling the whole batch on
   that device, whether or not it fits).
5. **Memory**: ``trainperf.predict.memory``.
"""

from __future__ import annotations

import math
from typing import Any

from trainperf.core.limits import (
    BUCKET_MB_MAX,
    BUCKET_MB_MIN,
)
from trainperf.models.custom import CustomModelError
from trainperf.models.spec import SizeError
from trainperf.predict.comm import bucket_sizes, data_parallel_allreduce_s
from trainperf.predict.compute import (
    MEMORY_FRACTION,
    OPTIMIZER_STEP_BYTES,
    Compute,
    baseline_inputs,
    compute_curve,
    compute_rate,
    optimizer_step_s,
)
from trainperf.predict.inputs import (
    COMPRESSION_BYTES,
    MIB,
    NOTHING_MEASURED,
    Measured,
    Placement,
    PredictError,
    Workload,
    finite_prediction,
    layout,
    link_costs,
    node_path_notes,
    placement_inputs,
    prepare,
    scaled_rows,
    uplink_input,
)
from trainperf.predict.memory import ASSUMPTIONS as MEMORY_ASSUMPTIONS
from trainperf.predict.memory import (
    memory_breakdown,
    shape_counts,
)
from trainperf.predict.overlap import contended_ddp_step, contention_of, ddp_step, ready_fractions
from trainperf.predict.terms import Contention, compute_stretch_words

# An optimizer step estimated above this share of a measured step is taken as this share:
# the rest must hold a forward and a backward.
OPTIMIZER_SHARE_MAX = 0.5


def predict(
    workload: Workload,
    placement: Placement,
    measured: Measured = NOTHING_MEASURED,
    *,
    bucket_mb: float = 25.0,
    winograd: bool | None = None,
    grad_compression: str = "none",
    explain: bool = False,
) -> dict[str, Any]:
    """One row per device count of ``workload`` trained with DDP on ``placement``, with
    what was ``measured``; see the module docstring for every formula. Returns ``{"rows",
    "assumptions", "inputs"}``, and with ``explain`` the ``compute_curve`` the rows read;
    raises ``PredictError``.
    """
    if not BUCKET_MB_MIN <= bucket_mb <= BUCKET_MB_MAX:
        raise PredictError(
            f"bucket size must be from {BUCKET_MB_MIN:g} to {BUCKET_MB_MAX:.0f} MiB, "
            f"got {bucket_mb}"
        )
    if grad_compression not in COMPRESSION_BYTES:
        raise PredictError(
            f"unknown gradient compression '{grad_compression}': "
            f"allowed {', '.join(COMPRESSION_BYTES)}"
        )
    prepared = prepare(workload, placement)
    spec, precision, device = workload.spec, workload.precision, placement.device
    try:
        shapes = shape_counts(spec, workload.size, prepared.plan)
    except (SizeError, CustomModelError) as exc:
        raise PredictError(str(exc)) from None
    compute = compute_rate(
        spec, device, precision, measured, shapes.size, winograd, batch_size=workload.batch_size
    )
    per_node = placement.per_node
    links, uplink = link_costs(placement.intra, placement.inter, per_node, placement.pcie_uplink)
    nics = placement.nics_per_node
    grad_bytes = shapes.trainable_params * COMPRESSION_BYTES[grad_compression]
    # Tied weights' gradients are complete only at the end of the backward: their own
    # bucket, reduced last (DDP rebuilds its buckets in the order gradients are ready).
    tied_bytes = shapes.tied_params * COMPRESSION_BYTES[grad_compression]
    buckets = bucket_sizes(grad_bytes - tied_bytes, bucket_mb * MIB)
    buckets += [float(tied_bytes)] if tied_bytes else []
    ready = ready_fractions(buckets, at_end=1 if tied_bytes else 0)
    contention = contention_of(device, measured)
    copy_rate = bucket_copy_rate(device, measured)
    # one copy of the fp32 gradients, into the buckets or out of them: read and write
    fp32_grad_bytes = shapes.trainable_params * COMPRESSION_BYTES["none"]
    copy_s = 2 * fp32_grad_bytes / copy_rate if copy_rate else 0.0
    # The optimizer's step runs after the backward and its all-reduces (module doc 3): split
    # out of the one device's step, so that only the backward overlaps them.
    optimizer_s = optimizer_step_s(shapes.optimizer, shapes.trainable_params, copy_rate) or 0.0

    def row(count: int, device_batch: int) -> dict[str, Any]:
        stretch = contention.compute_factor(count, min(count, per_node))
        t_step = compute.seconds(device_batch) * stretch
        t_opt = min(optimizer_s, OPTIMIZER_SHARE_MAX * t_step)
        t_compute = t_step - t_opt  # forward + backward
        forward_share = compute.forward_share(device_batch)
        t_fwd = forward_share * t_compute
        copy = copy_s if count > 1 else 0.0  # one device trains without DDP
        t_bwd = t_compute - t_fwd + copy  # the copy in, as each gradient is produced

        def allreduce(n: float) -> float:
            return data_parallel_allreduce_s(
                n, count, per_node, links["intra"], links["inter"], uplink, nics
            )[0]

        if contention.free:
            synced, comm = ddp_step(t_fwd, t_bwd, buckets, allreduce, ready, copy)
        else:
            synced, comm = contended_ddp_step(
                t_fwd, t_bwd, buckets, allreduce, contention, ready, copy
            )
        if math.isclose(synced, t_compute, rel_tol=1e-12):  # nothing exposed, but for rounding
            synced = t_compute
        straggler = measured.noise.straggler_s(count, t_compute + t_opt)
        sync_overhead = measured.overhead.seconds(count)
        step = synced + t_opt + straggler + sync_overhead
        algorithm = data_parallel_allreduce_s(
            max(buckets, default=0.0),
            count,
            per_node,
            links["intra"],
            links["inter"],
            nics=nics,
        )[1]
        memory = memory_breakdown(
            shapes, device_batch, precision, device.memory_bytes, devices=count
        )
        return layout(count, per_node, device_batch) | {
            "compute_s": t_compute + t_opt,
            "forward_share": forward_share,
            "optimizer_s": t_opt,
            "comm_s": comm,
            "comm_exposed_s": synced - t_compute,
            "bucket_copy_s": 2 * copy,
            "straggler_s": straggler,
            "overhead_s": sync_overhead,
            "step_s": step,
            "samples_per_s": device_batch * count / step,
            "comm_fraction": (synced - t_compute) / step,
            "fits": memory.fits,
            "memory": memory.as_dict(),
            "algorithm": algorithm,
        }

    baseline, rows = scaled_rows(prepared, workload.batch_size, row)
    prediction = {
        "rows": rows,
        "assumptions": _assumptions(
            compute, grad_compression, bucket_mb, workload, measured, contention, tied_bytes
        )
        + [_copy_note(device, measured, copy_rate)]
        + [_optimizer_note(shapes.optimizer, optimizer_s)]
        + node_path_notes(placement),
        "inputs": placement_inputs(workload, placement, shapes.size)
        | {
            "bucket_mb": bucket_mb,
            "grad_compression": grad_compression,
            "pcie_uplink": uplink_input(placement),
            "params": shapes.params,
            "trainable_params": shapes.trainable_params,
            "grad_bytes": grad_bytes,
            "tied_grad_bytes": tied_bytes,
            "buckets": len(buckets),
        }
        | baseline_inputs(compute, workload.batch_size, baseline),
    }
    if explain:
        prediction["compute_curve"] = compute_curve(compute, prepared, workload.batch_size)
    return finite_prediction(prediction)


def bucket_copy_rate(device: Any, measured: Measured) -> float | None:
    """Bytes/s of DDP's bucket copies on one rank: as measured, else ``MEMORY_FRACTION``
    of the device's bandwidth, else None (not known: the copies are not priced)."""
    if measured.memory_bytes_per_s:
        return measured.memory_bytes_per_s
    bandwidth = getattr(device, "memory_bytes_per_s", None)
    return bandwidth * MEMORY_FRACTION if bandwidth else None


def _copy_note(device: Any, measured: Measured, rate: float | None) -> str:
    """The assumption line of the bucket copies (module doc 3)."""
    if rate is None:
        return (
            "DDP's copies of the gradients into and out of its buckets: not priced (no "
            "memory bandwidth known for the device; `micro collective --under-load` measures "
            "one)"
        )
    source = (
        "measured by micro collective --under-load with every rank streaming"
        if measured.memory_bytes_per_s
        else f"{MEMORY_FRACTION:.0%} of {getattr(device, 'id', 'the device')}'s bandwidth"
    )
    return (
        "DDP's copies of the fp32 gradients into its buckets during the backward and back "
        f"out after each bucket's all-reduce, each read and written at {rate / 1e9:.3g} GB/s "
        f"({source})"
    )


def _optimizer_note(optimizer: str, seconds: float) -> str:
    """The assumption line of the optimizer's step (module doc 3)."""
    if not seconds:
        return (
            f"the {optimizer} step: not split out of the compute (its bytes per parameter or "
            "the memory rate not known): the all-reduces overlap it as if it were backward"
        )
    return (
        f"the {optimizer} step after the backward and its all-reduces: "
        f"{OPTIMIZER_STEP_BYTES[optimizer]} B per parameter at the copies' rate, "
        f"{seconds * 1e3:.3g} ms (at most {OPTIMIZER_SHARE_MAX:.0%} of the step), split out of "
        "the one device's step: the all-reduces overlap the rest's backward only"
    )


def _assumptions(
    compute: Compute,
    grad_compression: str,
    bucket_mb: float,
    workload: Workload,
    measured: Measured,
    contention: Contention,
    tied_bytes: int = 0,
) -> list[str]:
    size = COMPRESSION_BYTES[grad_compression]
    noise, overhead = measured.noise, measured.overhead
    scaling, batch_size = workload.scaling, workload.batch_size
    return [
        f"compute: {compute.source}; {compute.batch_dependence()}; "
        + compute.forward_words(batch_size),
        f"gradients all-reduced in {size * 8}-bit ({size} B/param"
        + (
            f", a {grad_compression} communication hook"
            if grad_compression != "none"
            else "; mixed precision keeps fp32 gradients"
        )
        + ")",
        f"DDP buckets of {bucket_mb:g} MiB in reverse layer order after a 1 MiB first one, "
        "gradients produced uniformly over the backward pass, all-reduces one at a time "
        "overlapping it, the last bucket after the backward"
        + (
            "; tied weights' gradients (complete only when the backward ends) in a bucket "
            "of their own, last"
            if tied_bytes
            else ""
        ),
        *compute_stretch_words(contention),
        *(
            []
            if contention.free
            else [
                "compute beside communication: while an all-reduce runs, the backward runs "
                f"at 1/{contention.compute_slowdown:.3g} of its speed and the all-reduce at "
                f"1/{contention.comm_slowdown:.3g} of its own"
                + (
                    f" (the medians; each bucket at its size, {_by_bytes_words(contention)})"
                    if contention.by_bytes
                    else ""
                )
                + f" ({contention.source})"
            ]
        ),
        "all-reduce: on a measured bus-bandwidth curve where given, else the α–β model, the "
        "faster of ring and double binary tree per bucket; above one node hierarchical "
        "(reduce-scatter in node, all-reduce across nodes sharing the node's link, "
        "all-gather in node); no congestion beyond that sharing, no data-loading time",
        f"stragglers: E[max of N step times] − E[one step], noise from {noise.source}",
        f"per-step data-parallel overhead o(N) = {overhead.base_s * 1e3:.3g} ms + "
        f"{overhead.per_doubling_s * 1e3:.3g} ms · log2 N ({overhead.source})",
        (
            f"weak scaling: {batch_size} samples per device"
            if scaling == "weak"
            else f"strong scaling: global batch {batch_size} split over the devices; "
            "efficiency against the whole batch on one device"
        ),
        MEMORY_ASSUMPTIONS,
    ]


def _by_bytes_words(contention: Contention) -> str:
    """'1.3x and 1.4x at 1 MiB ... 2.1x and 2.2x at 64 MiB': compute's and all-reduce's
    slowdowns at the smallest and the largest size measured."""
    ends = [contention.by_bytes[0], contention.by_bytes[-1]]
    return " ... ".join(
        f"{compute:.3g}x and {comm:.3g}x at {size / MIB:.3g} MiB" for size, compute, comm in ends
    )
