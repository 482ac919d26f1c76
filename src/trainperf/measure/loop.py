"""The measured loop: warm-up, then timed steps, each bracketed by the step timer.

The only harness work inside a timed window is the timer's own ``start``/``stop`` (a clock
read or an event record). Policy decisions happen between windows and, while measuring,
only at the policy's check points (geometrically spaced for the adaptive policy), so the
loop costs what a hand-written loop costs (benchmarks/harness_overhead.py checks this).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


def measure_steps(
    step: Callable[[], object],
    policy: StepPolicy,
    timer: StepTimer,
    clock: Callable[[], float] = time.perf_counter,
    probes: Any = None,
) -> StepRecord:
    """Run ``step`` under ``policy``, timing every step with ``timer``.

    ``probes`` (trainperf.measure.probes.CaseProbes) hears ``begin()`` when the warm-up is
    over and ``end()`` after the last measured step: its window is the measured steps.
    """
    warmup_started = clock()
    while not (warmup_reason := policy.warmup_done(timer.durations(), clock() - warmup_started)):
        timer.start()
        step()
        timer.stop()
    warmup_s = timer.durations()
    timer.reset()
    if probes is not None:
        probes.begin()

    step_s: list[float] = []
    started = clock()
    while True:
        for _ in range(policy.steps_until_check(step_s, clock() - started)):
            timer.start()
            step()
            timer.stop()
        step_s = timer.durations()
        if stop_reason := policy.measure_done(step_s, clock() - started):
            break
    measure_elapsed_s = clock() - started
    if probes is not None:
        probes.end()
    return StepRecord(
        warmup_s=warmup_s,
        step_s=step_s,
        warmup_reason=warmup_reason,
        stop_reason=stop_reason,
        measure_elapsed_s=measure_elapsed_s,
    )
