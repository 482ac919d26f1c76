"""The parallel modes a case runs in, how it is launched and how its batch is split over
its devices: one definition for the case, the runner, the worker, the CLI, the predictor
and the reports.

Kept in a module without torch or pydantic so that the CLI can offer the choice without
importing them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

# auto: ddp above one device (mesh with framework jax), none otherwise (trainperf.case.spec).
# dp: DataParallel, one process over the node's GPUs; mesh: jax.sharding over the devices
# of one process (trainperf.jax.step); ddp: DistributedDataParallel, one process per
# device; fsdp: FSDP2, parameters, gradients and optimizer state sharded over the ranks.
ParallelMode = Literal["auto", "none", "ddp", "dp", "mesh", "fsdp"]
PARALLEL_MODES: tuple[str, ...] = get_args(ParallelMode)

# The modes that run one process per device under torchrun (trainperf.parallel).
RANK_MODES: tuple[str, ...] = ("ddp", "fsdp")

# weak: the batch size is each device's; strong: it is the whole step's, split evenly.
Scaling = Literal["weak", "strong"]
SCALINGS: tuple[str, ...] = get_args(Scaling)

# How a case is launched: "torchrun", one process per device (ddp, fsdp: trainperf.parallel);
# "jax", one process over its devices (trainperf.jax); "process", one PyTorch process
# (none, dp).
LaunchKind = Literal["torchrun", "jax", "process"]


def device_count(fields: Mapping[str, Any]) -> int:
    """Devices of the case given as a dict of its fields, over all its nodes."""
    return fields.get("devices", 1) * fields.get("nodes", 1)


def parallel_mode(fields: Mapping[str, Any]) -> str:
    """``parallel`` of a case dict with ``auto`` resolved: above one device ddp, or mesh
    (one process over all devices) with framework jax."""
    mode = fields.get("parallel", "auto")
    if mode != "auto":
        return mode
    if device_count(fields) == 1:
        return "none"
    return "mesh" if fields.get("framework", "pytorch") == "jax" else "ddp"


def launch_kind(fields: Mapping[str, Any]) -> LaunchKind:
    """How the case given as a dict of its fields is launched: the one rule of the runner
    (torchrun or not), the worker (which benchmark runs) and ``trainperf.step.benchmark``."""
    if fields.get("framework", "pytorch") == "jax":
        return "jax"
    return "torchrun" if parallel_mode(fields) in RANK_MODES else "process"


def device_batch(batch_size: int, replicas: int, scaling: str) -> int:
    """Samples per micro-batch on each of ``replicas`` devices working on one step: the
    batch size itself under weak scaling, its share under strong scaling (rounded down:
    ``splits_evenly`` says whether it is exact). The one rule of the case, the parallel
    equivalence check and the predictor."""
    return batch_size // replicas if scaling == "strong" else batch_size


def splits_evenly(batch_size: int, replicas: int, scaling: str) -> bool:
    """Whether every device gets the same share of the batch (always under weak scaling)."""
    return scaling != "strong" or batch_size % replicas == 0
