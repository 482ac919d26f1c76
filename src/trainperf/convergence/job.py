"""One ``trainperf train`` run inside its child process (or on each torchrun rank).

The parent (``trainperf.cli.train``) starts this through ``trainperf.launch.worker`` with a document
of kind ``train``; under torchrun every rank joins the process group here and trains its
shard. Rank 0 writes the progress file (one JSON line per evaluation, which the parent
stores as it arrives) and, when asked, the MLPerf log. ``launched_at`` in the document is
when the parent started this job (its wall clock): start-up is counted from there.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from trainperf.parallel.group import RankGroup, default_threads
from trainperf.parallel.torchrun import launched_by_torchrun

PROGRESS_FILE = "progress.jsonl"


def run_training(document: dict[str, Any], workdir: Path) -> dict[str, Any] | None:
    """Train as ``document["config"]`` says; rank 0 returns ``{"metrics": outcome}``."""
    from trainperf.case.training import TrainConfig
    from trainperf.convergence.trainer import train

    config = TrainConfig(**document["config"])
    distributed = launched_by_torchrun()
    group = RankGroup(config.device, document.get("timeout_s")) if distributed else nullcontext()
    with group as job:
        leader = job is None or job.is_leader
        if config.device == "cpu" and job is not None:
            torch.set_num_threads(default_threads(job.ranks.local_world_size))
        listeners = []
        if leader and document.get("mllog"):
            from trainperf.convergence.mllog import MLPerfLogger

            listeners.append(
                MLPerfLogger(
                    Path(document["mllog"]),
                    benchmark=config.model,
                    system_name=document.get("system_name", "unknown"),
                )
            )
        progress = workdir / PROGRESS_FILE if leader else None
        outcome = train(
            config, listeners, progress_path=progress, launched_at=document.get("launched_at")
        )
        return None if outcome is None else {"metrics": outcome}
