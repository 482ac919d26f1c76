"""Predict the data-parallel training throughput of a model on hardware not at hand.

Per step and device, with B the batch per device:

1. **Compute**: t_compute = B × training FLOPs per sample / (peak FLOP/s × achieved
   fraction), the FLOPs counted by ``trainperf.models.flops`` and the fraction measured
   (``trainperf.predict.calibrate``), given, or the catalog's default for the device; or,
   from a measured single-device throughput X (samples/s at that batch), t_compute = B / X.
   Forward and backward take 1/3 and 2/3 of it (the backward computes the gradients of both
   activations and weights: about twice the forward's FLOPs).
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
   once each advance at 1/s of their speed alone (``contended_ddp_step``); and where ranks
   share a host, every rank's compute is the single device's × the measured slowdown
   beside its neighbours' compute.
   Then the terms of ``trainperf.predict.terms``: stragglers s(N) = E[max of N step
   times] − E[one] and the per-step overhead o(N) = a + b·log2 N:
   step = t_sync + s(N) + o(N); exposed communication = t_sync − compute; comm share =
   exposed / step.
4. **Scaling**: weak keeps the batch per device, strong splits the global batch.
   Throughput = global batch / step; efficiency(p) = throughput(p) / (p · throughput(1)),
   throughput(1) from the same model on one device (for strong scaling the whole batch on
   that device, whether or not it fits).
5. **Memory**: ``trainperf.predict.memory``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from trainperf.case.modes import SCALINGS, device_batch, splits_evenly
from trainperf.case.precision import PRECISIONS  # what a case trains in
from trainperf.core.limits import (
    ACHIEVED_FRACTION_MIN,
    BUCKET_MB_MAX,
    BUCKET_MB_MIN,
    THROUGHPUT_MAX,
    THROUGHPUT_MIN,
    first_bad_number,
)
from trainperf.models.attention import AttentionPlan
from trainperf.models.custom import CustomModelError
from trainperf.models.spec import ModelSpec, SizeError
from trainperf.predict.comm import LinkCost, bucket_sizes, data_parallel_allreduce_s
from trainperf.predict.memory import (
    ACTIVATION_BYTES,
    attention_plan,
    memory_breakdown,
    shape_counts,
)
from trainperf.predict.memory import ASSUMPTIONS as MEMORY_ASSUMPTIONS
from trainperf.predict.roofline import (
    OpProfile,
    RooflineTime,
    op_profile,
    roofline_seconds_per_sample,
)
from trainperf.predict.terms import (
    NO_NOISE,
    NO_OVERHEAD,
    OWN_ENGINE,
    TIME_SHARED,
    BatchCurve,
    Contention,
    Overhead,
    StepNoise,
)

# Bytes per gradient element all-reduced: fp32 (AMP keeps fp32 parameters and gradients)
# unless a 16-bit communication hook compresses them.
COMPRESSION_BYTES = {"none": 4, "fp16": 2, "bf16": 2}
MIB = 2**20
FORWARD_SHARE = 1 / 3  # forward : backward = 1 : 2


class PredictError(ValueError):
    """Inputs the model cannot use; the message is one line for the user."""


@dataclass(frozen=True)
class Workload:
    """What is trained: the model ``spec`` (resolved once by the caller) at ``size`` (its
    default when None), in ``precision``, ``batch_size`` per device (weak scaling) or in
    all, split over the devices (strong)."""

    spec: ModelSpec
    batch_size: int
    precision: str
    scaling: str = "weak"
    size: int | None = None


@dataclass(frozen=True)
class Placement:
    """Where the data-parallel ranks run: on ``device`` (a catalog ``Device`` or alike), at
    each of the device counts ``devices``, ``per_node`` to a node, joined by ``intra``
    within a node and ``inter`` between nodes (catalog ``Link``s or alike).
    ``pcie_uplink`` = (link, K): the K GPUs behind one PCIe switch reach the NIC through
    that one link (``comm.hierarchical_allreduce_s``). ``nics_per_node`` NICs (1 to
    ``per_node``; rail-optimised clusters give every GPU or every few GPUs one) carry the
    inter-node phase in parallel, each at the ``inter`` link's bandwidth."""

    device: Any
    devices: Sequence[int]
    per_node: int
    intra: Any | None = None
    inter: Any | None = None
    pcie_uplink: tuple[Any, int] | None = None
    nics_per_node: int = 1


