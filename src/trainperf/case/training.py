"""What a time-to-accuracy run is asked to do (``TrainConfig``), and the checks of one read
from elsewhere (``stored_config_problem``: an imported file's training runs).

Kept apart from the trainer (trainperf.convergence.trainer), which imports torch: the store
checks an imported run's configuration without it.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any

from trainperf.case.precision import PRECISIONS  # what a case trains in
from trainperf.case.schedule import parse_schedule

# The quality targets a run can stop at: top-k accuracy (higher is better) or eval loss.
HIGHER_IS_BETTER = {"top1": True, "top5": True, "eval_loss": False}

# The optimizers a run can train with (built in trainperf.step.training_step.make_optimizer):
# SGD with momentum, AdamW, and LARS (SGD with momentum and a per-layer trust ratio,
# trainperf.step.lars). None in a config: the model's own (ModelSpec.optimizer).
OPTIMIZERS = ("sgd", "adamw", "lars")


@dataclass(frozen=True)
class TrainConfig:
    """One time-to-accuracy run. ``batch_size`` is per device (``devices`` per node, over
    ``nodes`` nodes); ``eval_every`` in epochs. ``optimizer`` None: the model's own (SGD
    for the CNNs, AdamW for the language models); ``momentum`` is SGD's and LARS's."""

    model: str
    data: str  # data source text, e.g. "cifar10:/path"
    target_metric: str  # "top1" | "top5" (higher is better) | "eval_loss" (lower)
    target_value: float
    max_epochs: int
    batch_size: int
    lr_schedule: str = "piecewise:0.1@0"
    warmup_epochs: float = 0.0
    optimizer: str | None = None
    momentum: float = 0.9
    weight_decay: float = 5e-4
    precision: str = "fp32"
    device: str = "cpu"
    devices: int = 1
    nodes: int = 1
    workers: int = 0
    seed: int = 0
    image_size: int | None = None
    seq_len: int | None = None
    eval_every: int = 1

    def __post_init__(self) -> None:
        if self.target_metric not in HIGHER_IS_BETTER:
            allowed = ", ".join(HIGHER_IS_BETTER)
            raise ValueError(f"target_metric '{self.target_metric}' is not one of {allowed}")
        if self.precision not in PRECISIONS:
            allowed = ", ".join(PRECISIONS)
            raise ValueError(f"precision '{self.precision}' is not one of {allowed}")
        for name in ("max_epochs", "batch_size", "devices", "nodes", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if HIGHER_IS_BETTER[self.target_metric] and not 0 < self.target_value <= 1:
            raise ValueError(
                f"target_value {self.target_value} for {self.target_metric} is not an "
                "accuracy: allowed 0 < value <= 1"
            )
        if self.workers < 0:
            raise ValueError(f"workers must be 0 or more, got {self.workers}")
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            allowed = ", ".join(OPTIMIZERS)
            raise ValueError(f"optimizer '{self.optimizer}' is not one of {allowed}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay}")
        if not (math.isfinite(self.momentum) and 0 <= self.momentum < 1):
            raise ValueError(f"momentum must be a finite number in [0, 1), got {self.momentum}")
        parse_schedule(self.lr_schedule, self.warmup_epochs)  # ScheduleError if malformed

    @property
    def world(self) -> int:
        """Processes in all: ``devices`` per node times ``nodes``."""
        return self.devices * self.nodes

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def stored_config_problem(config: object) -> str | None:
    """What is wrong with a training run's configuration read from elsewhere (an imported
    file), checked as ``trainperf train`` checks its own: the fields of ``TrainConfig`` with
    their types and ranges, a model of the zoo or a ``module:function`` reference, and
    printable names. None when nothing is."""
    from trainperf import models
    from trainperf.core.limits import control_problem, count_problem
    from trainperf.models.custom import is_well_formed

    if not isinstance(config, dict):
        return "expected an object"
    hints = typing.get_type_hints(TrainConfig)
    if unknown := sorted(set(config) - set(hints) - set(LOGGING_FIELDS)):
        return f"unknown field '{unknown[0]}': allowed {', '.join(sorted(hints))}"
    for key, value in config.items():
        if key in hints and not _has_type(value, hints[key]):
            kind = getattr(hints[key], "__name__", str(hints[key]))
            return f"{key}: {value!r} is not of type {kind}"
        if isinstance(value, str) and (problem := control_problem(value)):
            return f"{key}: {problem}"
    if bad := count_problem(config):
        return f"{bad[0]}: {bad[1]}"
    try:
        run = TrainConfig(**{k: v for k, v in config.items() if k in hints})
    except (TypeError, ValueError) as exc:  # a missing field, the run's own checks
        return str(exc)
    if run.model not in models.names() and not is_well_formed(run.model):
        return f"model {run.model!r} is neither of this trainperf's zoo nor module:function"
    return None


# Fields a stored configuration may hold beside TrainConfig's: where the run logged.
LOGGING_FIELDS = ("mllog",)


def _has_type(value: object, hint: object) -> bool:
    """Whether a JSON value fits a field's type: an int is no bool, a float may be an int."""
    allowed = typing.get_args(hint) or (hint,)
    if value is None:
        return type(None) in allowed
    if isinstance(value, bool):
        return bool in allowed
    if isinstance(value, int):
        return int in allowed or float in allowed
    return any(isinstance(value, kind) for kind in allowed if kind in (float, str))
