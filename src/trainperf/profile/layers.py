"""Per-layer forward and backward time of a training step, the classic ``time`` report.

Every leaf module gets four hooks: forward pre/post (its forward is the time between them)
and full backward pre/post (its backward: from the moment the gradient of its output is
ready to the moment the gradient of its input is). A module called several times in one
step (a ReLU reused in a ResNet block) adds up its calls. The clock is the host's after a
device synchronization at every hook on a GPU, so each layer's time is its own; that
synchronization is the disturbance the instrumentation brings, reported by comparing the
instrumented step with the uninstrumented one.

A full backward hook cannot follow an in-place change of a module's output, so while
profiling, in-place activations run out of place (``inplace`` attributes switched off and
``F.relu(..., inplace=True)`` made out of place): the same arithmetic, a little more memory.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812


@dataclass
class LayerClock:
    """Accumulated seconds of one leaf module over the profiled steps."""

    name: str
    type: str
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    calls: int = 0
    _fwd_started: list[float] = field(default_factory=list)
    _bwd_started: list[float] = field(default_factory=list)


def leaf_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Modules without children, by qualified name (the layers of the report)."""
    return [(name, m) for name, m in model.named_modules() if name and not any(m.children())]


@contextlib.contextmanager
def out_of_place_activations(model: nn.Module) -> Iterator[None]:
    """In-place activations made out of place for the duration (see the module docstring)."""
    switched = [m for m in model.modules() if getattr(m, "inplace", False) is True]
    for module in switched:
        module.inplace = False
    relu = F.relu

    def relu_out_of_place(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        return relu(input, inplace=False)

    F.relu = relu_out_of_place
    try:
        yield
    finally:
        F.relu = relu
        for module in switched:
            module.inplace = True


class LayerTimer:
    """Hooks on every leaf module of ``model``; ``clocks`` holds what they measured."""

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        self.device = device
        self.clocks: list[LayerClock] = []
        self.handles = []
        for name, module in leaf_modules(model):
            clock = LayerClock(name, type(module).__name__)
            self.clocks.append(clock)
            self.handles += [
                module.register_forward_pre_hook(self._starter(clock, "_fwd_started")),
                module.register_forward_hook(self._stopper(clock, "_fwd_started", "fwd_s")),
                module.register_full_backward_pre_hook(self._starter(clock, "_bwd_started")),
                module.register_full_backward_hook(self._stopper(clock, "_bwd_started", "bwd_s")),
            ]

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _starter(self, clock: LayerClock, stack: str):
        def start(*_: object) -> None:
            getattr(clock, stack).append(self._now())

        return start

    def _stopper(self, clock: LayerClock, stack: str, total: str):
        def stop(*_: object) -> None:
            started = getattr(clock, stack)
            if started:
                setattr(clock, total, getattr(clock, total) + self._now() - started.pop())
                if total == "fwd_s":
                    clock.calls += 1

        return stop

    def reset(self) -> None:
        for clock in self.clocks:
            clock.fwd_s = clock.bwd_s = 0.0
            clock.calls = 0

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
