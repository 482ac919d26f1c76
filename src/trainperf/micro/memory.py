"""Memory bandwidth: device-to-device copies, host-to-device and device-to-host transfers.

How bytes count, said in every row (``counts``):
- a copy within one memory (device-to-device on a GPU, memory-to-memory on a CPU) reads
  and writes every byte: ``bandwidth_gbps`` = 2 × size / time ("read+write"), the figure
  comparable with a data-sheet memory bandwidth (as CUDA's bandwidthTest and STREAM copy
  count it); ``copy_gbps`` = size / time is given beside it;
- a transfer between host and device moves every byte once over the link:
  ``bandwidth_gbps`` = size / time ("transferred"), with pinned (page-locked) and pageable
  host memory: pageable copies are staged through a pinned buffer by the driver.
GB/s are 1e9 bytes per second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainperf.micro.harness import measured_on, time_op

DEFAULT_BYTES = {"cuda": 256 * 2**20, "cpu": 64 * 2**20}


def _row(kind: str, nbytes: int, seconds: dict[str, float], counts: str) -> dict[str, Any]:
    factor = 2 if counts == "read+write" else 1
    row: dict[str, Any] = {"kind": kind, "size_bytes": nbytes, "counts": counts, "status": "ok"}
    for stat, s in seconds.items():
        row[f"time_us_{stat}"] = s * 1e6
        row[f"bandwidth_gbps_{stat}"] = factor * nbytes / s / 1e9
    row["bandwidth_gbps"] = row["bandwidth_gbps_median"]
    if counts == "read+write":
        row["copy_gbps"] = nbytes / seconds["median"] / 1e9
    return row


def _measure(op, device: torch.device, warmup: int, iters: int) -> dict[str, float]:
    timing = time_op(op, device, warmup=warmup, iters=iters)
    return {"mean": timing.mean_s, "median": timing.median_s, "best": timing.best_s}


def run(
    device: torch.device, nbytes: int | None = None, *, warmup: int = 3, iters: int = 20
) -> dict[str, Any]:
    """Copy bandwidths on ``device`` with buffers of ``nbytes`` (default by device type)."""
    if nbytes is None:
        nbytes = DEFAULT_BYTES[device.type]
    if nbytes < 1:  # 0 once fell back to the default silently
        raise ValueError(f"buffer size must be at least 1 byte, got {nbytes}")
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    kind = "device_to_device" if device.type == "cuda" else "memory_copy"
    rows = [
        _row(kind, nbytes, _measure(lambda: dst.copy_(src), device, warmup, iters), "read+write")
    ]
    if device.type == "cuda":
        for pinned in (True, False):
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned).fill_(1)
            memory = "pinned" if pinned else "pageable"

            def upload(host=host, pinned=pinned) -> None:
                src.copy_(host, non_blocking=pinned)

            def download(host=host, pinned=pinned) -> None:
                host.copy_(src, non_blocking=pinned)

            h2d = _measure(upload, device, warmup, iters)
            d2h = _measure(download, device, warmup, iters)
            rows.append(_row(f"host_to_device_{memory}", nbytes, h2d, "transferred"))
            rows.append(_row(f"device_to_host_{memory}", nbytes, d2h, "transferred"))
    return {"rows": rows}


def run_document(document: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The micro-benchmark kinds' entry point (see trainperf.micro): the document's copies."""
    device = torch.device(document["device"])
    metrics = run(
        device, document.get("size_bytes"), warmup=document["warmup"], iters=document["iters"]
    )
    return measured_on(device, metrics)
