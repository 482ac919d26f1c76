"""Peak memory of a case: device memory on a GPU, resident set size of the process on a CPU."""

from __future__ import annotations

import resource
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MemoryPeak:
    mem_peak_bytes: int
    source: str
    mem_reserved_peak_bytes: int | None = None
    # Per CUDA device when the case uses several in one process (DataParallel).
    mem_peak_bytes_per_device: list[int] | None = None


def _indices(device: torch.device, device_indices: Sequence[int] | None) -> list[int]:
    return list(device_indices) if device_indices is not None else [device.index or 0]


def reset_peak(device: torch.device, device_indices: Sequence[int] | None = None) -> None:
    """Forget earlier peaks, so the reading covers what follows (GPU only: RSS cannot).

    ``device_indices``: every CUDA device the case uses (DataParallel); default ``device``.
    """
    if device.type == "cuda":
        for index in _indices(device, device_indices):
            torch.cuda.reset_peak_memory_stats(index)


def read_peak(device: torch.device, device_indices: Sequence[int] | None = None) -> MemoryPeak:
    """The peak since ``reset_peak``: allocated tensors (and the caching allocator's
    reservation) on a GPU; on a CPU the process's peak RSS over its whole life, which a
    fresh worker process per case keeps meaningful.

    Over several GPUs (``device_indices``) the peak is the largest device's, as a ddp
    case reports the largest rank's: it is what must fit on one device. Each device's
    peak is in ``mem_peak_bytes_per_device``.
    """
    if device.type == "cuda":
        indices = _indices(device, device_indices)
        allocated = [int(torch.cuda.max_memory_allocated(i)) for i in indices]
        reserved = [int(torch.cuda.max_memory_reserved(i)) for i in indices]
        several = len(indices) > 1
        return MemoryPeak(
            mem_peak_bytes=max(allocated),
            source="torch.cuda.max_memory_allocated" + (" (max over devices)" if several else ""),
            mem_reserved_peak_bytes=max(reserved),
            mem_peak_bytes_per_device=allocated if several else None,
        )
    # ru_maxrss is in kilobytes on Linux, in bytes on macOS.
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024
    return MemoryPeak(
        mem_peak_bytes=int(maxrss * scale), source="getrusage ru_maxrss (process RSS)"
    )
