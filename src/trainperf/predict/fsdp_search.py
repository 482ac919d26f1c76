"""The smallest number of devices on which FSDP holds a model (``trainperf.predict.fsdp``,
module doc 6; ``predict --devices min``).

The counts tried are 1, 2, 4, ... up to a node, then whole nodes, up to ``SEARCH_BOUND``; the
first whose memory per rank (``memory.sharded_memory``) fits the device is the answer, and
what does not shrink with more ranks (the floor) is reported when none does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainperf.models.spec import ModelSpec
from trainperf.predict.fsdp import Sharding, blocks_of
from trainperf.predict.inputs import PredictError
from trainperf.predict.memory import (
    WORKSPACE_FRACTION,
    ShardedMemory,
    attention_plan,
    sharded_memory,
)

SEARCH_BOUND = 4096  # devices: the smallest-count search stops here
DEFAULT_SHARDING = Sharding()  # trainperf's FSDP2 defaults: no checkpointing, resharded


@dataclass(frozen=True)
class DeviceSearch:
    """The smallest device count whose memory per rank fits, or None up to ``bound``."""

    smallest: int | None
    bound: int
    counts_tried: int
    memory: ShardedMemory  # at ``smallest``, else at the last count tried
    floor_bytes: float  # what does not shrink with more ranks

    def as_dict(self) -> dict[str, Any]:
        return {
            "smallest_devices": self.smallest,
            "bound": self.bound,
            "counts_tried": self.counts_tried,
            "memory_per_rank_bytes": self.memory.total_bytes,
            "available_bytes": self.memory.available_bytes,
            "floor_bytes": self.floor_bytes,
        }


def search_counts(per_node: int, bound: int = SEARCH_BOUND) -> list[int]:
    """1, 2, 4, ... below ``per_node``, ``per_node``, then whole nodes, up to ``bound``."""
    counts, count = [], 1
    while count < per_node and count <= bound:
        counts.append(count)
        count *= 2
    return counts + list(range(per_node, bound + 1, per_node))


def smallest_devices(
    spec: ModelSpec,
    device: Any,
    per_node: int,
    batch_size: int,
    precision: str,
    size: int | None = None,
    sharding: Sharding = DEFAULT_SHARDING,
    bound: int = SEARCH_BOUND,
) -> DeviceSearch:
    """The smallest number of ``device`` (``per_node`` to a node) on which each rank holds
    its share of the model ``spec`` at ``batch_size`` per device (module doc, 6)."""
    capacity = getattr(device, "memory_bytes", None)
    if not capacity:
        name = getattr(device, "id", "the device")
        raise PredictError(f"{name} has no memory capacity to fit: give a catalog device")
    if batch_size < 1:
        raise PredictError(f"batch size must be >= 1, got {batch_size}")
    gpu = getattr(device, "kind", "gpu") != "cpu"
    counts = blocks_of(
        spec, size, attention_plan(gpu, precision, getattr(device, "capability", None))
    )
    options = dict(
        param_bytes=sharding.param_bytes(precision),
        reduce_bytes=sharding.reduce_bytes(precision),
        checkpointing=sharding.activation_checkpointing,
        reshard_after_forward=sharding.reshard_after_forward,
    )
    tried = 0
    for count in search_counts(per_node, bound):
        tried += 1
        memory = sharded_memory(counts, batch_size, precision, capacity, ranks=count, **options)
        if memory.fits:
            break
    floor = memory.total_bytes - memory.sharded_state_bytes * (1 + WORKSPACE_FRACTION)
    return DeviceSearch(count if memory.fits else None, bound, tried, memory, floor)
