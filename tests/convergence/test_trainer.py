"""The convergence loop on CIFAR-sized synthetic data that cifarnet can learn in a few epochs.

Each class puts a bright 8x5 patch at its own place on noisy 32x32 images; 256 training
images, batch 32 (8 steps per epoch). cifarnet reaches top-1 >= 0.8 in 2-4 epochs.
"""

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainperf.case.schedule import ScheduleError
from trainperf.case.training import TrainConfig
from trainperf.convergence.evaluation import evaluate, reached
from trainperf.convergence.trainer import train
from trainperf.models.spec import CausalLM, ModelSpec, SpanExtraction
from trainperf.parallel.peers import Peers

TRAIN_SAMPLES, EVAL_SAMPLES, BATCH = 256, 128, 32
STEPS_PER_EPOCH = TRAIN_SAMPLES // BATCH


def patch_images(n: int, seed: int, random_labels: bool = False) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 10
    images = torch.randn(n, 3, 32, 32, generator=generator) * 0.5
    for i, c in enumerate(labels.tolist()):
        row, col = (c // 5) * 16 + 4, (c % 5) * 6 + 1
        images[i, :, row : row + 8, col : col + 5] += 2.0
    if random_labels:
        labels = torch.randint(0, 10, (n,), generator=generator)
    return TensorDataset(images, labels)


@dataclass
class Loaders:
    train: Any
    eval: Any
    num_classes: int
    train_samples: int
    eval_samples: int


def patch_loaders(seed: int = 0, random_eval_labels: bool = False, classes: int = 10) -> Loaders:
    shuffle = torch.Generator().manual_seed(seed)
    train_data, eval_data = (
        patch_images(TRAIN_SAMPLES, 1),
        patch_images(EVAL_SAMPLES, 2, random_eval_labels),
    )
    return Loaders(
        DataLoader(train_data, batch_size=BATCH, shuffle=True, drop_last=True, generator=shuffle),
        DataLoader(eval_data, batch_size=64),
        classes,
        TRAIN_SAMPLES,
        EVAL_SAMPLES,
    )


def config(**changes) -> TrainConfig:
    fields = {
        "model": "cifarnet",
        "data": "synthetic:patches",
        "target_metric": "top1",
        "target_value": 0.8,
        "max_epochs": 8,
        "batch_size": BATCH,
        "lr_schedule": "piecewise:0.05@0",
    }
    return TrainConfig(**(fields | changes))


class Recorder:
    """A listener that notes every call."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, *args))

    def names(self) -> list[str]:
        return [call[0] for call in self.calls]


def test_reaches_the_target_and_times_the_first_evaluation_that_does(tmp_path):
    progress = tmp_path / "progress.jsonl"
    result = train(config(), progress_path=progress, loaders=patch_loaders())
    evaluations = result["evaluations"]
    assert result["status"] == "ok" and result["reached"]
    assert result["final_top1"] >= 0.8
    assert [e["top1"] >= 0.8 for e in evaluations] == [False] * (len(evaluations) - 1) + [True]
    assert result["time_to_target_s"] == evaluations[-1]["time_s"]
    assert result["epochs_run"] == len(evaluations) < 8
    assert [e["epoch"] for e in evaluations] == list(range(1, len(evaluations) + 1))
    assert [e["samples_seen"] for e in evaluations] == [
        TRAIN_SAMPLES * e["epoch"] for e in evaluations
    ]
    times = [e["time_s"] for e in evaluations]
    assert times == sorted(times) and times[0] > 0
    first = evaluations[0]
    assert {"train_loss", "eval_loss", "top1", "top5", "lr"} <= set(first)
    assert first["lr"] == 0.05 and 0 <= first["top1"] <= first["top5"] <= 1
    assert 0 <= result["data_wait_share"] < 1 and result["train_samples_per_s"] > 0
    assert result["global_batch"] == BATCH and result["world_size"] == 1
    assert result["schedule"]["name"] == "piecewise"

    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["start"] + ["eval"] * len(evaluations) + ["stop"]
    assert lines[0]["config"]["model"] == "cifarnet"
    assert lines[1]["epoch_of"] == 8 and lines[1]["eta_s"] > 0 and lines[1]["top1"] == first["top1"]
    assert lines[-1] == {"event": "stop", "status": "ok", "reached": True}


def test_trains_on_a_cifar10_folder_through_the_data_loaders(tmp_path, colour_cifar10):
    colour_cifar10(tmp_path, TRAIN_SAMPLES, EVAL_SAMPLES)
    run = config(data=f"cifar10:{tmp_path}", lr_schedule="piecewise:0.01@0")
    result = train(run)
    assert result["reached"] and result["train_samples"] == TRAIN_SAMPLES
    assert result["evaluations"][-1]["eval_samples_seen"] == EVAL_SAMPLES


def test_listeners_hear_the_phases_in_order():
    recorder = Recorder()
    result = train(config(max_epochs=2, eval_every=2), [recorder], loaders=patch_loaders(1))
    expected = ["init_start", "init_stop", "run_start", "epoch_start", "epoch_stop"]
    expected += ["epoch_start", "epoch_stop", "eval_start", "eval_stop", "run_stop"]
    assert recorder.names() == expected
    calls = dict((c[0], c[1:]) for c in recorder.calls)
    assert recorder.calls[3] == ("epoch_start", 1, 0)
    assert recorder.calls[4] == ("epoch_stop", 1, TRAIN_SAMPLES)
    assert calls["eval_stop"][:2] == (2, 2 * TRAIN_SAMPLES)
    assert calls["eval_stop"][2] == result["evaluations"][0]
    info = calls["run_start"][0]
    assert info["global_batch_size"] == BATCH and info["optimizer"] == "sgd"
    assert info["base_lr"] == 0.05 and info["momentum"] == 0.9 and info["weight_decay"] == 5e-4
    assert info["train_samples"] == TRAIN_SAMPLES and info["eval_samples"] == EVAL_SAMPLES
    assert info["world_size"] == 1 and info["schedule"]["lrs"] == [0.05]
    reached_target = result["reached"]
    assert recorder.calls[-1] == (
        "run_stop",
        "success" if reached_target else "aborted",
        reached_target,
    )


def test_unreachable_target_runs_to_the_epoch_limit():
    recorder = Recorder()
    run = config(max_epochs=2, target_value=0.95, lr_schedule="piecewise:0.05@0,0.01@1")
    result = train(run, [recorder], loaders=patch_loaders(random_eval_labels=True))
    assert result["status"] == "ok" and not result["reached"]
    assert result["time_to_target_s"] is None
    assert result["epochs_run"] == 2 and [e["epoch"] for e in result["evaluations"]] == [1, 2]
    assert [e["lr"] for e in result["evaluations"]] == [0.05, 0.01]
    assert recorder.calls[-1] == ("run_stop", "aborted", False)


def test_eval_every_and_always_after_the_last_epoch():
    run = config(max_epochs=3, eval_every=2, target_value=0.95)
    result = train(run, loaders=patch_loaders(random_eval_labels=True))
    assert [e["epoch"] for e in result["evaluations"]] == [2, 3]


def test_warmup_sets_the_lr_every_step():
    run = config(max_epochs=1, target_value=0.95, warmup_epochs=1, lr_schedule="constant:0.08")
    result = train(run, loaders=patch_loaders(random_eval_labels=True))
    last_step = (STEPS_PER_EPOCH - 1) / STEPS_PER_EPOCH
    assert result["evaluations"][0]["lr"] == pytest.approx(0.08 * last_step)


@pytest.mark.parametrize("after_steps, evaluations", [(5, 0), (STEPS_PER_EPOCH + 3, 1)])
def test_stop_ends_the_run_after_the_current_step(tmp_path, after_steps, evaluations):
    polls = []

    def stop() -> bool:
        polls.append(1)
        return len(polls) >= after_steps

    recorder = Recorder()
    progress = tmp_path / "progress.jsonl"
    result = train(
        config(target_value=0.99),
        [recorder],
        progress,
        stop,
        loaders=patch_loaders(random_eval_labels=True),
    )
    assert result["status"] == "aborted" and not result["reached"]
    assert len(result["evaluations"]) == evaluations
    assert result["samples_seen"] == after_steps * BATCH
    assert result["epochs_run"] == evaluations
    assert recorder.names()[-2:] == ["epoch_stop", "run_stop"]
    assert recorder.calls[-1] == ("run_stop", "aborted", False)
    last = json.loads(progress.read_text().splitlines()[-1])
    assert last == {"event": "stop", "status": "aborted", "reached": False}


def test_same_seed_same_curve():
    run = config(max_epochs=2, target_value=0.99)
    first = train(run, loaders=patch_loaders(random_eval_labels=True))["evaluations"]
    again = train(run, loaders=patch_loaders(random_eval_labels=True))["evaluations"]
    curve = [(e["train_loss"], e["eval_loss"], e["top1"]) for e in first]
    assert curve == [(e["train_loss"], e["eval_loss"], e["top1"]) for e in again]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains(precision):
    result = train(config(max_epochs=1, precision=precision), loaders=patch_loaders())
    evaluation = result["evaluations"][0]
    assert torch.isfinite(torch.tensor([evaluation["train_loss"], evaluation["eval_loss"]])).all()


def test_refuses_data_with_other_classes():
    with pytest.raises(ValueError, match="10 classes but the data has 100"):
        train(config(), loaders=patch_loaders(classes=100))


def test_refuses_synthetic_data():
    with pytest.raises(ValueError, match="needs real data"):
        train(config(data="synthetic"))


def test_refuses_data_without_an_evaluation_split():
    with pytest.raises(ValueError, match="no evaluation split"):
        train(config(), loaders=dataclasses.replace(patch_loaders(), eval=None))


def test_refuses_several_devices_without_a_process_group():
    with pytest.raises(ValueError, match="torchrun"):
        train(config(devices=2), loaders=patch_loaders())


@pytest.mark.parametrize(
    "changes, error, match",
    [
        ({"target_metric": "accuracy"}, ValueError, "top1, top5, eval_loss"),
        ({"target_value": 75.0}, ValueError, "0 < value <= 1"),
        ({"precision": "fp8"}, ValueError, "fp32, tf32, fp16, bf16"),
        ({"max_epochs": 0}, ValueError, "max_epochs"),
        ({"lr_schedule": "linear"}, ScheduleError, "allowed"),
        ({"warmup_epochs": -1}, ScheduleError, "warmup_epochs"),
    ],
)
def test_config_is_validated(changes, error, match):
    with pytest.raises(error, match=match):
        config(**changes)


def test_config_round_trips_through_a_dict():
    run = config(seq_len=None, image_size=32)
    assert TrainConfig(**run.to_dict()) == run
    assert dataclasses.asdict(run) == run.to_dict()


class TinyLM(nn.Module):
    """Predicts token t+1 = t + 1 (mod vocab) exactly, whatever the input."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot((ids + 1) % self.vocab, self.vocab).float() * 10


def test_language_model_accuracy_is_per_token():
    vocab = 7
    spec = ModelSpec("tiny-lm", "test", CausalLM(vocab_size=vocab), lambda: TinyLM(vocab), 8, 1)
    ids = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 0]])
    targets = torch.tensor([[1, 2, 3, 3], [5, 6, 0, 0]])  # 2 of 8 tokens mispredicted
    scores = evaluate(TinyLM(vocab), [(ids, targets)], spec, torch.device("cpu"), None, Peers())
    assert scores["top1"] == pytest.approx(6 / 8)
    assert scores["top5"] == 1.0  # the true token is always among the 5 best of 7
    assert scores["eval_samples_seen"] == 2 and scores["eval_loss"] > 0


