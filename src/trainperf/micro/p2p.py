"""Peer-to-peer between GPUs, after CUDA's p2pBandwidthLatencyTest: matrices over GPU pairs.

- ``connectivity[i][j]``: whether GPU i can access GPU j's memory directly
  (``torch.cuda.can_device_access_peer``);
- ``unidirectional_gbps[i][j]``: a copy of ``size`` bytes from GPU i to GPU j, size / time;
- ``bidirectional_gbps[i][j]``: copies i→j and j→i at once on two streams, 2 × size / time;
- ``latency_us[i][j]``: the time of a 4-byte copy from i to j.
Each matrix is measured twice. With peer access (``peer``): device-to-device copies, which
PyTorch makes direct (NVLink or PCIe peer-to-peer) where the pair allows it. Without
(``staged``): the copy goes through pinned host memory, which is what the CUDA driver does
for a pair without peer access, and what p2pBandwidthLatencyTest's "P2P disabled" shows.
PyTorch does not expose cudaDeviceDisablePeerAccess, so "disabled" is this explicit
staging, said in the result. Diagonal entries are copies within one GPU.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

DEFAULT_BYTES = 256 * 2**20
LATENCY_BYTES = 4
LATENCY_ITERS = 100


def skip_reason(device_count: int) -> str | None:
    if device_count < 2:
        return f"p2p needs two or more CUDA GPUs; this machine has {device_count}"
    return None


def _elapsed(copies, devices: list[int], iters: int) -> float:
    """Seconds per iteration of ``copies()``, the involved devices synchronized around."""
    for d in devices:
        torch.cuda.synchronize(d)
    started = time.perf_counter()
    for _ in range(iters):
        copies()
    for d in devices:
        torch.cuda.synchronize(d)
    return (time.perf_counter() - started) / iters


def _copier(src: torch.Tensor, dst: torch.Tensor, staged: bool, host: torch.Tensor | None):
    if not staged:
        return lambda: dst.copy_(src, non_blocking=True)

    def through_host() -> None:
        host.copy_(src, non_blocking=True)
        torch.cuda.current_stream(src.device).synchronize()
        dst.copy_(host, non_blocking=True)

    return through_host


def run(nbytes: int = DEFAULT_BYTES, iters: int = 10) -> dict[str, Any]:
    """All four matrices with and without peer access, or a skip with the reason."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    reason = skip_reason(count)
    if reason:
        return {"status": "skipped", "reason": reason}
    ids = list(range(count))
    buffers = {d: torch.empty(nbytes, dtype=torch.uint8, device=d).fill_(d) for d in ids}
    spares = {d: torch.empty(nbytes, dtype=torch.uint8, device=d) for d in ids}
    tiny = {d: torch.empty(LATENCY_BYTES, dtype=torch.uint8, device=d) for d in ids}
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    tiny_host = torch.empty(LATENCY_BYTES, dtype=torch.uint8, pin_memory=True)
    result: dict[str, Any] = {
        "status": "ok",
        "devices": [torch.cuda.get_device_name(d) for d in ids],
        "size_bytes": nbytes,
        "connectivity": [[torch.cuda.can_device_access_peer(i, j) for j in ids] for i in ids],
    }
    for mode, staged in (("peer", False), ("staged", True)):
        uni, bi, latency = [], [], []
        for i in ids:
            uni_row, bi_row, lat_row = [], [], []
            for j in ids:
                one_way = _copier(buffers[i], spares[j], staged, host)
                uni_row.append(nbytes / _elapsed(one_way, [i, j], iters) / 1e9)
                back = _copier(buffers[j], spares[i], staged, host)
                stream_i, stream_j = torch.cuda.Stream(i), torch.cuda.Stream(j)

                def both_ways(one_way=one_way, back=back, si=stream_i, sj=stream_j) -> None:
                    with torch.cuda.stream(si):
                        one_way()
                    with torch.cuda.stream(sj):
                        back()

                bi_row.append(2 * nbytes / _elapsed(both_ways, [i, j], iters) / 1e9)
                ping = _copier(tiny[i], tiny[j], staged, tiny_host)
                lat_row.append(_elapsed(ping, [i, j], LATENCY_ITERS) * 1e6)
            uni.append(uni_row)
            bi.append(bi_row)
            latency.append(lat_row)
        result[mode] = {
            "unidirectional_gbps": uni,
            "bidirectional_gbps": bi,
            "latency_us": latency,
        }
    return result


def run_document(document: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The micro-benchmark kinds' entry point (see trainperf.micro): every GPU pair, so no
    one device describes the run (``devices`` in the metrics names them)."""
    return {"device": None, "metrics": run(document.get("size_bytes") or DEFAULT_BYTES)}
