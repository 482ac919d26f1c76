"""DDP's bucketed all-reduces overlapped with the backward pass, freely or beside compute
that they slow and that slows them (``trainperf.predict.model``, module doc 3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainperf.predict.inputs import Measured
from trainperf.predict.terms import (
    OWN_ENGINE,
    TIME_SHARED,
    Contention,
)


def ready_fractions(buckets: Sequence[float], at_end: int = 0) -> list[float]:
    """When each bucket is ready, as a fraction of the backward pass: gradients appear
    uniformly over it, so a bucket is ready once the bytes up to and including it are done;
    the last ``at_end`` buckets (tied weights, whose gradient is complete only when the
    backward reaches their first use, GPT-2's token embedding) are ready when it ends, the
    others spread over the whole pass."""
    spread = list(buckets[: len(buckets) - at_end])
    total, done, out = sum(spread), 0.0, []
    for size in spread:
        done += size
        out.append(done / total if total > 0 else 1.0)
    return out + [1.0] * (len(buckets) - len(spread))


def ddp_step(
    t_fwd: float,
    t_bwd: float,
    buckets: Sequence[float],
    allreduce: Any,
    ready: Sequence[float] | None = None,
) -> tuple[float, float]:
    """(step_s, comm_s) of DDP's bucketed all-reduces overlapped with the backward pass.

    ``allreduce(n_bytes) -> seconds``; buckets in the order they become ready, at the
    fractions ``ready`` of the backward (``ready_fractions`` by default).
    """
    fractions = ready_fractions(buckets) if ready is None else ready
    end = comm = 0.0
    for size, fraction in zip(buckets, fractions, strict=True):
        t = allreduce(size)
        end = max(t_fwd + fraction * t_bwd, end) + t
        comm += t
    return max(t_fwd + t_bwd, end), comm


def contended_ddp_step(
    t_fwd: float,
    t_bwd: float,
    buckets: Sequence[float],
    allreduce: Any,
    contention: Contention,
    ready: Sequence[float] | None = None,
) -> tuple[float, float]:
    """(step_s, comm_s) of DDP's bucketed all-reduces beside a backward pass that they slow
    and that slows them (module doc, 3): while both run, the backward's work advances at
    1/s_c per second and the running all-reduce's at 1/s_m; alone, each at full speed.
    Buckets become ready as in ``ddp_step`` (which this equals when s_c = s_m = 1), one
    all-reduce at a time; ``comm_s`` is their time alone."""
    total = sum(buckets)
    needs = [allreduce(size) for size in buckets]
    if total <= 0 or not any(needs):
        return t_fwd + t_bwd, sum(needs)
    fractions = ready_fractions(buckets) if ready is None else ready
    # backward work (s alone) after which each bucket is ready
    ready = [fraction * t_bwd for fraction in fractions]
    compute_rate, comm_rate = 1 / contention.compute_slowdown, 1 / contention.comm_slowdown
    clock, work, running, started = t_fwd, 0.0, 0.0, 0
    while work < t_bwd or running > 0 or started < len(needs):
        if running <= 0 and started < len(needs) and ready[started] <= work:
            running, started = needs[started], started + 1
            continue
        if running <= 0:  # the backward alone, up to the next bucket ready
            clock, work = clock + ready[started] - work, ready[started]
        elif work >= t_bwd:  # the all-reduce alone, after the backward
            clock, running = clock + running, 0.0
        else:  # both: up to whichever ends first
            dt = min((t_bwd - work) / compute_rate, running / comm_rate)
            clock, work = clock + dt, min(t_bwd, work + dt * compute_rate)
            running = max(0.0, running - dt * comm_rate)
            if running < 1e-15 * max(needs):  # rounding: this one is done
                running = 0.0
    return max(clock, t_fwd + t_bwd), sum(needs)  # never below the compute, for rounding


def contention_of(device: Any, measured: Measured) -> Contention:
    """What communication costs compute on ``device``: as measured, else by where the
    collectives run (a CPU's on the cores: time-shared; a GPU's on their own engines)."""
    if measured.contention is not None:
        return measured.contention
    return TIME_SHARED if getattr(device, "kind", "gpu") == "cpu" else OWN_ENGINE
