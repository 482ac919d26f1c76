"""The timed part of a convergence run: epochs of training, evaluations, the stop test.

``trainer.train`` builds everything (init, untimed) and hands it to ``Run.execute``, which
owns the clock. Per epoch it keeps the global samples, the training time (evaluation
excluded), the mean training loss over all ranks and the time spent blocked in
``next()`` on the training loader (``data_wait_s``; rank 0's own). The ``lr`` of an epoch
(and of its evaluation) is the one its last step used. The result's ``time_split`` says
where the wall-clock time to the target went (trainperf.convergence.time_split).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from trainperf.case.schedule import Schedule
from trainperf.convergence.evaluation import evaluate, reached
from trainperf.convergence.time_split import time_split
from trainperf.core import strict_json
from trainperf.measure.divergence import Diverged, LossWatch
from trainperf.models.spec import ModelSpec
from trainperf.parallel.peers import Peers
from trainperf.step.training_step import Step

if TYPE_CHECKING:
    from trainperf.case.training import TrainConfig

# Under DDP, ranks agree on a stop request every this many steps (one small gloo
# all-reduce): every rank must leave the loop after the same step.
STOP_AGREE_STEPS = 10


class Listener(Protocol):
    """Told of a run's phases (rank 0 only), e.g. to write an MLPerf log. Epochs from 1."""

    def init_start(self, info: dict) -> None: ...  # the config and world_size
    def init_stop(self) -> None: ...
    def run_start(self, info: dict) -> None: ...  # see run_info() for the keys
    def epoch_start(self, epoch: int, samples_seen: int) -> None: ...
    def epoch_stop(self, epoch: int, samples_seen: int) -> None: ...
    def eval_start(self, epoch: int, samples_seen: int) -> None: ...
    def eval_stop(self, epoch: int, samples_seen: int, evaluation: dict) -> None: ...
    def run_stop(self, status: str, reached: bool) -> None: ...  # "success" or "aborted"


class ProgressFile:
    """Appends JSON lines to ``path``, each flushed to disk before the run goes on."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(strict_json.dumps(record) + "\n")
            out.flush()
            os.fsync(out.fileno())


class Loaders(Protocol):
    """This rank's data, as ``trainperf.datasets.make_loaders`` returns it."""

    train: Any  # iterable of (inputs, targets) batches, with len()
    eval: Any  # None: no evaluation split (refused)
    num_classes: int | None  # None for token data
    train_samples: int
    eval_samples: int


