"""Per-step timers: a window opened by ``start()`` and closed by ``stop()`` around each step.

On a CPU the work is synchronous, so the host clock at both edges is the step time. On a
GPU the host only enqueues work; the timer records a CUDA event at each edge on the
current stream, and the device stamps it when it gets there. Reading the durations
synchronizes on the last event only, so a measured loop is not stalled at every step.

A JAX step is dispatched asynchronously too, on a CPU as on a GPU, but JAX offers no events
on its streams: ``InFlightTimer`` times it with the host clock without stalling the device
(its docstring), so that both frameworks time the device's steps back to back.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

# Steps an InFlightTimer leaves queued on the device while the host waits for an older one.
IN_FLIGHT = 2


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


class InFlightTimer:
    """Host-clock windows of steps that run asynchronously (JAX), the device never idle
    between them.

    A JAX step returns once it is dispatched. Waiting for each step's result before the next
    (``block_until_ready`` after every step) leaves the device idle for a host round trip per
    step: the host's wake-up after the wait, then the next dispatch. The PyTorch path does not
    count that time: its CUDA events are stamped by the device, and the host runs ahead. Here
    the host waits for a step only once ``in_flight`` later steps are queued behind it, so
    the device has work while the host waits. A step's window ends when the host sees it done
    and begins where the step before it ended, or, when the device was idle (the first step,
    the first after a policy check), at its dispatch. So each step keeps a time of its own,
    and the times add up to the span from the first dispatch to the last step seen done, as
    CUDA events' windows do. If the host falls behind the device (steps shorter than a
    dispatch), the steps are timed at the host's pace, which is then the throughput.
    ``durations()`` waits for the steps in flight (the device idles at every policy check,
    as the CUDA event timer's synchronize leaves it): those (``in_flight`` at most) share
    their span equally, as their ends are not seen one by one.

    ``timed(step)`` wraps the step so that the timer sees what it returns; ``wait(output)``
    blocks until that output is ready (``jax.block_until_ready``: every output of one XLA
    execution, the loss included, is ready when the execution is done).
    """

    def __init__(
        self,
        wait: Callable[[Any], object],
        in_flight: int = IN_FLIGHT,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if in_flight < 1:
            raise ValueError(f"in_flight must be 1 or more, got {in_flight}")
        self._wait, self._in_flight, self._clock = wait, in_flight, clock
        self._latest: Any = None
        self._queued: deque[Any] = deque()  # outputs of the steps not yet seen done
        self._starts: list[float | None] = []  # None: where the step before it ended
        self._ends: list[float] = []

    def timed(self, step: Callable[[], Any]) -> Callable[[], Any]:
        """``step``, its output kept for this timer to wait on."""

        def dispatched() -> Any:
            self._latest = step()
            return self._latest

        return dispatched

    def start(self) -> None:
        self._starts.append(None if self._queued else self._clock())

    def stop(self) -> None:
        self._queued.append(self._latest)
        while len(self._queued) > self._in_flight:
            self._see_done()

    def _see_done(self) -> None:
        self._wait(self._queued.popleft())
        self._ends.append(self._clock())

    def _drain(self) -> None:
        """Wait for the last step queued, and share the span from where the first queued
        step began to its end equally between the queued steps: each step runs on the state
        the one before it made, so the last ends after the others, and a host that found
        them all done at once could not tell their ends apart."""
        if not self._queued:
            return
        count, first = len(self._queued), len(self._ends)
        self._wait(self._queued[-1])
        end = self._clock()
        self._queued.clear()
        begin = self._begin(first)
        self._ends += [begin + (end - begin) * (k + 1) / count for k in range(count)]

    def _begin(self, i: int) -> float:
        start = self._starts[i]
        return start if start is not None else self._ends[i - 1]

    def durations(self) -> list[float]:
        self._drain()
        return [end - self._begin(i) for i, end in enumerate(self._ends)]

    def reset(self) -> None:
        self._drain()  # the device finishes them before the next window opens
        self._starts.clear()
        self._ends.clear()


def make_timer(device_type: str) -> StepTimer:
    """The timer for a device type: CUDA events on ``cuda``, the host clock elsewhere."""
    return CudaEventTimer() if device_type == "cuda" else HostTimer()
