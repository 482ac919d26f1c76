"""The measured loop: warm-up, then timed steps, each bracketed by the step timer.

The only harness work inside a timed window is the timer's own ``start``/``stop`` (a clock
read or an event record; for a JAX step, the wait for an older step, which the device's
work on the later ones overlaps: trainperf.measure.timer.InFlightTimer). A step's loss,
when a ``LossWatch`` keeps them, is kept after its window closed, without synchronising
(trainperf.measure.divergence). Policy decisions happen between windows and, while
measuring, only at the policy's check points (geometrically spaced for the adaptive
policy), so the loop costs what a hand-written loop costs (benchmarks/harness_overhead.py
checks this).

A step fed by a real data set also opens windows of its own ``data_timer`` inside the
step (one per micro-batch, around getting the batch); the loop only resets that timer
with the step timer and reads it once after the last step, adding up each step's windows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainperf.measure.divergence import LossWatch
from trainperf.measure.policy import StepPolicy
from trainperf.measure.timer import StepTimer


@dataclass(frozen=True)
class StepRecord:
    """Raw times of one measured run. ``step_s`` excludes the warm-up."""

    warmup_s: list[float]
    step_s: list[float]
    warmup_reason: str
    stop_reason: str
    measure_elapsed_s: float
    # Per measured step, the time it waited for its data (real data sets only).
    data_wait_s: list[float] | None = None


def measure_steps(
    step: Callable[[], object],
    policy: StepPolicy,
    timer: StepTimer,
    clock: Callable[[], float] = time.perf_counter,
    probes: Any = None,
    data_timer: StepTimer | None = None,
    losses: LossWatch | None = None,
) -> StepRecord:
    """Run ``step`` under ``policy``, timing every step with ``timer``.

    ``probes`` (trainperf.measure.probes.CaseProbes) hears ``begin()`` when the warm-up is
    over and ``end()`` after the last measured step: its window is the measured steps.
    ``data_timer``: the timer the step opens around getting its data (see the module doc).
    ``losses`` keeps what each step returns (its loss), warm-up and measured steps apart.
    """
    keep = losses.add if losses is not None else lambda loss: None
    warmup_started = clock()
    while not (warmup_reason := policy.warmup_done(timer.durations(), clock() - warmup_started)):
        timer.start()
        loss = step()
        timer.stop()
        keep(loss)
    warmup_s = timer.durations()
    if losses is not None:
        losses.end_warmup()
    timer.reset()
    if data_timer is not None:
        data_timer.reset()
    if probes is not None:
        probes.begin()

    step_s: list[float] = []
    # Looked up once, not per step: between two windows only the loss is kept.
    start, stop = timer.start, timer.stop
    started = clock()
    while True:
        for _ in range(policy.steps_until_check(step_s, clock() - started)):
            start()
            loss = step()
            stop()
            keep(loss)
        step_s = timer.durations()
        if stop_reason := policy.measure_done(step_s, clock() - started):
            break
    measure_elapsed_s = clock() - started
    if probes is not None:
        probes.end()
    if losses is not None:
        losses.end_measuring()
    data_wait_s = None if data_timer is None else per_step(data_timer.durations(), len(step_s))
    return StepRecord(
        warmup_s=warmup_s,
        step_s=step_s,
        warmup_reason=warmup_reason,
        stop_reason=stop_reason,
        measure_elapsed_s=measure_elapsed_s,
        data_wait_s=data_wait_s,
    )


def per_step(windows: list[float], steps: int) -> list[float]:
    """The windows of each of ``steps`` steps added up (each step opened as many)."""
    if not steps or len(windows) % steps:
        raise ValueError(f"{len(windows)} data windows do not divide into {steps} steps")
    k = len(windows) // steps
    return [sum(windows[i : i + k]) for i in range(0, len(windows), k)]