def test_outputs_that_are_not_classes_get_a_loss_only():
    spec = ModelSpec("tiny-span", "test", SpanExtraction(vocab_size=7), nn.Identity, 8, 1)
    outputs = torch.randn(2, 8, 2)
    scores = evaluate(
        nn.Identity(),
        [(outputs, torch.tensor([[1, 2], [3, 4]]))],
        spec,
        torch.device("cpu"),
        None,
        Peers(),
    )
    assert scores["top1"] is None and scores["top5"] is None and scores["eval_loss"] > 0


def test_reached_knows_which_way_is_better():
    assert reached({"top1": 0.8}, "top1", 0.8) and not reached({"top1": 0.79}, "top1", 0.8)
    assert reached({"eval_loss": 1.9}, "eval_loss", 2.0) and not reached(
        {"eval_loss": 2.1}, "eval_loss", 2.0
    )
    assert not reached({"top5": None}, "top5", 0.5)


def test_the_wall_clock_to_target_splits_into_parts_that_add_up():
    launched = time.time() - 0.5  # as if the launcher had started the process 0.5 s ago
    result = train(config(), loaders=patch_loaders(), launched_at=launched)
    split = result["time_split"]
    assert split["until"] == "target" and split["measured_on"] == "rank 0"
    assert split["startup_from"] == "process launch" and split["startup_s"] >= 0.5
    parts = [split[k] for k in ("startup_s", "training_s", "data_loading_s", "evaluation_s")]
    assert all(part >= 0 for part in parts) and split["training_s"] > 0
    assert sum(parts) == pytest.approx(split["total_s"], rel=1e-12)
    assert split["total_s"] == pytest.approx(split["startup_s"] + result["time_to_target_s"])
    assert split["evaluation_s"] == sum(e["eval_s"] for e in result["evaluations"]) > 0
    assert split["data_loading_s"] == sum(e["data_wait_s"] for e in result["epochs"]) > 0


