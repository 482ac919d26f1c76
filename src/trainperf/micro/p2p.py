"""Peer-to-peer between GPUs, after CUDA's p2pBandwidthLatencyTest: matrices over GPU pairs.

- ``connectivity[i][j]``: whether GPU i can access GPU j's memory directly
  (``torch.cuda.can_device_access_peer``);
- ``unidirectional_gbps[i][j]``: ``iters`` copies of ``size`` bytes from GPU i to GPU j,
  size × iters / time;
- ``bidirectional_gbps[i][j]``: i→j and j→i at once, 2 × size × iters / time. Each
  direction has its own source and destination buffers (four per pair, also on the
  diagonal) and its own streams, so neither direction reads or writes the other's memory;
- ``latency_us[i][j]``: the time of one 4-byte copy from i to j, over ``LATENCY_ITERS``
  copies queued back to back.

Every number is device time between two CUDA events, never the host's clock: timed on the
host, small copies measure how fast the host queues them, not how long they take. As in
p2pBandwidthLatencyTest (NVIDIA cuda-samples, Samples/5_Domain_Specific/
p2pBandwidthLatencyTest), the copies of a measurement (``iters``, or ``LATENCY_ITERS``
for latency) are queued while a spin kernel (``torch.cuda._sleep``) holds the i→j copy's
stream on GPU i, then run back to back between a start and an end event there: time =
elapsed / copies (``harness.held_window_s``, which says how, and refuses a window the spin
did not hold). The other streams of a measurement wait on its start event. One untimed
repetition before each window takes one-time costs (PyTorch enabling peer access on the
first copy) out of it.

Each matrix is measured twice. With peer access (``peer``): ``dst.copy_(src)``, which
PyTorch runs on the source GPU's current stream and makes direct (NVLink or PCIe
peer-to-peer) where the pair allows it. PyTorch puts a two-way event barrier between that
stream and the destination GPU's current stream around every cross-GPU copy (ATen's
``copy_device_to_device``), which the sample's bare ``cudaMemcpyPeerAsync`` has not: a
latency here is that of a PyTorch copy, barrier included. Without (``staged``): the copy
goes through pinned host memory, device to host on a stream of the source GPU, then host to
device on a stream of the destination GPU; two host buffers per direction alternate, so one
repetition's second half overlaps the next one's first, as the CUDA driver pipelines its
own staging for a pair without peer access (p2pBandwidthLatencyTest's "P2P=Disabled").
PyTorch does not expose cudaDeviceDisablePeerAccess, so "disabled" is this explicit
staging, said in the result. Diagonal entries are copies within one GPU (staged through
the host too in ``staged``), counted once (size / time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainperf.micro.harness import held_window_s

DEFAULT_BYTES = 256 * 2**20
LATENCY_BYTES = 4
LATENCY_ITERS = 100


def skip_reason(device_count: int) -> str | None:
    if device_count < 2:
        return f"p2p needs two or more CUDA GPUs; this machine has {device_count}"
    return None


def _alloc(nbytes: int, device: int | None) -> torch.Tensor:
    """``nbytes`` on GPU ``device``, or in pinned host memory when ``device`` is None."""
    if device is None:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


@dataclass
class Direction:
    """One direction of a pair: its own source and destination, the streams it runs on (one
    on the source's GPU, one on the destination's), and, staged, its own two host buffers."""

    src: torch.Tensor
    dst: torch.Tensor
    streams: tuple[Any, Any]
    hosts: tuple[torch.Tensor, torch.Tensor] | None = None
    _free: list[Any] = field(default_factory=list, init=False)  # host buffers read out
    _count: int = field(default=0, init=False)

    def enqueue(self) -> None:
        """Queue one copy, src → dst (nothing waits on the host)."""
        src_stream, dst_stream = self.streams
        if self.hosts is None:
            # PyTorch copies on the source GPU's current stream, ordered after the
            # destination GPU's current stream and before its later work.
            with torch.cuda.stream(src_stream), torch.cuda.stream(dst_stream):
                self.dst.copy_(self.src, non_blocking=True)
            return
        if not self._free:
            self._free = [torch.cuda.Event(), torch.cuda.Event()]
        k = self._count % 2
        self._count += 1
        host, free = self.hosts[k], self._free[k]
        src_stream.wait_event(free)  # the last copy out of this host buffer is done
        with torch.cuda.stream(src_stream):
            host.copy_(self.src, non_blocking=True)
        dst_stream.wait_stream(src_stream)
        with torch.cuda.stream(dst_stream):
            self.dst.copy_(host, non_blocking=True)
        free.record(dst_stream)


def _warm(enqueue: Callable[[], object], devices: list[int]) -> None:
    enqueue()
    for d in devices:
        torch.cuda.synchronize(d)


def _directions(
    i: int, j: int, send: dict, recv: dict, hosts: list | None
) -> tuple[Direction, Direction]:
    """i → j and j → i, each with its own buffers and streams (slot 0 forward, 1 back)."""

    def one(a: int, b: int, slot: int) -> Direction:
        streams = (torch.cuda.Stream(device=a), torch.cuda.Stream(device=b))
        staging = hosts[slot] if hosts is not None else None
        return Direction(send[a][slot], recv[b][slot], streams, staging)

    return one(i, j, 0), one(j, i, 1)


def _buffers(ids: list[int], nbytes: int, staged: bool):
    """Per GPU two sources and two destinations; staged, two host buffers per direction."""
    send = {d: (_alloc(nbytes, d), _alloc(nbytes, d)) for d in ids}
    recv = {d: (_alloc(nbytes, d), _alloc(nbytes, d)) for d in ids}
    hosts = [(_alloc(nbytes, None), _alloc(nbytes, None)) for _ in (0, 1)] if staged else None
    return send, recv, hosts


def _matrices(ids: list[int], nbytes: int, iters: int, staged: bool) -> dict[str, Any]:
    """The bandwidth and latency matrices of one mode (peer or staged)."""
    big, tiny = _buffers(ids, nbytes, staged), _buffers(ids, LATENCY_BYTES, staged)
    uni, bi, latency = [], [], []
    for i in ids:
        uni_row, bi_row, lat_row = [], [], []
        for j in ids:
            forward, back = _directions(i, j, *big)
            _warm(forward.enqueue, [i, j])
            uni_row.append(nbytes / held_window_s(forward.enqueue, [*forward.streams], iters))

            def both_ways(forward=forward, back=back) -> None:
                forward.enqueue()
                back.enqueue()

            streams = [*forward.streams, *back.streams]
            _warm(both_ways, [i, j])
            bi_row.append(2 * nbytes / held_window_s(both_ways, streams, iters))
            ping, _ = _directions(i, j, *tiny)
            _warm(ping.enqueue, [i, j])
            lat_row.append(held_window_s(ping.enqueue, [*ping.streams], LATENCY_ITERS))
        uni.append([bytes_per_s / 1e9 for bytes_per_s in uni_row])
        bi.append([bytes_per_s / 1e9 for bytes_per_s in bi_row])
        latency.append([seconds * 1e6 for seconds in lat_row])
    return {"unidirectional_gbps": uni, "bidirectional_gbps": bi, "latency_us": latency}


def run(nbytes: int = DEFAULT_BYTES, iters: int = 10) -> dict[str, Any]:
    """All four matrices with and without peer access, or a skip with the reason."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    reason = skip_reason(count)
    if reason:
        return {"status": "skipped", "reason": reason}
    ids = list(range(count))
    result: dict[str, Any] = {
        "status": "ok",
        "devices": [torch.cuda.get_device_name(d) for d in ids],
        "size_bytes": nbytes,
        "latency_bytes": LATENCY_BYTES,
        "latency_copies": LATENCY_ITERS,
        "connectivity": [[torch.cuda.can_device_access_peer(i, j) for j in ids] for i in ids],
    }
    for mode, staged in (("peer", False), ("staged", True)):
        result[mode] = _matrices(ids, nbytes, iters, staged)
    return result


def run_document(document: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The micro-benchmark kinds' entry point (see trainperf.micro): every GPU pair, so no
    one device describes the run (``devices`` in the metrics names them)."""
    return {"device": None, "metrics": run(document.get("size_bytes") or DEFAULT_BYTES)}
