"""A training that diverged: its loss became NaN or infinite.

A diverged step still takes time, but it trains nothing (and NaN arithmetic is not the
speed of real arithmetic on every device: subnormals and NaNs take slow paths on some
CPUs), so a case whose loss stops being finite on any rank, in any run, ends as
``diverged`` with where it happened, never as ``ok`` with a loss of null or NaN.

Checking every loss inside the timed loop would synchronise the device each step (a
``.item()``), which is harness work on the hot path. ``LossWatch`` instead keeps each
step's loss where it was computed, detached (a 0-d tensor per step, no copy and no wait),
after the step's timing window closed; ``first_non_finite`` looks at all of them once,
after the measured window, with one transfer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

PHASES = ("warm-up", "measured", "final")


class Diverged(Exception):
    """The loss of step ``step`` (1-based, within ``phase``) was ``loss`` (nan, inf or
    -inf, as text: strict JSON has no such numbers); ``rank`` under torchrun."""

    def __init__(self, phase: str, step: int, loss: str, rank: int | None = None) -> None:
        self.phase, self.step, self.loss, self.rank = phase, step, loss, rank
        where = f"{phase} step {step}" + (f" on rank {rank}" if rank is not None else "")
        super().__init__(
            f"the loss became {loss} at {where}: the training diverged, so its step times "
            "are not a training throughput"
        )

    def details(self) -> dict[str, Any]:
        """Where it happened, for the result's ``error``."""
        found = {"phase": self.phase, "step": self.step, "loss": self.loss}
        return found if self.rank is None else found | {"rank": self.rank}


@dataclass
class LossWatch:
    """The losses of a run's steps, kept without synchronising (module doc). Steps are
    counted in the order ``add`` hears them: ``warmup_steps`` of them are warm-up, then
    measured, and those after ``end_measuring`` are ``final``."""

    losses: list[Any] = field(default_factory=list)
    warmup_steps: int = 0
    measured_steps: int | None = None

    def add(self, loss: Any) -> None:
        """Keep a step's loss (a tensor, a JAX array or a number; None is ignored)."""
        if loss is None:
            return
        detach = getattr(loss, "detach", None)
        self.losses.append(detach() if callable(detach) else loss)

    def end_warmup(self) -> None:
        self.warmup_steps = len(self.losses)

    def end_measuring(self) -> None:
        self.measured_steps = len(self.losses) - self.warmup_steps

    def first_non_finite(self) -> dict[str, Any] | None:
        """Where the loss first stopped being finite (``Diverged``'s phase, step and
        loss), or None."""
        index = _first_bad_index(self.losses)
        if index is None:
            return None
        found = {"loss": _as_text(self.losses[index])}
        if index < self.warmup_steps:
            return found | {"phase": "warm-up", "step": index + 1}
        index -= self.warmup_steps
        if self.measured_steps is None or index < self.measured_steps:
            return found | {"phase": "measured", "step": index + 1}
        return found | {"phase": "final", "step": index - self.measured_steps + 1}

    def check(self, rank: int | None = None) -> None:
        """Raise ``Diverged`` when a loss was not finite."""
        if (found := self.first_non_finite()) is not None:
            raise Diverged(**found, rank=rank)


def earliest(found: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Of each rank's ``first_non_finite`` (index = rank), the earliest step, with its
    rank (the lowest of a tie)."""
    ranked = [f | {"rank": rank} for rank, f in enumerate(found) if f is not None]
    return min(ranked, key=lambda f: (PHASES.index(f["phase"]), f["step"]), default=None)


def _first_bad_index(losses: list[Any]) -> int | None:
    if not losses:
        return None
    if all(hasattr(v, "dim") for v in losses):  # torch tensors: one transfer for all
        import torch

        if all(v.dim() == 0 for v in losses):  # the usual: 0-d losses, stacked as they are
            values = torch.stack(losses).float().cpu()
        else:
            values = torch.stack([v.reshape(()).float() for v in losses]).cpu()
        bad = (~torch.isfinite(values)).nonzero()
        return int(bad[0]) if len(bad) else None
    for index, value in enumerate(losses):
        if not math.isfinite(float(value)):
            return index
    return None


def _as_text(value: Any) -> str:
    number = float(value)
    return "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")