@dataclass
class Run:
    """Everything a run trains and reports to; ``execute`` runs it (see the module doc)."""

    config: TrainConfig
    spec: ModelSpec
    step: Step  # the model, its optimizer and precision; DDP-wrapped across ranks
    schedule: Schedule
    loaders: Loaders
    device: torch.device
    peers: Peers
    listeners: Sequence[Listener]
    progress: ProgressFile | None
    stop: Callable[[], bool]
    # When start-up began: {"at": time.time() then, "from": "process launch" or "train() call"}
    began: dict[str, Any] | None = None

    def execute(self, info: dict[str, Any]) -> dict[str, Any] | None:
        """Train and evaluate until the target, ``max_epochs`` or a stop; rank 0's result."""
        config = self.config
        steps_per_epoch = len(self.loaders.train)
        if steps_per_epoch == 0:
            raise ValueError("the training data gives no batch: fewer samples than batch_size")
        self._notify("run_start", info)
        self.start = time.perf_counter()
        began = self.began or {"at": time.time(), "from": "run start"}
        startup_s = time.time() - began["at"]
        epochs: list[dict[str, Any]] = []
        evaluations: list[dict[str, Any]] = []
        time_to_target_s = None
        samples, aborted = 0, False
        try:
            for epoch in range(1, config.max_epochs + 1):
                self._notify("epoch_start", epoch, samples)
                record, aborted = self._train_epoch(epoch, steps_per_epoch)
                samples += record["samples"]
                epochs.append(record)
                self._notify("epoch_stop", epoch, samples)
                if aborted:
                    break
                if epoch % config.eval_every and epoch != config.max_epochs:
                    continue
                evaluation = self._evaluate(epoch, samples, record)
                evaluations.append(evaluation)
                if reached(evaluation, config.target_metric, config.target_value):
                    time_to_target_s = evaluation["time_s"]
                    break
        except BaseException:
            self._notify("run_stop", "aborted", False)
            raise
        run_s = time.perf_counter() - self.start
        success = time_to_target_s is not None
        status = "aborted" if aborted else "ok"
        self._notify("run_stop", "success" if success else "aborted", success)
        if self.progress:
            self.progress.write({"event": "stop", "status": status, "reached": success})
        if not self.peers.is_leader:
            return None
        train_s = sum(e["train_s"] for e in epochs)
        clock_s = run_s if time_to_target_s is None else time_to_target_s
        split = time_split(startup_s, began["from"], clock_s, success, epochs, evaluations)
        return {
            "status": status,
            "reached": success,
            "time_to_target_s": time_to_target_s,
            "run_s": run_s,
            "evaluations": evaluations,
            "epochs": epochs,
            "epochs_run": sum(e["complete"] for e in epochs),
            "samples_seen": samples,
            "train_samples": self.loaders.train_samples,
            "eval_samples": self.loaders.eval_samples,
            "global_batch": config.batch_size * self.peers.world,
            "world_size": self.peers.world,
            "schedule": self.schedule.describe(),
            "target_metric": config.target_metric,
            "target_value": config.target_value,
            "final_top1": evaluations[-1]["top1"] if evaluations else None,
            "final_eval_loss": evaluations[-1]["eval_loss"] if evaluations else None,
            "data_wait_share": sum(e["data_wait_s"] for e in epochs) / train_s,
            "train_samples_per_s": samples / train_s,
            "time_split": split,
        }

    def _train_epoch(self, epoch: int, steps_per_epoch: int) -> tuple[dict[str, Any], bool]:
        """One epoch (numbered from 1); its record and whether a stop cut it short."""
        loader, peers = self.loaders.train, self.peers
        set_epoch(loader, epoch - 1)
        self.step.model.train()
        # loss sum, steps, samples (this rank's; summed over ranks at the end)
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)
        wait_s, lr, requested, aborted = 0.0, 0.0, False, False
        losses = LossWatch()  # checked once the epoch is over: no wait per step
        start = time.perf_counter()
        batches = iter(loader)
        for step in range(steps_per_epoch):
            before = time.perf_counter()
            batch = next(batches, None)
            wait_s += time.perf_counter() - before
            if batch is None:
                break
            inputs, targets = batch
            lr = self.schedule.lr_at(epoch - 1 + step / steps_per_epoch, self.config.max_epochs)
            for group in self.step.optimizer.param_groups:
                group["lr"] = lr
            on_device = (
                inputs.to(self.device, non_blocking=True),
                targets.to(self.device, non_blocking=True),
            )
            loss = self.step(lambda: on_device).detach()  # noqa: B023 (called at once)
            losses.add(loss)
            totals[0] += loss.double()
            totals[1] += 1
            totals[2] += inputs.shape[0]
            requested = requested or bool(self.stop())
            agree = not peers.distributed or (step + 1) % STOP_AGREE_STEPS == 0
            if (agree or step == steps_per_epoch - 1) and peers.any(requested):
                aborted = True
                break
        loss_sum, steps, samples = peers.sum_(totals).tolist()  # waits for the device
        if (found := losses.first_non_finite()) is not None:
            rank = peers.rank if peers.distributed else None
            raise Diverged(f"epoch {epoch}", found["step"], found["loss"], rank)
        train_s = time.perf_counter() - start
        record = {
            "epoch": epoch,
            "steps": int(steps) // peers.world,  # per rank
            "complete": int(steps) // peers.world == steps_per_epoch,
            "samples": int(samples),
            "train_s": train_s,
            "samples_per_s": samples / train_s,
            "data_wait_s": wait_s,
            "data_wait_share": wait_s / train_s,
            "train_loss": loss_sum / steps if steps else None,
            "lr": lr,
        }
        return record, aborted

    def _evaluate(self, epoch: int, samples: int, record: dict[str, Any]) -> dict[str, Any]:
        self._notify("eval_start", epoch, samples)
        began = time.perf_counter()
        scores = evaluate(
            self.step.model,
            self.loaders.eval,
            self.spec,
            self.device,
            self.step.autocast_dtype,
            self.peers,
        )
        now = time.perf_counter()
        evaluation = {
            "epoch": epoch,
            "samples_seen": samples,
            "time_s": now - self.start,
            "eval_s": now - began,
            "train_loss": record["train_loss"],
            "eval_loss": scores["eval_loss"],
            "top1": scores["top1"],
            "top5": scores["top5"],
            "lr": record["lr"],
            "train_samples_per_s": record["samples_per_s"],
            "data_wait_share": record["data_wait_share"],
            "eval_samples_seen": scores["eval_samples_seen"],
        }
        self._notify("eval_stop", epoch, samples, evaluation)
        if self.progress:
            left = self.config.max_epochs - epoch
            eta_s = evaluation["time_s"] / epoch * left
            self.progress.write(
                {"event": "eval", **evaluation, "epoch_of": self.config.max_epochs, "eta_s": eta_s}
            )
        return evaluation

    def _notify(self, event: str, *args: Any) -> None:
        for listener in self.listeners:
            getattr(listener, event)(*args)


def set_epoch(loader: Any, epoch: int) -> None:
    """Reshuffle a sharded loader for ``epoch`` (DistributedSampler.set_epoch and the like)."""
    for holder in (loader, getattr(loader, "sampler", None)):
        if hasattr(holder, "set_epoch"):
            holder.set_epoch(epoch)
            return
