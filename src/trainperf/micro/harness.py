"""The one harness of the micro-benchmarks: warm-up, timed windows, cache flushing, summary.

Each kernel benchmark supplies only what differs: the operation to run once, how many
FLOPs or bytes it moves, and how to check it. This module owns:
- ``time_op``: warm-up calls, then one timing window per call (CUDA events recorded on the
  stream on a GPU, synchronized once at the end; the host clock on a CPU), with an
  optional ``between`` call outside the windows (a cache flush);
- ``held_window_s``: calls too short to time one by one (small copies), queued behind a
  spin kernel and timed as one window of CUDA events, per call (p2pBandwidthLatencyTest's
  method; the p2p kind);
- ``CacheFlusher``: writes a buffer larger than the last-level cache between iterations,
  so each timed call reads its operands from memory, as DeepBench does;
- ``Timing``: the per-call times with mean, median and best (units in the names);
- ``measured_on``: the ``{"device", "metrics"}`` that every kind's ``run_document``
  returns.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trainperf.core.limits import INT64_MAX, ascii_digits
from trainperf.measure.timer import make_timer

# Larger than the L2 of current GPUs (H100/H200: 50 MB) and the L3 of most CPU sockets.
DEFAULT_FLUSH_BYTES = 256 * 2**20
# held_window_s's first hold: ~10 ms at an H100's 1.98 GHz boost clock, longer than the host
# takes to queue 100 staged copies; a hold that ends too soon is tried again, 4 × longer.
SPIN_CYCLES = 20_000_000
SPIN_TRIES = 4


@dataclass(frozen=True)
class Timing:
    """Seconds of every timed call."""

    times_s: tuple[float, ...]

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.times_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def best_s(self) -> float:
        return min(self.times_s)

    def rates(self, amount: float, scale: float = 1.0) -> dict[str, float]:
        """``amount`` per second (e.g. FLOPs) from the mean, median and best time, / scale."""
        return {
            "mean": amount / self.mean_s / scale,
            "median": amount / self.median_s / scale,
            "best": amount / self.best_s / scale,
        }


class CacheFlusher:
    """Overwrites a buffer larger than the caches; call it between timed iterations."""

    def __init__(self, device: torch.device, nbytes: int = DEFAULT_FLUSH_BYTES) -> None:
        self.buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_op(
    op: Callable[[], object],
    device: torch.device,
    *,
    warmup: int = 3,
    iters: int = 10,
    between: Callable[[], object] | None = None,
) -> Timing:
    """Run ``op`` ``warmup`` times untimed, then ``iters`` times each in its own window."""
    if iters < 1:
        raise ValueError("iters must be at least 1")
    for _ in range(warmup):
        op()
    synchronize(device)
    timer = make_timer(device.type)
    for _ in range(iters):
        if between is not None:
            between()
        timer.start()
        op()
        timer.stop()
    return Timing(tuple(timer.durations()))


def held_window_s(enqueue: Callable[[], object], streams: Sequence[Any], repeats: int) -> float:
    """Device seconds per call of ``enqueue``: ``repeats`` calls queued while a spin kernel
    holds ``streams[0]``, timed by CUDA events there.

    Timed on the host, calls shorter than their launch (small copies) measure how fast the
    host queues them. p2pBandwidthLatencyTest (NVIDIA cuda-samples, Samples/
    5_Domain_Specific/p2pBandwidthLatencyTest) launches ``delay<<<1, 1, 0, stream>>>``,
    records the start event, queues the copies and the stop event, releases the kernel and
    takes ``cudaEventElapsedTime / repeat``. Here the spin is ``torch.cuda._sleep(cycles)``
    (a fixed number of GPU clock cycles on the current stream, where the sample spins on a
    host flag), launched on ``streams[0]`` before the start event; the other streams wait
    on the start event, and ``streams[0]`` waits on them before the end event (the sample's
    ``cudaStreamWaitEvent`` pair), so the window holds every call. If the start event has
    already completed once all is queued (``Event.query()``), the spin ended before the host
    finished and the window would include the host's pace: measured again with 4 × the
    cycles, and after ``SPIN_TRIES`` tries RuntimeError rather than a host-bound number.
    """
    lead, others = streams[0], streams[1:]
    cycles = SPIN_CYCLES
    for _ in range(SPIN_TRIES):
        with torch.cuda.stream(lead):
            torch.cuda._sleep(cycles)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(lead)
        for stream in others:
            stream.wait_event(start)
        for _ in range(repeats):
            enqueue()
        for stream in others:
            lead.wait_stream(stream)
        end.record(lead)
        held = not start.query()  # the spin still held the stream once all was queued
        end.synchronize()
        if held:
            return start.elapsed_time(end) / 1e3 / repeats  # elapsed_time is in ms
        cycles *= 4
    raise RuntimeError(
        f"the spin kernel ({cycles // 4} cycles) ended before {repeats} copies were queued: "
        "their time would be the host's queuing rate, so none is recorded"
    )


def measured_on(device: torch.device, metrics: dict[str, Any]) -> dict[str, Any]:
    """What a kind's ``run_document`` returns: the device's description and the metrics."""
    from trainperf.step.benchmark import device_info  # the benchmark stack, loaded when run

    return {"device": device_info(device), "metrics": metrics}


_SIZE_SUFFIXES = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def parse_bytes(text: str) -> int:
    """Bytes of ``text``: a whole number with an optional K, M or G suffix (powers of 1024)."""
    cleaned = str(text).strip().lower()
    suffix = cleaned[-1] if cleaned and cleaned[-1] in "kmg" else ""
    digits = cleaned[: len(cleaned) - len(suffix)]
    if not ascii_digits(digits):
        raise ValueError(
            f"size '{text}' is not valid: use a number with an optional K, M or G suffix, e.g. 8M"
        )
    significant = digits.lstrip("0") or "0"  # int() of thousands of digits raises
    size = int(significant) * _SIZE_SUFFIXES[suffix] if len(significant) <= 19 else INT64_MAX + 1
    if size > INT64_MAX:  # stored with the run: a 64-bit integer, as every number in the store
        raise ValueError(f"size '{text}' is too large: at most {INT64_MAX} bytes")
    return size


def dtype_of(name: str) -> torch.dtype:
    """torch dtype of a micro-benchmark dtype name (tf32 computes on float32 storage)."""
    dtypes = {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
        "fp8": torch.float8_e4m3fn,
    }
    if name not in dtypes:
        raise ValueError(f"dtype '{name}' is not valid: allowed {', '.join(dtypes)}")
    return dtypes[name]