@dataclass(frozen=True)
class Measured:
    """What measurements put in place of the model's own figures, each optional:
    ``single_device_throughput`` (samples/s of one device at the batch per device: replaces
    FLOPs over peak), ``achieved_fraction`` (of peak FLOP/s: replaces the catalog's),
    the step-time ``noise`` and the per-step ``overhead``, and the ``batch_curve``: one
    device's step time fitted over several batch sizes, which replaces a throughput measured
    at one batch when the batch per device changes, and the ``contention`` of compute and
    communication running at once (``trainperf.predict.terms``)."""

    single_device_throughput: float | None = None
    achieved_fraction: float | None = None
    noise: StepNoise = NO_NOISE
    overhead: Overhead = NO_OVERHEAD
    batch_curve: BatchCurve | None = None  # the step time against the batch (terms)
    contention: Contention | None = None  # compute beside communication (terms)


NOTHING_MEASURED = Measured()


@dataclass(frozen=True)
class Prepared:
    """A prediction's checked inputs: the device counts in order, the batch per device of
    each, and how attention runs on the device."""

    counts: list[int]
    batches: dict[int, int]
    gpu: bool
    plan: AttentionPlan


def prepare(workload: Workload, placement: Placement) -> Prepared:
    """Check what ``predict`` and ``predict_fsdp`` both take (PredictError names the first
    problem) and derive what both use."""
    if workload.precision not in PRECISIONS:
        allowed = ", ".join(PRECISIONS)
        raise PredictError(f"unknown precision '{workload.precision}': allowed {allowed}")
    counts = sorted(set(placement.devices))
    check_placement(counts, placement.per_node, placement.intra, placement.inter)
    check_nics(placement.nics_per_node, placement.per_node)
    batches = device_batches(workload.batch_size, counts, workload.scaling)
    device = placement.device
    gpu = getattr(device, "kind", "gpu") != "cpu"
    plan = attention_plan(gpu, workload.precision, getattr(device, "capability", None))
    return Prepared(counts, batches, gpu, plan)


def layout(count: int, per_node: int, device_batch: int) -> dict[str, int]:
    """The first fields of a prediction's row: where its devices are and their batches."""
    return {
        "devices": count,
        "nodes": 1 if count <= per_node else count // per_node,
        "device_batch": device_batch,
        "global_batch": device_batch * count,
    }