def test_a_run_that_misses_its_target_splits_its_time_to_the_end():
    result = train(config(max_epochs=1), loaders=patch_loaders(random_eval_labels=True))
    split = result["time_split"]
    assert not result["reached"] and split["until"] == "end"
    assert split["startup_from"] == "train() call" and split["startup_s"] > 0
    assert split["total_s"] == pytest.approx(split["startup_s"] + result["run_s"])
    parts = sum(split[k] for k in ("startup_s", "training_s", "data_loading_s", "evaluation_s"))
    assert parts == pytest.approx(split["total_s"], rel=1e-12)


def test_the_configured_optimizer_trains(monkeypatch):
    from trainperf.step.lars import LARS

    steps = []
    original = LARS.step
    monkeypatch.setattr(LARS, "step", lambda self, *a: steps.append(self) or original(self, *a))
    recorder = Recorder()
    run = config(max_epochs=1, optimizer="lars", momentum=0.8, weight_decay=1e-4)
    train(run, [recorder], loaders=patch_loaders(1))
    assert len(steps) == STEPS_PER_EPOCH
    assert steps[0].param_groups[0]["momentum"] == 0.8
    assert steps[0].param_groups[0]["weight_decay"] == 1e-4
    assert steps[0].param_groups[1]["weight_decay"] == 0.0  # biases and norm weights
    info = dict((c[0], c[1:]) for c in recorder.calls)["run_start"][0]
    assert (info["optimizer"], info["momentum"], info["weight_decay"]) == ("lars", 0.8, 1e-4)
