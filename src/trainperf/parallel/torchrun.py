"""torchrun for trainperf: its command line, and ``python -m trainperf.parallel.torchrun``.

A case (or job) with more than one process runs as
``python -m trainperf.parallel.torchrun TORCHRUN_ARGS -m trainperf.launch.worker CASE RESULT``.
That module makes itself die with the trainperf parent (trainperf.parallel.lifeline),
names itself as the parent of the ranks, and replaces itself with torchrun (same pid: the
death signal survives ``exec``). The ranks, started by torchrun in sessions of their own,
tie themselves to torchrun the same way, so killing the sweep at any moment ends every rank.

One node: ``--standalone`` (a rendezvous on a free loopback port). Several nodes: c10d
rendezvous at an endpoint that is loopback (127.0.0.1) unless one is given, so nothing
listens on the network by accident; each node runs the same trainperf command.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from trainperf.parallel.group import Ranks
from trainperf.parallel.lifeline import PARENT_PID_ENV, die_with_parent

LOOPBACK_ENDPOINT = "127.0.0.1:29400"


def launched_by_torchrun() -> bool:
    """Whether torchrun started this process (its agent sets TORCHELASTIC_RUN_ID and RANK)."""
    return "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ


def torchrun_rank() -> int | None:
    """This process's rank when torchrun started it, else None."""
    return Ranks.from_env().rank if launched_by_torchrun() else None


def torchrun_args(
    nproc_per_node: int, nnodes: int, rdzv_endpoint: str | None, rdzv_id: str
) -> list[str]:
    """torchrun's arguments for a job of ``nnodes`` x ``nproc_per_node`` processes."""
    args = ["--nproc-per-node", str(nproc_per_node), "--max-restarts", "0"]
    if nnodes == 1 and rdzv_endpoint is None:
        return ["--standalone", *args]
    return [
        "--nnodes",
        str(nnodes),
        *args,
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        rdzv_endpoint or LOOPBACK_ENDPOINT,
        "--rdzv-id",
        rdzv_id,
    ]


def torchrun_command(
    worker_args: Sequence[str],
    nproc_per_node: int,
    nnodes: int = 1,
    rdzv_endpoint: str | None = None,
    rdzv_id: str = "trainperf",
) -> list[str]:
    """The child command line that runs ``trainperf.launch.worker WORKER_ARGS`` under torchrun."""
    return [
        sys.executable,
        "-m",
        "trainperf.parallel.torchrun",
        *torchrun_args(nproc_per_node, nnodes, rdzv_endpoint, rdzv_id),
        "-m",
        "trainperf.launch.worker",
        *worker_args,
    ]


def main() -> None:
    die_with_parent()
    os.environ[PARENT_PID_ENV] = str(os.getpid())  # torchrun will have this pid
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *sys.argv[1:]])


if __name__ == "__main__":
    main()
