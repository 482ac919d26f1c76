"""Peak memory of a case: device memory on a GPU, resident set size of the process on a CPU."""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MemoryPeak:
    mem_peak_bytes: int
    source: str
    mem_reserved_peak_bytes: int | None = None


def reset_peak(device: torch.device) -> None:
    """Forget earlier peaks, so the reading covers what follows (GPU only: RSS cannot)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def read_peak(device: torch.device) -> MemoryPeak:
    """The peak since ``reset_peak``: allocated tensors (and the caching allocator's
    reservation) on a GPU; on a CPU the process's peak RSS over its whole life, which a
    fresh worker process per case keeps meaningful."""
    if device.type == "cuda":
        return MemoryPeak(
            mem_peak_bytes=int(torch.cuda.max_memory_allocated(device)),
            source="torch.cuda.max_memory_allocated",
            mem_reserved_peak_bytes=int(torch.cuda.max_memory_reserved(device)),
        )
    # ru_maxrss is in kilobytes on Linux, in bytes on macOS.
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024
    return MemoryPeak(
        mem_peak_bytes=int(maxrss * scale), source="getrusage ru_maxrss (process RSS)"
    )