def scaled_rows(
    prepared: Prepared, batch_size: int, row: Callable[[int, int], dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The one-device baseline (at the whole ``batch_size``) and a row per device count,
    each with its efficiency against that baseline (module doc, 4)."""
    baseline = row(1, batch_size)
    rows = []
    for count in prepared.counts:
        r = baseline if count == 1 else row(count, prepared.batches[count])
        rows.append(r | {"efficiency": r["samples_per_s"] / (count * baseline["samples_per_s"])})
    return baseline, rows


def placement_inputs(workload: Workload, placement: Placement, size: int) -> dict[str, Any]:
    """The inputs a prediction echoes first: the model, device, batch and links."""
    inputs = {
        "model": workload.spec.name,
        "size": size,
        "device": getattr(placement.device, "id", None),
        "precision": workload.precision,
        "scaling": workload.scaling,
        "batch_size": workload.batch_size,
        "per_node": placement.per_node,
        "intra": getattr(placement.intra, "id", None),
        "inter": getattr(placement.inter, "id", None),
    }
    # Echoed only when not the default 1, so that a prediction without --nics-per-node
    # prints byte for byte what it printed before the option existed.
    if placement.nics_per_node != 1:
        inputs["nics_per_node"] = placement.nics_per_node
    return inputs


def nics_note(placement: Placement) -> list[str]:
    """The assumption a prediction with several NICs per node adds (none for one)."""
    k = placement.nics_per_node
    if k == 1:
        return []
    return [
        f"{k} NICs per node: the inter-node phase runs min({k}, {placement.per_node}) rings "
        "in parallel, each GPU getting that many NICs' bandwidth over the GPUs of its node "
        "(latency unchanged)"
    ]


def uplink_input(placement: Placement) -> dict[str, Any] | None:
    uplink = placement.pcie_uplink
    return None if uplink is None else {"link": getattr(uplink[0], "id", None), "gpus": uplink[1]}


def baseline_inputs(compute: Compute, batch_size: int, baseline: dict) -> dict[str, Any]:
    """The inputs a prediction echoes last: compute per sample and the one-device row."""
    return {
        "compute_s_per_sample": compute.seconds(batch_size) / batch_size,
        "memory_bound_share": compute.memory_bound_share(batch_size),
        "baseline": {k: baseline[k] for k in ("device_batch", "samples_per_s", "step_s", "fits")},
    }


def available_precisions(device: Any) -> list[str]:
    return [p for p in PRECISIONS if device.peak_flops(p)]


# Fraction of the data-sheet DRAM bandwidth that streaming kernels (element-wise ops,
# normalization, pooling) reach. Assumption: STREAM-like copy and triad kernels on NVIDIA
# data-centre GPUs reach about 0.8-0.9 of the data sheet; the lower end is taken because
# framework kernels are less regular than STREAM.
MEMORY_FRACTION = 0.8


@dataclass(frozen=True)
class Compute:
    """Seconds of forward + backward on one device per batch, and where they come from:
    a measured throughput X (t = B / X) or the roofline of ``trainperf.predict.roofline``."""

    source: str
    throughput: float | None = None
    roofline: Callable[..., RooflineTime] | None = None  # called with batch=B
    curve: BatchCurve | None = None

    def seconds(self, batch: int) -> float:
        if self.curve is not None:
            return self.curve.seconds(batch)
        if self.roofline is None:
            return batch / self.throughput
        return batch * self.roofline(batch=batch).seconds_per_sample

    def batch_dependence(self) -> str:
        """How the time grows with the batch, in the words of the assumptions."""
        if self.curve is not None:
            return "a fixed part per step, the rest per sample"
        if self.roofline is None:
            return "time linear in the batch"
        return "weights move once per step, activations once per sample"

    def memory_bound_share(self, batch: int) -> float | None:
        """The share of the step in memory-bound ops (roofline only)."""
        return None if self.roofline is None else self.roofline(batch=batch).memory_bound_share

    def class_share(self, batch: int, kind: str) -> float | None:
        """The share of the step in ops of class ``kind`` (``roofline.op_class``; roofline
        only)."""
        if self.roofline is None:
            return None
        time = self.roofline(batch=batch)
        total = time.seconds_per_sample
        return time.class_seconds.get(kind, 0.0) / total if total else 0.0


def winograd_applies(device: Any, precision: str) -> bool:
    """cuDNN computes 3×3 stride-1 convolutions with Winograd transforms when it runs them
    on CUDA cores (fp32); on tensor cores (tf32, fp16, bf16) it mostly uses implicit GEMM,
    so direct FLOPs stand. CPUs: not assumed (oneDNN's Winograd is opt-in)."""
    return getattr(device, "kind", "gpu") == "gpu" and precision == "fp32"


def compute_rate(
    spec: ModelSpec,
    device: Any,
    precision: str,
    measured: Measured = NOTHING_MEASURED,
    size: int | None = None,
    winograd: bool | None = None,
    profile: OpProfile | None = None,
    kernels: bool = False,
) -> Compute:
    """t_compute: B/X from a measured throughput X, else the per-op roofline

        t = Σ_ops max(F_i / (peak · f), Q_i / (bandwidth · m))

    with f the achieved fraction of peak of compute-bound ops (given, or the catalog's
    default for the device and precision) and m = MEMORY_FRACTION; ``winograd`` divides
    the FLOPs of 3×3 stride-1 convolutions by 2.25 (None: ``winograd_applies``).
    ``profile``: the ops to price (default ``op_profile(spec, size)``). ``kernels``: when
    nothing was measured and the catalog knows the device's kernel rates
    (``Device.kernel_fractions``), each op's FLOPs go at its own kernel's rate (GEMMs at the
    GEMM fraction, fused attention at the attention kernel's) instead of one whole-step f:
    the operator model of an LLM step, whose MFU then follows each GPU's balance of compute,
    attention and memory bandwidth.
    """
    name = getattr(device, "id", "the device")
    allowed = available_precisions(device)
    if allowed and precision not in allowed:
        raise PredictError(f"{name} has no {precision} peak: allowed {', '.join(allowed)}")
    single_device_throughput = measured.single_device_throughput
    if single_device_throughput is not None:
        if not THROUGHPUT_MIN <= single_device_throughput <= THROUGHPUT_MAX:
            raise PredictError(
                f"single-device throughput must be from {THROUGHPUT_MIN:g} to "
                f"{THROUGHPUT_MAX:g} samples/s, got {single_device_throughput}"
            )
        return Compute(
            f"one device trains {single_device_throughput:g} samples/s",
            throughput=single_device_throughput,
        )
    if (curve := measured.batch_curve) is not None:
        batches = ", ".join(str(b) for b in curve.batches)
        return Compute(
            f"one device's step {curve.fixed_s * 1e3:.3g} ms + {curve.per_sample_s * 1e3:.3g} "
            f"ms per sample, fitted to batches {batches} ({curve.source})",
            curve=curve,
        )
    peak = device.peak_flops(precision)
    if not peak:
        raise PredictError(
            f"{name} has no {precision} peak FLOP/s: give a single-device throughput instead"
        )
    fraction, source = measured.achieved_fraction, ""
    per_kernel = None
    if fraction is None and kernels and hasattr(device, "kernel_fractions"):
        per_kernel = device.kernel_fractions(precision)
    if fraction is None:
        fraction, source = device.efficiency(precision), " (the catalog's default)"
    if fraction is None:
        raise PredictError(
            f"{name} has no default achieved fraction at {precision}: give one, "
            "or a single-device throughput"
        )
    if not ACHIEVED_FRACTION_MIN <= fraction <= 1:
        raise PredictError(
            f"achieved fraction must be from {ACHIEVED_FRACTION_MIN:g} to 1, got {fraction}"
        )
    bandwidth = getattr(device, "memory_bytes_per_s", None)
    if not bandwidth:
        raise PredictError(f"{name} has no memory bandwidth: give a single-device throughput")
    if winograd is None:
        winograd = winograd_applies(device, precision)
    profile = profile or op_profile(spec, size)
    roofline = partial(
        roofline_seconds_per_sample,
        profile,
        peak,
        bandwidth,
        compute_fraction=fraction,
        memory_fraction=MEMORY_FRACTION,
        activation_bytes=ACTIVATION_BYTES[precision],
        winograd=winograd,
        class_fractions=per_kernel,
    )
    flops = profile.flops_per_sample()
    rates = f"at {fraction:.1%}{source}"
    if per_kernel is not None:
        rates = (
            f"GEMMs at {per_kernel['gemm']:.1%} and fused attention at "
            f"{per_kernel['attention']:.1%} (the catalog's kernel rates), the rest at "
            f"{fraction:.1%}{source}"
        )
    return Compute(
        f"roofline per op: {flops / 1e9:.3g} GFLOP/sample {rates} of "
        f"{peak / 1e12:.4g} TFLOP/s {precision} peak, bytes at {MEMORY_FRACTION:.0%} of "
        f"{bandwidth / 1e9:.4g} GB/s" + (", Winograd 3×3 convolutions" if winograd else ""),
        roofline=roofline,
    )


def ready_fractions(buckets: Sequence[float], at_end: int = 0) -> list[float]:
    """When each bucket is ready, as a fraction of the backward pass: gradients appear
    uniformly over it, so a bucket is ready once the bytes up to and including it are done;
    the last ``at_end`` buckets (tied weights, whose gradient is complete only when the
    backward reaches their first use, GPT-2's token embedding) are ready when it ends, the
    others spread over the whole pass."""
    spread = list(buckets[: len(buckets) - at_end])
    total, done, out = sum(spread), 0.0, []
    for size in spread:
        done += size
        out.append(done / total if total > 0 else 1.0)
    return out + [1.0] * (len(buckets) - len(spread))


def ddp_step(
    t_fwd: float,
    t_bwd: float,
    buckets: Sequence[float],
    allreduce: Any,
    ready: Sequence[float] | None = None,
) -> tuple[float, float]:
    """(step_s, comm_s) of DDP's bucketed all-reduces overlapped with the backward pass.

    ``allreduce(n_bytes) -> seconds``; buckets in the order they become ready, at the
    fractions ``ready`` of the backward (``ready_fractions`` by default).
    """
    fractions = ready_fractions(buckets) if ready is None else ready
    end = comm = 0.0
    for size, fraction in zip(buckets, fractions, strict=True):
        t = allreduce(size)
        end = max(t_fwd + fraction * t_bwd, end) + t
        comm += t
    return max(t_fwd + t_bwd, end), comm


def contended_ddp_step(
    t_fwd: float,
    t_bwd: float,
    buckets: Sequence[float],
    allreduce: Any,
    contention: Contention,
    ready: Sequence[float] | None = None,
) -> tuple[float, float]:
    """(step_s, comm_s) of DDP's bucketed all-reduces beside a backward pass that they slow
    and that slows them (module doc, 3): while both run, the backward's work advances at
    1/s_c per second and the running all-reduce's at 1/s_m; alone, each at full speed.
    Buckets become ready as in ``ddp_step`` (which this equals when s_c = s_m = 1), one
    all-reduce at a time; ``comm_s`` is their time alone."""
    total = sum(buckets)
    needs = [allreduce(size) for size in buckets]
    if total <= 0 or not any(needs):
        return t_fwd + t_bwd, sum(needs)
    fractions = ready_fractions(buckets) if ready is None else ready
    # backward work (s alone) after which each bucket is ready
    ready = [fraction * t_bwd for fraction in fractions]
    compute_rate, comm_rate = 1 / contention.compute_slowdown, 1 / contention.comm_slowdown
    clock, work, running, started = t_fwd, 0.0, 0.0, 0
    while work < t_bwd or running > 0 or started < len(needs):
        if running <= 0 and started < len(needs) and ready[started] <= work:
            running, started = needs[started], started + 1
            continue
        if running <= 0:  # the backward alone, up to the next bucket ready
            clock, work = clock + ready[started] - work, ready[started]
        elif work >= t_bwd:  # the all-reduce alone, after the backward
            clock, running = clock + running, 0.0
        else:  # both: up to whichever ends first
            dt = min((t_bwd - work) / compute_rate, running / comm_rate)
            clock, work = clock + dt, min(t_bwd, work + dt * compute_rate)
            running = max(0.0, running - dt * comm_rate)
            if running < 1e-15 * max(needs):  # rounding: this one is done
                running = 0.0
    return max(clock, t_fwd + t_bwd), sum(needs)  # never below the compute, for rounding


def contention_of(device: Any, measured: Measured) -> Contention:
    """What communication costs compute on ``device``: as measured, else by where the
    collectives run (a CPU's on the cores: time-shared; a GPU's on their own engines)."""
    if measured.contention is not None:
        return measured.contention
    return TIME_SHARED if getattr(device, "kind", "gpu") == "cpu" else OWN_ENGINE


def check_placement(counts: Sequence[int], per_node: int, intra: Any, inter: Any) -> None:
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


def check_nics(nics_per_node: Any, per_node: int) -> None:
    """NICs per node: a positive integer no larger than the devices per node."""
    if isinstance(nics_per_node, bool) or not isinstance(nics_per_node, int):
        raise PredictError(f"NICs per node must be a positive integer, got {nics_per_node!r}")
    if not 1 <= nics_per_node <= per_node:
        raise PredictError(
            f"NICs per node must be between 1 and the {per_node} devices per node, "
            f"got {nics_per_node}"
        )


def link_costs(
    intra: Any | None, inter: Any | None, per_node: int, pcie_uplink: tuple[Any, int] | None
) -> tuple[dict[str, LinkCost | None], tuple[LinkCost, int] | None]:
    """The links' costs by scope, and the PCIe uplink's with the GPUs sharing it."""
    links = {
        k: LinkCost.of(v) if v is not None else None
        for k, v in (("intra", intra), ("inter", inter))
    }
    if pcie_uplink is None:
        return links, None
    uplink_link, sharing = pcie_uplink
    if not 1 <= sharing <= per_node:
        raise PredictError(
            f"GPUs per PCIe switch must be between 1 and the {per_node} per node, got {sharing}"
        )
    return links, (LinkCost.of(uplink_link), sharing)


def device_batches(batch_size: int, counts: Sequence[int], scaling: str) -> dict[int, int]:
    if scaling not in SCALINGS:
        raise PredictError(f"unknown scaling '{scaling}': allowed {', '.join(SCALINGS)}")
    if batch_size < 1:
        raise PredictError(f"batch size must be >= 1, got {batch_size}")
    for c in counts:
        if not splits_evenly(batch_size, c, scaling):
            raise PredictError(
                f"strong scaling: batch {batch_size} does not split evenly over {c} devices"
                + (" (fewer than 1 sample each)" if batch_size < c else "")
            )
    return {c: device_batch(batch_size, c, scaling) for c in counts}


def compute_curve(compute: Compute, prepared: Prepared, batch_size: int) -> list[dict]:
    """One device's compute time against its batch, as the rows take it (``--explain``): at
    1, 2, 4, ... up to the largest batch per device the prediction uses, and at each of
    those batches."""
    largest = max([batch_size, *prepared.batches.values()])
    batches = {2**k for k in range(largest.bit_length()) if 2**k <= largest}
    batches |= {batch_size, *prepared.batches.values()}
    return [
        {
            "device_batch": b,
            "compute_s": compute.seconds(b),
            "samples_per_s": b / compute.seconds(b),
        }
        for b in sorted(batches)
    ]


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
    compute = compute_rate(spec, device, precision, measured, shapes.size, winograd)
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

    def row(count: int, device_batch: int) -> dict[str, Any]:
        shared = contention.shared_host_compute(min(count, per_node))
        t_compute = compute.seconds(device_batch) * shared
        t_fwd = FORWARD_SHARE * t_compute

        def allreduce(n: float) -> float:
            return data_parallel_allreduce_s(
                n, count, per_node, links["intra"], links["inter"], uplink, nics
            )[0]

        if contention.free:
            synced, comm = ddp_step(t_fwd, t_compute - t_fwd, buckets, allreduce, ready)
        else:
            synced, comm = contended_ddp_step(
                t_fwd, t_compute - t_fwd, buckets, allreduce, contention, ready
            )
        straggler = measured.noise.straggler_s(count, t_compute)
        sync_overhead = measured.overhead.seconds(count)
        step = synced + straggler + sync_overhead
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
            "compute_s": t_compute,
            "comm_s": comm,
            "comm_exposed_s": synced - t_compute,
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
        + nics_note(placement),
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


def finite_prediction(prediction: dict[str, Any]) -> dict[str, Any]:
    """``prediction`` as it is, or PredictError naming its first number that is not finite
    (or not a 64-bit integer). The inputs are bounded (``trainperf.core.limits``) so that none
    overflows; this check makes sure that no input the bounds let through is answered
    with an infinite or NaN time or rate."""
    found = first_bad_number(prediction)
    if found is not None:
        where, problem = found
        raise PredictError(f"the inputs are outside what the model computes: {where}: {problem}")
    return prediction


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
        f"compute: {compute.source}; {compute.batch_dependence()}; forward:backward = 1:2",
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
        *(
            []
            if contention.neighbour_slowdown == 1
            else [
                "ranks sharing a host: each computes "
                f"{contention.neighbour_slowdown:.3g}x slower while the others compute "
                f"({contention.source})"
            ]
        ),
        *(
            []
            if contention.free
            else [
                "compute beside communication: while an all-reduce runs, the backward runs "
                f"at 1/{contention.compute_slowdown:.3g} of its speed and the all-reduce at "
                f"1/{contention.comm_slowdown:.3g} of its own ({contention.source})"
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
