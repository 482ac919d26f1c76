"""The parallel modes a case runs in: one definition for the case, the CLI and the reports.

Kept in a module without torch or pydantic so that the CLI can offer the choice without
importing them.
"""

from __future__ import annotations

from typing import Literal, get_args

# auto: ddp above one device (mesh with framework jax), none otherwise (trainperf.case).
# dp: DataParallel, one process over the node's GPUs; mesh: jax.sharding over the devices
# of one process (trainperf.jax.step); ddp: DistributedDataParallel, one process per
# device; fsdp: FSDP2, parameters, gradients and optimizer state sharded over the ranks.
ParallelMode = Literal["auto", "none", "ddp", "dp", "mesh", "fsdp"]
PARALLEL_MODES: tuple[str, ...] = get_args(ParallelMode)

# The modes that run one process per device under torchrun (trainperf.parallel).
RANK_MODES: tuple[str, ...] = ("ddp", "fsdp")
