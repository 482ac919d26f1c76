"""The process group of a distributed case, and agreement between its ranks.

Each rank, started by torchrun (trainperf.parallel.torchrun), joins the group: backend
nccl on GPUs (each process on ``cuda:LOCAL_RANK``), gloo on CPUs (the processes share the
cores: each gets ``cores // local processes`` threads unless the case says). Decisions of
the step policy (is the warm-up over? how many steps until the next check? stop?) are
taken on rank 0 and broadcast, so all ranks run the same number of steps and no collective
is left waiting. Control messages travel on a gloo group, apart from the NCCL stream that
carries gradients.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Ranks:
    """This process's place in the job, read from torchrun's environment."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @classmethod
    def from_env(cls) -> Ranks:
        env = os.environ
        return cls(
            int(env["RANK"]),
            int(env["WORLD_SIZE"]),
            int(env["LOCAL_RANK"]),
            int(env["LOCAL_WORLD_SIZE"]),
        )


class RankGroup:
    """The process group of a distributed case, and agreement between its ranks."""

    def __init__(self, device_type: str, timeout_s: float | None = None) -> None:
        import torch
        import torch.distributed as dist

        self.ranks = Ranks.from_env()
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":
            torch.cuda.set_device(self.ranks.local_rank)
            self.device = torch.device("cuda", self.ranks.local_rank)
        else:
            self.device = torch.device("cpu")
        timeout = datetime.timedelta(seconds=timeout_s or 1800)
        dist.init_process_group(backend, timeout=timeout)
        self.backend = backend
        self.control = dist.new_group(backend="gloo") if backend != "gloo" else None

    @property
    def is_leader(self) -> bool:
        return self.ranks.rank == 0

    def agree(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank."""
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def gather(self, value: Any) -> list[Any] | None:
        """Every rank's ``value`` on rank 0 (in rank order); None on the others."""
        import torch.distributed as dist

        gathered: list[Any] | None = [None] * self.ranks.world_size if self.is_leader else None
        dist.gather_object(value, gathered, dst=0, group=self.control)
        return gathered

    def close(self, finished: bool = False) -> None:
        """Leave the process group. ``finished`` (the rank's work ended without an error):
        first wait at a barrier until every rank has finished too, so that no rank tears
        its connections down while a peer still completes its last collective (gloo then
        aborts that peer with SIGABRT, which would turn a good result into a crash). After
        an error there is no barrier: the peers may never arrive, and torchrun ends them."""
        import torch.distributed as dist

        if not dist.is_initialized():
            return
        if finished:
            dist.barrier(group=self.control)
        dist.destroy_process_group()

    def __enter__(self) -> RankGroup:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.close(finished=exc_type is None)


def default_threads(local_world_size: int) -> int:
    """CPU threads per process when the local processes share the cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // local_world_size)


class AgreedPolicy:
    """A step policy whose decisions are rank 0's, broadcast to every rank.

    Every rank calls the same methods at the same points of the measured loop, so each
    call is one broadcast; during measurement those are the policy's check points only.
    """

    def __init__(self, policy: Any, group: RankGroup) -> None:
        self.policy, self.group = policy, group

    @property
    def ci_target(self) -> float | None:
        return self.policy.ci_target

    def warmup_done(self, warmup_s: Sequence[float], elapsed_s: float = 0.0) -> str | None:
        return self.group.agree(self.policy.warmup_done(warmup_s, elapsed_s))

    def steps_until_check(self, step_s: Sequence[float], elapsed_s: float) -> int:
        return self.group.agree(self.policy.steps_until_check(step_s, elapsed_s))

    def measure_done(self, step_s: Sequence[float], elapsed_s: float) -> str | None:
        return self.group.agree(self.policy.measure_done(step_s, elapsed_s))

    def __str__(self) -> str:
        return str(self.policy)
