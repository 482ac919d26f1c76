"""Learning-rate schedules for time-to-accuracy runs, written as one line of text.

- ``piecewise:0.1@0,0.01@30,0.001@60``: lr 0.1 from epoch 0, 0.01 from epoch 30, 0.001 from
  epoch 60 (the step schedule of the classic ImageNet ResNet recipe); boundaries in epochs,
  the first 0, strictly increasing; fractional boundaries are allowed;
- ``cosine`` or ``cosine:0.1``: cosine annealing from the base lr (default 0.1) at epoch 0
  to 0 at ``max_epochs`` (Loshchilov & Hutter 2017, SGDR without restarts):
  ``lr(e) = base * (1 + cos(pi * e / max_epochs)) / 2``;
- ``constant:0.05``: one lr throughout.

Warm-up (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): over the first
``warmup_epochs`` the scheduled lr is multiplied by ``e / warmup_epochs``, a linear ramp
from 0 at epoch 0 to the scheduled lr at the end of the warm-up. Goyal et al. start from
the single-worker lr (their ramp starts at lr/k for k workers); starting from 0 is the
common form today (e.g. Hugging Face's linear warm-up) and needs no worker count. The lr
is evaluated every optimizer step at a fractional epoch, so the ramp is smooth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DEFAULT_COSINE_LR = 0.1
ALLOWED = (
    "allowed: piecewise:LR@EPOCH,LR@EPOCH,... (first epoch 0, epochs increasing, lr > 0), "
    "cosine, cosine:LR or constant:LR"
)


class ScheduleError(ValueError):
    """A learning-rate schedule text or warm-up that cannot be used."""


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule: ``lr_at(epoch, max_epochs)`` gives the lr at a fractional epoch.

    ``boundaries``/``lrs``: for piecewise, lr ``lrs[i]`` from epoch ``boundaries[i]`` on;
    for cosine and constant a single boundary 0 and the base lr.
    """

    name: str
    boundaries: tuple[float, ...]
    lrs: tuple[float, ...]
    warmup_epochs: float = 0.0

    @property
    def base_lr(self) -> float:
        """The lr the schedule starts from (after any warm-up)."""
        return self.lrs[0]

    def scheduled_lr(self, epoch: float, max_epochs: float) -> float:
        """The lr without warm-up."""
        if self.name == "cosine":
            progress = min(max(epoch / max_epochs, 0.0), 1.0)
            return self.base_lr * (1.0 + math.cos(math.pi * progress)) / 2.0
        lr = self.lrs[0]
        for boundary, value in zip(self.boundaries, self.lrs, strict=True):
            if epoch >= boundary:
                lr = value
        return lr

    def lr_at(self, epoch: float, max_epochs: float) -> float:
        """The lr at fractional ``epoch`` (0 = start of training) of a ``max_epochs`` run."""
        lr = self.scheduled_lr(epoch, max_epochs)
        if self.warmup_epochs > 0 and epoch < self.warmup_epochs:
            lr *= max(epoch, 0.0) / self.warmup_epochs
        return lr

    def describe(self) -> dict[str, Any]:
        """The schedule as a plain dict, for logs and results."""
        return {
            "name": self.name,
            "boundaries": list(self.boundaries),
            "lrs": list(self.lrs),
            "warmup_epochs": self.warmup_epochs,
        }


def parse_schedule(text: str, warmup_epochs: float = 0.0) -> Schedule:
    """The schedule ``text`` names (see the module doc); ScheduleError if it is malformed."""
    if not math.isfinite(warmup_epochs) or warmup_epochs < 0:
        raise ScheduleError(f"warmup_epochs must be a number >= 0, got {warmup_epochs}")
    name, _, args = text.strip().partition(":")
    name, args = name.strip().lower(), args.strip()
    if name == "piecewise":
        boundaries, lrs = _piecewise(text, args)
        return Schedule("piecewise", boundaries, lrs, warmup_epochs)
    if name == "cosine":
        lr = _number(text, args, "lr") if args else DEFAULT_COSINE_LR
        return Schedule("cosine", (0.0,), (_positive(text, lr),), warmup_epochs)
    if name == "constant" and args:
        return Schedule(
            "constant", (0.0,), (_positive(text, _number(text, args, "lr")),), warmup_epochs
        )
    raise ScheduleError(f"bad lr schedule '{text}': {ALLOWED}")


def _piecewise(text: str, args: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if not args:
        raise ScheduleError(f"bad lr schedule '{text}': piecewise needs LR@EPOCH pairs; {ALLOWED}")
    boundaries: list[float] = []
    lrs: list[float] = []
    for piece in args.split(","):
        lr_text, at, epoch_text = piece.partition("@")
        if not at:
            raise ScheduleError(f"bad lr schedule '{text}': '{piece}' is not LR@EPOCH; {ALLOWED}")
        lrs.append(_positive(text, _number(text, lr_text, "lr")))
        boundaries.append(_number(text, epoch_text, "epoch"))
    if boundaries[0] != 0:
        raise ScheduleError(f"bad lr schedule '{text}': the first epoch must be 0; {ALLOWED}")
    if any(b <= a for a, b in zip(boundaries, boundaries[1:], strict=False)):
        raise ScheduleError(f"bad lr schedule '{text}': epochs must increase; {ALLOWED}")
    return tuple(boundaries), tuple(lrs)


def _number(text: str, value: str, what: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ScheduleError(
            f"bad lr schedule '{text}': {what} '{value.strip()}' is not a number; {ALLOWED}"
        ) from None
    if not math.isfinite(number):
        raise ScheduleError(
            f"bad lr schedule '{text}': {what} '{value.strip()}' is not finite; {ALLOWED}"
        )
    return number


def _positive(text: str, lr: float) -> float:
    if lr <= 0:
        raise ScheduleError(f"bad lr schedule '{text}': lr {lr} must be > 0; {ALLOWED}")
    return lr
