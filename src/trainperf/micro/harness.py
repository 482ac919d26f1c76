"""The one harness of the micro-benchmarks: warm-up, timed windows, cache flushing, summary.

Each kernel benchmark supplies only what differs: the operation to run once, how many
FLOPs or bytes it moves, and how to check it. This module owns:
- ``time_op``: warm-up calls, then one timing window per call (CUDA events recorded on the
  stream on a GPU, synchronized once at the end; the host clock on a CPU), with an
  optional ``between`` call outside the windows (a cache flush);
- ``CacheFlusher``: writes a buffer larger than the last-level cache between iterations,
  so each timed call reads its operands from memory, as DeepBench does;
- ``Timing``: the per-call times with mean, median and best (units in the names);
- ``measured_on``: the ``{"device", "metrics"}`` that every kind's ``run_document``
  returns.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainperf.limits import INT64_MAX
from trainperf.measure.timer import make_timer

# Larger than the L2 of current GPUs (H100/H200: 50 MB) and the L3 of most CPU sockets.
DEFAULT_FLUSH_BYTES = 256 * 2**20


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


def measured_on(device: torch.device, metrics: dict[str, Any]) -> dict[str, Any]:
    """What a kind's ``run_document`` returns: the device's description and the metrics."""
    from trainperf.benchmark import device_info  # the benchmark stack, loaded when run

    return {"device": device_info(device), "metrics": metrics}


_SIZE_SUFFIXES = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def parse_bytes(text: str) -> int:
    """Bytes of ``text``: a whole number with an optional K, M or G suffix (powers of 1024)."""
    cleaned = str(text).strip().lower()
    suffix = cleaned[-1] if cleaned and cleaned[-1] in "kmg" else ""
    digits = cleaned[: len(cleaned) - len(suffix)]
    if not (digits.isascii() and digits.isdigit()):
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
