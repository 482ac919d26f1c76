"""Per-step timers: a window opened by ``start()`` and closed by ``stop()`` around each step.

On a CPU the work is synchronous, so the host clock at both edges is the step time. On a
GPU the host only enqueues work; the timer records a CUDA event at each edge on the
current stream, and the device stamps it when it gets there. Reading the durations
synchronizes on the last event only, so a measured loop is not stalled at every step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol


class StepTimer(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def durations(self) -> list[float]:
        """Seconds of every closed window so far (synchronizes the device if needed)."""
        ...

    def reset(self) -> None: ...


class HostTimer:
    """Wall-clock windows from ``time.perf_counter`` (CPU execution is synchronous)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._starts: list[float] = []
        self._stops: list[float] = []

    def start(self) -> None:
        self._starts.append(self._clock())

    def stop(self) -> None:
        self._stops.append(self._clock())

    def durations(self) -> list[float]:
        return [b - a for a, b in zip(self._starts, self._stops, strict=False)]

    def reset(self) -> None:
        self._starts.clear()
        self._stops.clear()


class CudaEventTimer:
    """Windows between CUDA events recorded on the current stream.

    ``event_factory`` makes an event with timing enabled; it defaults to
    ``torch.cuda.Event(enable_timing=True)`` and is a parameter so tests can pass a fake.
    ``elapsed_time`` is in milliseconds (CUDA's cudaEventElapsedTime).
    """

    def __init__(self, event_factory: Callable[[], Any] | None = None) -> None:
        if event_factory is None:
            import torch

            def event_factory() -> Any:
                return torch.cuda.Event(enable_timing=True)

        self._new_event = event_factory
        self._starts: list[Any] = []
        self._stops: list[Any] = []
        self._done: list[float] = []

    def start(self) -> None:
        event = self._new_event()
        event.record()
        self._starts.append(event)

    def stop(self) -> None:
        event = self._new_event()
        event.record()
        self._stops.append(event)

    def durations(self) -> list[float]:
        if not self._stops:
            return []
        self._stops[-1].synchronize()
        # Convert only the windows not read before: each read stays O(new steps).
        for i in range(len(self._done), len(self._stops)):
            self._done.append(self._starts[i].elapsed_time(self._stops[i]) / 1000.0)
        return list(self._done)

    def reset(self) -> None:
        self._starts.clear()
        self._stops.clear()
        self._done.clear()


def make_timer(device_type: str) -> StepTimer:
    """The timer for a device type: CUDA events on ``cuda``, the host clock elsewhere."""
    return CudaEventTimer() if device_type == "cuda" else HostTimer()
