"""How much of a step's communication the computation hid, from a profile's timeline.

Communication is *exposed* where it runs while nothing computes; the rest overlapped with
computation (DDP's all-reduce beside the backward pass, FSDP's prefetched all-gathers).
From the events of one profile (FunctionEvents, ``prof.events()``):

- **On a GPU** the timeline is the device's. Communication is the NCCL kernels
  (``ncclDevKernel_*``, ``ncclKernel_*``: the kernels NCCL launches on its own stream);
  computation is every other kernel, memcpy and memset. Device-side ranges of
  ``record_function`` (``ProfilerStep#N``, ``nccl:all_reduce`` drawn on the GPU row,
  ``is_user_annotation``) span kernels and are neither. A kernel of NCCL that runs beside a
  compute kernel on another stream counts as hidden, though the two share the SMs.
- **On a CPU** (gloo) the timeline is the host's threads. Communication is gloo's work,
  which the profiler records as asynchronous ranges on gloo's own threads
  (``gloo:all_reduce``, from enqueue to completion), and the time the calling thread spends
  inside the c10d ops themselves. Computation is the time some thread spends inside an op
  that is not communication, counting only the innermost op at each instant: an op's range
  minus its children's, so a c10d call nested in autograd's ``AccumulateGrad`` is not
  hidden by its own parent. The profiler's step ranges (``ProfilerStep#N``) are neither.

``exposed_ms`` = |communication \\ computation| per step; ``comm_ms`` = |communication| per
step (the union, so two overlapping buckets count once).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torch.autograd import DeviceType

Interval = tuple[float, float]
IsCommunication = Callable[[str], bool]  # by an op's name (trainperf.profile.categories)
NCCL_KERNEL_PREFIXES = ("ncclDevKernel", "ncclKernel")


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The disjoint, sorted union of ``(start, end)`` intervals (empty ones dropped)."""
    merged: list[list[float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def length(intervals: Iterable[Interval]) -> float:
    """The measure of the union of ``intervals``."""
    return sum(end - start for start, end in union(intervals))


def uncovered(intervals: Iterable[Interval], cover: Iterable[Interval]) -> float:
    """The measure of the union of ``intervals`` outside the union of ``cover``."""
    total = 0.0
    covering = union(cover)
    for start, end in union(intervals):
        outside = end - start
        for c_start, c_end in covering:
            if c_end <= start:
                continue
            if c_start >= end:
                break
            outside -= min(end, c_end) - max(start, c_start)
        total += outside
    return total


def is_step_marker(name: str) -> bool:
    """The profiler's own ``ProfilerStep#N`` range (keyed "ProfilerStep*" in the events): a
    schedule adds one per step; it spans the step and is no op of it."""
    return name.startswith("ProfilerStep")


def is_nccl_kernel(name: str) -> bool:
    return name.startswith(NCCL_KERNEL_PREFIXES)


def device_timeline(events: Sequence[Any]) -> tuple[list[Interval], list[Interval]]:
    """(communication, computation) intervals of a GPU profile (module docstring)."""
    comm: list[Interval] = []
    compute: list[Interval] = []
    for event in events:
        if event.device_type != DeviceType.CUDA or getattr(event, "is_user_annotation", False):
            continue
        span = (event.time_range.start, event.time_range.end)
        (comm if is_nccl_kernel(event.key) else compute).append(span)
    return comm, compute


def innermost_segments(events: Sequence[Any]) -> list[tuple[float, float, str]]:
    """``(start, end, name)`` of the innermost op at each instant, per host thread: each op's
    range less its children's (synchronous host events only; step ranges left out)."""
    by_thread: dict[int, list[Any]] = defaultdict(list)
    for event in events:
        if (
            event.device_type == DeviceType.CPU
            and not event.is_async
            and not is_step_marker(event.key)
        ):
            by_thread[event.thread].append(event)
    return [segment for thread in by_thread.values() for segment in _thread_segments(thread)]


def _thread_segments(events: list[Any]) -> list[tuple[float, float, str]]:
    """``innermost_segments`` of the events of one thread (nested ranges, no crossings)."""
    segments: list[tuple[float, float, str]] = []
    stack: list[tuple[float, str]] = []  # (end, name) of the ranges open at the cursor
    cursor = 0.0  # every instant before it is already in a segment (or in no op)

    def close_until(instant: float) -> None:
        nonlocal cursor
        while stack and stack[-1][0] <= instant:
            closing_end, name = stack.pop()
            if closing_end > cursor:
                segments.append((cursor, closing_end, name))
                cursor = closing_end

    # Parents before their children: earlier start first, then the longer range.
    for event in sorted(events, key=lambda e: (e.time_range.start, -e.time_range.end)):
        start, end = event.time_range.start, event.time_range.end
        close_until(start)
        if stack and start > cursor:
            segments.append((cursor, start, stack[-1][1]))  # the parent, up to the child
        cursor = start
        stack.append((min(end, stack[-1][0]) if stack else end, event.key))
    close_until(float("inf"))
    return segments


def host_timeline(
    events: Sequence[Any], is_communication: IsCommunication
) -> tuple[list[Interval], list[Interval]]:
    """(communication, computation) intervals of a CPU profile (module docstring)."""
    comm: list[Interval] = [
        (e.time_range.start, e.time_range.end)
        for e in events
        if e.device_type == DeviceType.CPU and e.is_async and is_communication(e.key)
    ]
    compute: list[Interval] = []
    for start, end, name in innermost_segments(events):
        (comm if is_communication(name) else compute).append((start, end))
    return comm, compute


def communication_overlap(
    events: Iterable[Any], on_cuda: bool, steps: int, is_communication: IsCommunication
) -> dict[str, float]:
    """``comm_ms`` and ``comm_exposed_ms`` per step (module docstring)."""
    if steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    events = list(events)
    if on_cuda:
        comm, compute = device_timeline(events)
    else:
        comm, compute = host_timeline(events, is_communication)
    return {
        "comm_ms": length(comm) / 1e3 / steps,
        "comm_exposed_ms": uncovered(comm, compute) / 1e3 / steps,
    }
