"""Train a model on real data until it reaches a target quality: time to accuracy.

Timing follows MLPerf Training: model build and loader creation are "init" and not
timed; the clock starts at run start, runs through training and evaluation alike, and
stops at the first evaluation that meets the target (``time_to_target_s``) or at the end.
Every evaluation is kept with its time since run start and the global samples seen, so a
run that never reaches the target still yields its accuracy curve.

The optimizer is the config's (SGD with momentum and weight decay, AdamW, or LARS: SGD with
momentum and a per-layer trust ratio, trainperf.step.lars), or when it names none the
spec's; momentum is SGD's and LARS's only. Its lr is set before every step from the
schedule at the fractional epoch.

Besides MLPerf's clock the run reports where the wall-clock time to the target went
(``time_split``, see trainperf.convergence.epochs): start-up from the process launch
(``launched_at``, the launcher's wall clock) to run start, then training, data loading and
evaluation; the four add up to ``total_s``.
Model, optimizer, precision (autocast to bf16/fp16, fp16 with a GradScaler) and DDP
wrapping come from the one training step of ``trainperf.step.training_step`` (``build_model``,
``make_step``), as the benchmark's and the equivalence check's do. The rest of data
parallelism (DDP under torchrun) lives in ``trainperf.parallel.peers``; only rank 0
calls listeners and writes the progress file.

Progress file: one JSON object per line, flushed and fsync'ed, so a parent process can
tail it and keep the evaluations of a run that dies: ``{"event": "start", "config": ...}``,
then ``{"event": "eval", ...evaluation..., "epoch_of": max_epochs, "eta_s": ...}`` after
each evaluation (``eta_s``: the remaining epochs at the mean epoch time so far, evaluation
included), then ``{"event": "stop", "status": ..., "reached": ...}``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainperf import models
from trainperf.case.schedule import parse_schedule
from trainperf.case.training import TrainConfig
from trainperf.convergence.epochs import Listener, Loaders, ProgressFile, Run
from trainperf.models.spec import (
    CausalLM,
    ImageClassification,
    ModelSpec,
    MultipleChoice,
    SizeError,
)
from trainperf.parallel.peers import Peers
from trainperf.parallel.wrap import wrap_ddp
from trainperf.step.training_step import StepOptions, build_model, make_step


def train(
    config: TrainConfig,
    listeners: Sequence[Listener] = (),
    progress_path: Path | None = None,
    stop: Callable[[], bool] = lambda: False,
    *,
    loaders: Loaders | None = None,
    launched_at: float | None = None,
) -> dict[str, Any] | None:
    """Train until the target or ``max_epochs``; rank 0 returns the result, others None.

    ``launched_at`` (``time.time()``) is when the launcher started this process: start-up
    is counted from there; None counts it from this call (model, data and wrapping only).

    ``loaders`` replaces the data source of ``config.data`` (tests, notebooks): an object
    with ``train``, ``eval``, ``num_classes``, ``train_samples`` and ``eval_samples`` as
    ``trainperf.datasets.make_loaders`` returns. ``stop()`` is polled between steps; when
    it says True the run ends after the current step with status "aborted".
    """
    began = {"at": time.time(), "from": "train() call"}
    if launched_at is not None:
        began = {"at": launched_at, "from": "process launch"}
    peers = Peers()
    if config.world > 1 and not peers.distributed:
        raise ValueError(
            f"devices={config.devices} x nodes={config.nodes} needs one process per device: "
            "run under torchrun with the process group initialised (trainperf launches it so)"
        )
    schedule = parse_schedule(config.lr_schedule, config.warmup_epochs)
    spec = models.get(config.model)
    requested = requested_size(spec, config)
    device = peers.device(config.device)
    listening = list(listeners) if peers.is_leader else []
    progress = ProgressFile(progress_path) if progress_path and peers.is_leader else None

    seed_everything(config.seed)
    for listener in listening:
        listener.init_start(config.to_dict() | {"world_size": peers.world})
    model = build_model(spec, device, config.precision, config.seed, peers.rank)
    if loaders is None:
        loaders = make_loaders(config, spec, requested, device, peers)
    if loaders.eval is None:
        raise ValueError(f"{config.data} has no evaluation split: time to accuracy needs one")
    check_classes(spec, loaders.num_classes, config.target_metric)
    size = getattr(loaders, "size", None) or spec.resolve_size(requested)
    hyper = {
        "optimizer": config.optimizer,
        "lr": schedule.lr_at(0.0, config.max_epochs),
        "momentum": config.momentum,
        "weight_decay": config.weight_decay,
    }
    wrap = (lambda built: wrap_ddp(built, device)) if peers.distributed else None
    options = StepOptions(config.precision)
    step = make_step(spec, model, device, options, wrap=wrap, hyper=hyper)
    for listener in listening:
        listener.init_stop()
    if progress:
        progress.write({"event": "start", "config": config.to_dict(), "world_size": peers.world})
    peers.barrier()  # every rank starts the clock together

    run = Run(
        config=config,
        spec=spec,
        step=step,
        schedule=schedule,
        loaders=loaders,
        device=device,
        peers=peers,
        listeners=listening,
        progress=progress,
        stop=stop,
        began=began,
    )
    info = run_info(config, spec, schedule.describe(), loaders, peers.world, size)
    return run.execute(info)


def run_info(
    config: TrainConfig,
    spec: ModelSpec,
    schedule: dict[str, Any],
    loaders: Loaders,
    world: int,
    size: int,
) -> dict[str, Any]:
    """What ``Listener.run_start`` receives (the hyper-parameters of an MLPerf log)."""
    optimizer = config.optimizer or spec.optimizer
    return {
        "model": config.model,
        "data": config.data,
        "global_batch_size": config.batch_size * world,
        "optimizer": optimizer,
        "base_lr": schedule["lrs"][0],
        "momentum": config.momentum if optimizer in ("sgd", "lars") else None,
        "weight_decay": config.weight_decay,
        "warmup_epochs": config.warmup_epochs,
        "schedule": schedule,
        "train_samples": loaders.train_samples,
        "eval_samples": loaders.eval_samples,
        "seed": config.seed,
        "target_metric": config.target_metric,
        "target_value": config.target_value,
        "max_epochs": config.max_epochs,
        "world_size": world,
        "precision": config.precision,
        spec.size_name: size,
    }


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's generators (all devices) from one seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def requested_size(spec: ModelSpec, config: TrainConfig) -> int | None:
    """The image size or sequence length the config asks for, checked against the model;
    None leaves it to the data (CIFAR-10: 32) or the model. SizeError for the other kind."""
    other = "seq_len" if spec.size_name == "image_size" else "image_size"
    if getattr(config, other) is not None:
        raise SizeError(f"{spec.name} takes {spec.size_name}, not {other}")
    size = getattr(config, spec.size_name)
    return None if size is None else spec.resolve_size(size)


def check_classes(spec: ModelSpec, num_classes: int | None, target_metric: str) -> None:
    """Refuse image data whose class count differs from the model's, and accuracy targets
    the model cannot be scored on. ``num_classes`` None: not class data (tokens)."""
    task = spec.task
    if isinstance(task, ImageClassification) and task.num_classes != num_classes:
        raise ValueError(
            f"{spec.name} predicts {task.num_classes} classes but the data has {num_classes}: "
            f"choose a model with {num_classes} classes"
        )
    check_metric(spec, target_metric)


def check_metric(spec: ModelSpec, target_metric: str) -> None:
    """Refuse an accuracy target the model cannot be scored on (no data needed: the CLI
    checks it before a process starts)."""
    if target_metric == "eval_loss":
        return
    task = spec.task
    if not isinstance(task, (ImageClassification, MultipleChoice, CausalLM)):
        raise ValueError(f"{spec.name} has no accuracy to reach: use target_metric eval_loss")
    if isinstance(task, MultipleChoice):
        classes = task.num_choices
    elif isinstance(task, CausalLM):
        classes = task.vocab_size
    else:
        classes = task.num_classes
    if target_metric == "top5" and classes < 5:
        raise ValueError(f"target top5 needs at least 5 classes; {spec.name} here has {classes}")


def make_loaders(
    config: TrainConfig, spec: ModelSpec, size: int | None, device: torch.device, peers: Peers
) -> Loaders:
    """This rank's shard of ``config.data`` (see ``trainperf.datasets``)."""
    from trainperf import datasets

    source = datasets.parse_data(config.data)
    if source.is_synthetic:
        raise ValueError(
            "time to accuracy needs real data: cifar10:DIR, imagefolder:DIR, tokens:FILE "
            "or jpeg-sample, not synthetic"
        )
    return datasets.make_loaders(
        source=source,
        spec=spec,
        size=size,
        batch_size=config.batch_size,
        workers=config.workers,
        device=device,
        seed=config.seed,
        rank=peers.rank,
        world=peers.world,
        drop_last=True,
    )
