"""An sbatch script that runs a suite, or one training run, across the nodes of a Slurm
allocation.

Slurm starts one trainperf per node (``srun --ntasks-per-node=1``); each sets every case to
span all the allocated nodes (``--set nodes=$SLURM_NNODES``) and meets the others at a
torchrun rendezvous on the first node of the allocation. ``--gpus-per-node G`` allocates G
GPUs on each node and, where the cases of the suite all ask for one device count, sets
``devices=G`` in every case so that each uses them all (``case_sets``). A suite whose cases
differ in their devices (``scaling``: 1, 2, 4 and 8 per node) keeps them, each case over
every node: one count for all would make its cases equal. A case asking for more devices
than a node has is skipped there, as ``trainperf run`` skips it on one machine.

Every node must run the same cases in the same order, so the script measures every case
again (``--fresh``) instead of resuming: a node resuming on its own would wait at a
rendezvous the others never join; and every node shuffles the runs of the cases with the
same seed, the job id (``--order-seed $SLURM_JOB_ID``).

A training job (``train_sbatch_script``) runs ``trainperf train`` with the user's model and
options on every node, ``--nodes $SLURM_NNODES`` and the same rendezvous: one run over all
the nodes, as ``train --nodes`` runs it by hand.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Sequence

from trainperf.case.suite import Suite

RDZV_PORT = 29400
# sbatch's --time forms (sbatch(1), "-t, --time"): minutes, minutes:seconds,
# hours:minutes:seconds, days-hours, days-hours:minutes, days-hours:minutes:seconds; 0 is no
# limit. ASCII digits: Python's \d would take '٣', which Slurm reads as no number.
_TIME = re.compile(r"[0-9]+(:[0-9]{2}){0,2}|[0-9]+-[0-9]{1,2}(:[0-9]{2}){0,2}")
# Slurm partition names, one or a comma list; nothing that could end the #SBATCH line.
_PARTITION = re.compile(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*")


class SlurmError(ValueError):
    """A bad option for the script; the message is one line."""


def safe_name(name: str) -> str:
    """``name`` with every character but letters, digits, ``_.-`` made ``_``: fit for a job
    name and a file name (a suite's name is user text)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def case_sets(suite: Suite, gpus_per_node: int | None, overrides: Sequence[str] = ()) -> list[str]:
    """The case fields the script sets beyond the nodes: the user's ``overrides`` (``--set``,
    already applied to ``suite``), preceded by ``devices=G`` when ``--gpus-per-node G`` is
    given, the user sets no ``devices`` and the cases all ask for one device count."""
    if gpus_per_node is None:
        return list(overrides)
    if any(text.partition("=")[0].strip() == "devices" for text in overrides):
        return list(overrides)
    if len({planned.fields["devices"] for planned in suite.planned}) > 1:
        return list(overrides)  # a scaling suite: its device counts are what it measures
    return [f"devices={gpus_per_node}", *overrides]


def _directives(
    job_name: str,
    nodes: int,
    gpus_per_node: int | None,
    time_limit: str,
    partition: str | None,
) -> list[str]:
    """The #SBATCH options of a job, or SlurmError for a time or partition Slurm would
    misread (or that could end the directive's line)."""
    if not _TIME.fullmatch(time_limit):  # match() would let a trailing newline through
        raise SlurmError(
            f"--time {time_limit!r} is not a Slurm time: use MINUTES, HH:MM:SS or "
            "D-HH[:MM[:SS]] in digits 0-9"
        )
    if partition is not None and not _PARTITION.fullmatch(partition):
        raise SlurmError(
            f"--partition {partition!r} is not a Slurm partition: use letters, digits, "
            "'_', '.' and '-' (several separated by commas)"
        )
    directives = [
        f"--job-name=trainperf-{safe_name(job_name)}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--time={time_limit}",
        "--output=trainperf-%j.out",
    ]
    if gpus_per_node:
        directives.append(f"--gpus-per-node={gpus_per_node}")
    if partition:
        directives.append(f"--partition={partition}")
    return directives


def _script(directives: list[str], command: str, port: int, stored: str) -> str:
    """The script: the directives, the rendezvous on the first node, one srun per node."""
    lines = ["#!/bin/bash", *(f"#SBATCH {d}" for d in directives)]
    lines += [
        f"# Written by `trainperf slurm`. {stored}",
        "# The database should be on a file system with working SQLite locks (or give",
        "# each node its own --db and merge them later).",
        "set -euo pipefail",
        'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"RDZV_PORT={port}",
        f"srun --ntasks-per-node=1 --nodes=$SLURM_NNODES {command}",
        "",
    ]
    return "\n".join(lines)


def _trainperf() -> str:
    return f"{shlex.quote(sys.executable)} -m trainperf"


def sbatch_script(
    suite: str,
    nodes: int,
    gpus_per_node: int | None = None,
    time_limit: str = "02:00:00",
    partition: str | None = None,
    db: str = "trainperf.db",
    overrides: tuple[str, ...] = (),
    port: int = RDZV_PORT,
) -> str:
    """The text of the sbatch script (``suite``: a built-in name or a file path), which sets
    ``nodes`` and ``overrides`` (``case_sets``) in every case."""
    directives = _directives(suite, nodes, gpus_per_node, time_limit, partition)
    sets = ["--set", "nodes=$SLURM_NNODES"]
    for override in overrides:
        sets += ["--set", shlex.quote(override)]
    command = " ".join(
        [_trainperf(), "run", shlex.quote(suite), *sets]
        + ['--rdzv-endpoint "$HEAD:$RDZV_PORT"', "--db", shlex.quote(db), "--fresh"]
        + ['--order-seed "$SLURM_JOB_ID"']
    )
    return _script(
        directives,
        command,
        port,
        "The result of each case is stored by the node that holds rank 0.",
    )


# What the script sets in a training job's command itself: not the user's to give.
TRAIN_SET_BY_SCRIPT = ("--nodes", "--rdzv-endpoint", "--db", "--json")


def train_sbatch_script(
    train_args: Sequence[str],
    nodes: int,
    gpus_per_node: int | None = None,
    time_limit: str = "02:00:00",
    partition: str | None = None,
    db: str = "trainperf.db",
    port: int = RDZV_PORT,
) -> str:
    """The text of an sbatch script that runs ``trainperf train TRAIN_ARGS`` (a model and
    train's options, checked by the caller) over every node of the allocation, with
    ``--devices G`` when ``--gpus-per-node G`` is given: one training run whose time to
    target is stored by the node of rank 0 (train's own multi-node path)."""
    given = {arg.partition("=")[0] for arg in train_args if arg.startswith("--")}
    if clash := sorted(given & set(TRAIN_SET_BY_SCRIPT)):
        raise SlurmError(
            f"--train sets {', '.join(clash)}: leave it out, the script sets "
            f"{', '.join(TRAIN_SET_BY_SCRIPT)} itself"
        )
    if gpus_per_node and "--devices" in given:
        raise SlurmError("--train gives --devices and so does --gpus-per-node: give one")
    model = next((arg for arg in train_args if not arg.startswith("-")), "train")
    directives = _directives(f"train-{model}", nodes, gpus_per_node, time_limit, partition)
    devices = ["--devices", str(gpus_per_node)] if gpus_per_node else []
    command = " ".join(
        [_trainperf(), "train", *map(shlex.quote, train_args), *devices]
        + ["--nodes", "$SLURM_NNODES", '--rdzv-endpoint "$HEAD:$RDZV_PORT"']
        + ["--db", shlex.quote(db)]
    )
    return _script(directives, command, port, "The run is stored by the node that holds rank 0.")
