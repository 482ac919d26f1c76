"""The data-parallel side of a convergence run, in one place.

A run joins no process group itself: under torchrun the worker has already set one up
(``trainperf.parallel.group.RankGroup``). When ``torch.distributed`` is initialised with
more than one rank, the trainer wraps the model in DistributedDataParallel
(``trainperf.parallel.wrap.wrap_ddp``), sums are all-reduced so every rank sees the global
evaluation, and stop requests are agreed on so every rank stops after the same step (a rank
that stopped alone would leave the others waiting in a collective).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class Peers:
    """This process's rank and world, and the collectives the trainer needs.

    With one process (no process group, or a group of one) every method is local.
    """

    def __init__(self) -> None:
        joined = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if joined else 0
        self.world = dist.get_world_size() if joined else 1
        self._control = None
        if self.distributed and dist.get_backend() != "gloo":
            # Stop flags are host values: agree on them over gloo, not on the GPU stream.
            self._control = dist.new_group(backend="gloo")

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    def device(self, name: str) -> torch.device:
        """The device of this rank: under a CUDA process group, the one the worker selected."""
        if name == "cuda" and self.distributed:
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device(name)

    def sum_(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` summed over the ranks, in place."""
        if self.distributed:
            dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return values

    def any(self, flag: bool) -> bool:
        """True on every rank if ``flag`` is True on any."""
        if not self.distributed:
            return flag
        box = torch.tensor([int(flag)])
        dist.all_reduce(box, op=dist.ReduceOp.MAX, group=self._control)
        return bool(box.item())

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier(group=self._control)
