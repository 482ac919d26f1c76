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


def _copy_shares(buckets: Sequence[float], copy_out: float) -> list[float]:
    """Seconds of copying each bucket back into its gradients: ``copy_out`` split by bytes."""
    total = sum(buckets)
    return [copy_out * size / total if total > 0 else 0.0 for size in buckets]


def ddp_step(
    t_fwd: float,
    t_bwd: float,
    buckets: Sequence[float],
    allreduce: Any,
    ready: Sequence[float] | None = None,
    copy_out: float = 0.0,
) -> tuple[float, float]:
    """(step_s, comm_s) of DDP's bucketed all-reduces overlapped with the backward pass.

    ``allreduce(n_bytes) -> seconds``; buckets in the order they become ready, at the
    fractions ``ready`` of the backward (``ready_fractions`` by default). ``copy_out``:
    seconds of copying the reduced buckets back into the gradients (DDP's
    ``finalize_backward``: once the backward has ended, bucket by bucket, each after its
    all-reduce), split over the buckets by bytes.
    """
    fractions = ready_fractions(buckets) if ready is None else ready
    end = comm = 0.0
    finish = t_fwd + t_bwd
    for size, fraction, copy in zip(
        buckets, fractions, _copy_shares(buckets, copy_out), strict=True
    ):
        t = allreduce(size)
        end = max(t_fwd + fraction * t_bwd, end) + t
        comm += t
        finish = max(finish, end) + copy
    return finish, comm


def contended_ddp_step(
    t_fwd: float,
    t_bwd: float,
    buckets: Sequence[float],
    allreduce: Any,
    contention: Contention,
    ready: Sequence[float] | None = None,
    copy_out: float = 0.0,
) -> tuple[float, float]:
    """(step_s, comm_s) of DDP's bucketed all-reduces beside a backward pass that they slow
    and that slows them (module doc, 3): while both run, the compute's work (the backward,
    then the copies back out of the buckets, as in ``ddp_step``) advances at 1/s_c per
    second and the running all-reduce's at 1/s_m; alone, each at full speed. s_c and s_m are
    the running bucket's (``Contention.at`` its size: a small all-reduce slows the compute,
    and is slowed, less than a large one). Buckets become ready as in ``ddp_step`` (which
    this equals when s_c = s_m = 1), one all-reduce at a time; ``comm_s`` is their time
    alone."""
    needs = [allreduce(size) for size in buckets]
    if sum(buckets) <= 0 or not any(needs):
        return t_fwd + t_bwd + copy_out, sum(needs)
    fractions = ready_fractions(buckets) if ready is None else ready
    # backward work (s alone) after which each bucket is ready
    ready = [fraction * t_bwd for fraction in fractions]
    copies = _copy_shares(buckets, copy_out)
    rates = [tuple(1 / slowdown for slowdown in contention.at(size)) for size in buckets]
    count, tiny = len(needs), 1e-15 * max(needs)
    clock, work, running, started = t_fwd, 0.0, 0.0, 0
    copied, copying = 0, 0.0  # copies done, and seconds (alone) left of the current one
    while work < t_bwd or running > 0 or started < count or copied < count:
        if running <= 0 and started < count and ready[started] <= work:
            running, started = needs[started], started + 1
            continue
        if work >= t_bwd and copying <= 0 and copied < count:
            reduced = started > copied + 1 or (started == copied + 1 and running <= 0)
            if reduced:  # bucket ``copied`` is reduced: copy it out
                copying = copies[copied]
                if copying <= 0:
                    copied += 1
                continue
        computing = work < t_bwd or copying > 0
        if not computing and running <= 0:  # nothing runs: only rounding can get here
            break
        if not computing:  # an all-reduce alone
            clock, running = clock + running, 0.0
            continue
        left = t_bwd - work if work < t_bwd else copying
        if running <= 0:  # compute alone, up to the next bucket ready or its end
            step = min(left, ready[started] - work) if work < t_bwd and started < count else left
            clock += step
        else:  # both: up to whichever ends first
            compute_rate, comm_rate = rates[started - 1]  # the running bucket's
            step = min(left / compute_rate, running / comm_rate)
            clock += step
            running = max(0.0, running - step * comm_rate)
            if running < tiny:  # rounding: this one is done
                running = 0.0
            step *= compute_rate
        if work < t_bwd:
            work = min(t_bwd, work + step)
        else:
            copying -= step
            if copying <= tiny:
                copying, copied = 0.0, copied + 1
    return max(clock, t_fwd + t_bwd), sum(needs)  # never below the compute, for rounding


def contention_of(device: Any, measured: Measured) -> Contention:
    """What communication costs compute on ``device``: as measured, else by where the
    collectives run (a CPU's on the cores: time-shared; a GPU's on their own engines). A GPU
    without peer-to-peer stays on its own engines: NCCL's SHM transport stages the bytes
    through host memory, but the GPU moves them (its kernels on mapped host buffers, or its
    copy engines with NCCL_SHM_USE_CUDA_MEMCPY=1, default 0: NVIDIA/nccl
    src/transport/shm.cc), not the host's cores; the slower path is the link's
    (``pcie3-staged``)."""
    if measured.contention is not None:
        return measured.contention
    return TIME_SHARED if getattr(device, "kind", "gpu") == "cpu" else OWN_ENGINE
