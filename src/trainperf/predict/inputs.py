"""What a prediction takes, checked: the workload, the placement of the ranks, what was
measured, and the rows every prediction (DDP, FSDP) lays out alike (``trainperf.predict.model``
has the model)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainperf.case.modes import SCALINGS, device_batch, splits_evenly
from trainperf.case.precision import PRECISIONS  # what a case trains in
from trainperf.core.limits import first_bad_number
from trainperf.models.attention import AttentionPlan
from trainperf.models.spec import ModelSpec
from trainperf.predict.comm import LinkCost
from trainperf.predict.memory import attention_plan
from trainperf.predict.terms import (
    NO_NOISE,
    NO_OVERHEAD,
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
    at one batch when the batch per device changes, the ``contention`` of compute and
    communication running at once (``trainperf.predict.terms``), and
    ``memory_bytes_per_s``: the bytes a rank streams per second while every rank of its host
    streams too (STREAM add, ``micro collective --under-load``), the rate of DDP's copies
    of the gradients into and out of its buckets (replaces the catalog's bandwidth)."""

    single_device_throughput: float | None = None
    achieved_fraction: float | None = None
    noise: StepNoise = NO_NOISE
    overhead: Overhead = NO_OVERHEAD
    batch_curve: BatchCurve | None = None  # the step time against the batch (terms)
    contention: Contention | None = None  # compute beside communication (terms)
    memory_bytes_per_s: float | None = None  # one rank's streaming rate, all ranks streaming
    # The batch single_device_throughput was measured at (None: the workload's batch), or the
    # batch of the throughput an achieved_fraction was solved from (None: given alone).
    throughput_batch: int | None = None


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


def node_path_notes(placement: Placement) -> list[str]:
    """The assumptions a prediction adds for a node's path to the network: several NICs
    (none for one), the GPUs sharing a PCIe switch's uplink."""
    k, g = placement.nics_per_node, placement.per_node
    notes = []
    if k != 1:
        busiest = math.ceil(g / k)
        uneven = "" if g % k == 0 else f", {g} GPUs not dividing evenly over {k} NICs"
        notes.append(
            f"{k} NICs per node: the inter-node phase runs the {g} GPUs' rings over {k} NICs "
            f"in parallel, each GPU getting 1/{busiest} of a NIC's bandwidth (the busiest "
            f"NIC's share{uneven}; latency unchanged)"
        )
    if placement.pcie_uplink is not None:
        link, sharing = placement.pcie_uplink
        uneven = "" if g % sharing == 0 else f" (the fullest switch's, {g} not dividing by it)"
        notes.append(
            f"{sharing} GPUs behind each PCIe switch share its {getattr(link, 'id', 'PCIe')} "
            f"uplink to the NIC: each gets 1/{sharing} of it in the inter-node phase{uneven}"
        )
    return notes


def uplink_input(placement: Placement) -> dict[str, Any] | None:
    uplink = placement.pcie_uplink
    return None if uplink is None else {"link": getattr(uplink[0], "id", None), "gpus": uplink[1]}


def available_precisions(device: Any) -> list[str]:
    return [p for p in PRECISIONS if device.peak_flops(p)]


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
    if not getattr(uplink_link, "is_pcie_generation", True):  # a LinkCost has no id to check
        raise PredictError(
            f"a PCIe switch's uplink must be a PCIe link, got {getattr(uplink_link, 'id', '?')}"
        )
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
