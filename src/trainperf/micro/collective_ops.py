"""The collectives of the nccl-tests-style benchmark: one plug-in per op, and the size,
count and bandwidth definitions of nccl-tests (see trainperf.micro.collective, whose
docstring gives the table). Each plug-in supplies only what differs: its byte count, its
bus-bandwidth factor, its buffers, how to run it once, and its exactly representable
inputs and expected result. The buffers, their filling and exact checking, and the
barrier close the module: shared by the sweep (collective.py) and by all_reduce under load
(contention.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

DTYPES = ("fp32", "fp16", "bf16")
DEVICES = ("cpu", "cuda")
# The names nccl-tests prints in its type column.
NCCL_TYPE_NAMES = {"fp32": "float", "fp16": "half", "bf16": "bfloat16"}
# Every integer from 0 to this is exact in the dtype: 2 ** (significand bits + 1).
EXACT_INTEGERS = {torch.float32: 2**24, torch.float16: 2**11, torch.bfloat16: 2**8}
# At most this many distinct input values (0 .. LEVELS-1) per element.
LEVELS = 7
# Written into receive buffers before the checked run; valid results are never negative.
SENTINEL = -1.0
# Elements checked at a time: bounds the host memory of checking a large buffer.
CHECK_CHUNK = 2**22
GB = 1e9


# ---------------------------------------------------------------- sizes and bandwidths


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """``min_bytes``, ``min_bytes * factor``, ... up to ``max_bytes`` (nccl-tests' -b -e -f)."""
    if factor < 2:
        raise ValueError(f"factor must be at least 2, got {factor}")
    if min_bytes < 1:
        raise ValueError(f"min_bytes must be at least 1, got {min_bytes}")
    if max_bytes < min_bytes:
        raise ValueError(f"max_bytes ({max_bytes}) is smaller than min_bytes ({min_bytes})")
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


@dataclass(frozen=True)
class Layout:
    """Elements of one size of a sweep: nccl-tests' count column and the two buffers."""

    count: int
    send: int
    recv: int
    elsize: int

    @property
    def size_bytes(self) -> int:
        return max(self.send, self.recv) * self.elsize


def _same(total: int, n: int, elsize: int) -> tuple[int, int, int]:
    return total, total, total


def _per_rank(total: int, n: int, elsize: int) -> int:
    """nccl-tests' ``(count/nranks) & -(16/eltSize)``: whole 16-byte pieces per rank."""
    align = max(1, 16 // elsize)
    return total // n // align * align


def _gathered(total: int, n: int, elsize: int) -> tuple[int, int, int]:  # output: n slices
    c = _per_rank(total, n, elsize)
    return c, c, n * c


def _scattered(total: int, n: int, elsize: int) -> tuple[int, int, int]:  # input: n slices
    c = _per_rank(total, n, elsize)
    return c, n * c, c


def _exchanged(total: int, n: int, elsize: int) -> tuple[int, int, int]:  # n slices each way
    c = _per_rank(total, n, elsize)
    return c, n * c, n * c


# ---------------------------------------------------------------- exact inputs


@dataclass(frozen=True)
class Participant:
    """This rank among the ``n`` of the job, and what its buffers are made of."""

    rank: int
    n: int
    device: torch.device
    dtype: torch.dtype


def levels(n: int, dtype: torch.dtype) -> int:
    """Distinct input values per element such that a sum over ``n`` ranks stays exact."""
    return min(LEVELS, EXACT_INTEGERS[dtype] // n + 1)


def value(rank: int | torch.Tensor, index: torch.Tensor, peers: Participant) -> torch.Tensor:
    """Input of ``rank`` at element ``index`` (float64): (index + rank) mod k, k <= 7 levels.

    When even 0/1 values could sum past the exact range (bf16 beyond 256 ranks), exactly
    one rank holds a 1 at each element.
    """
    k = levels(peers.n, peers.dtype)
    if k == 1:
        return (index % peers.n == rank).double()
    return ((index + rank) % k).double()


def value_sum(index: torch.Tensor, peers: Participant) -> torch.Tensor:
    """Sum over all ranks of ``value(rank, index)``, in closed form.

    Over each run of k consecutive ranks the residues (index + rank) mod k take every value
    0..k-1 once; the n mod k ranks left over add (index + j) mod k for j < n mod k.
    """
    k = levels(peers.n, peers.dtype)
    if k == 1:
        return torch.ones(index.shape, dtype=torch.float64)
    total = torch.full(index.shape, (peers.n // k) * k * (k - 1) / 2, dtype=torch.float64)
    for j in range(peers.n % k):
        total += (index + j) % k
    return total


# ---------------------------------------------------------------- the plug-ins


Values = Callable[[torch.Tensor, Layout, Participant], torch.Tensor | None]


@dataclass(frozen=True)
class Buffers:
    send: torch.Tensor
    recv: torch.Tensor


@dataclass(frozen=True)
class Collective:
    """What one collective adds to the harness.

    ``split(total elements, n, element bytes)`` gives (count, send elements, receive
    elements);
    ``factor(n)`` is busbw / algbw; ``run`` calls torch.distributed once; ``inputs`` gives
    this rank's send buffer at the given indices and ``expected`` its receive buffer (None:
    nothing to check on this rank), both float64.
    """

    name: str
    split: Callable[[int, int, int], tuple[int, int, int]]
    factor: Callable[[int], float]
    in_place: tuple[bool, ...]
    run: Callable[[Buffers, Participant], None]
    inputs: Values
    expected: Values
    redop: str | None = None
    root: int | None = None
    min_ranks: int = 1


def _own(index: torch.Tensor, layout: Layout, peers: Participant) -> torch.Tensor:
    return value(peers.rank, index, peers)


def _send_recv(buffers: Buffers, peers: Participant) -> None:
    ops = [
        dist.P2POp(dist.isend, buffers.send, (peers.rank + 1) % peers.n),
        dist.P2POp(dist.irecv, buffers.recv, (peers.rank - 1) % peers.n),
    ]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def _all_gather_single() -> Callable[..., Any]:
    """torch.distributed.all_gather_single, under its older name where it lacks the new one
    (torch 2.11 has only all_gather_into_tensor: seen on an H200 machine's image)."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _reduce_scatter_single() -> Callable[..., Any]:
    """torch.distributed.reduce_scatter_single, or reduce_scatter_tensor (see above)."""
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _ring(n: int) -> float:
    return (n - 1) / n


def _once(n: int) -> float:
    return 1.0


COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective(
            name="all_reduce",
            split=_same,
            factor=lambda n: 2 * (n - 1) / n,
            in_place=(True,),
            run=lambda b, p: dist.all_reduce(b.recv),
            inputs=_own,
            expected=lambda i, lay, p: value_sum(i, p),
            redop="sum",
        ),
        Collective(
            name="all_gather",
            split=_gathered,
            factor=_ring,
            in_place=(False, True),
            run=lambda b, p: _all_gather_single()(b.recv, b.send),
            inputs=lambda i, lay, p: value(p.rank, p.rank * lay.count + i, p),
            expected=lambda i, lay, p: value(i // lay.count, i, p),
        ),
        Collective(
            name="reduce_scatter",
            split=_scattered,
            factor=_ring,
            in_place=(False, True),
            run=lambda b, p: _reduce_scatter_single()(b.recv, b.send),
            inputs=_own,
            expected=lambda i, lay, p: value_sum(p.rank * lay.count + i, p),
            redop="sum",
        ),
        Collective(
            name="broadcast",
            split=_same,
            factor=_once,
            in_place=(True,),
            run=lambda b, p: dist.broadcast(b.recv, src=0),
            inputs=lambda i, lay, p: (
                value(0, i, p)
                if p.rank == 0
                else torch.full(i.shape, SENTINEL, dtype=torch.float64)
            ),
            expected=lambda i, lay, p: value(0, i, p),
            root=0,
        ),
        Collective(
            name="reduce",
            split=_same,
            factor=_once,
            in_place=(True,),
            run=lambda b, p: dist.reduce(b.recv, dst=0),
            inputs=_own,
            expected=lambda i, lay, p: value_sum(i, p) if p.rank == 0 else None,
            redop="sum",
            root=0,
        ),
        Collective(
            name="all_to_all",
            split=_exchanged,
            factor=_ring,
            in_place=(False,),
            run=lambda b, p: dist.all_to_all_single(b.recv, b.send),
            inputs=_own,
            # Slice s of the output is slice `rank` of rank s's input.
            expected=lambda i, lay, p: value(i // lay.count, p.rank * lay.count + i % lay.count, p),
        ),
        Collective(
            name="sendrecv",
            split=_same,
            factor=_once,
            in_place=(False,),
            run=_send_recv,
            inputs=_own,
            expected=lambda i, lay, p: value((p.rank - 1) % p.n, i, p),
            min_ranks=2,
        ),
    )
}


OPS = tuple(COLLECTIVES)


def collective(name: str) -> Collective:
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective '{name}': allowed {', '.join(COLLECTIVES)}")
    return COLLECTIVES[name]


def layout(op: str, size_bytes: int, elsize: int, n: int) -> Layout | None:
    """The buffers nccl-tests uses for ``size_bytes`` of ``op``; None if no element fits."""
    count, send, recv = collective(op).split(size_bytes // elsize, n, elsize)
    return Layout(count, send, recv, elsize) if count > 0 else None


def bandwidths(op: str, size_bytes: int, time_s: float, n: int) -> tuple[float, float]:
    """(algbw_gbps, busbw_gbps) of moving ``size_bytes`` of ``op`` in ``time_s`` on n ranks."""
    algbw_gbps = size_bytes / time_s / GB
    return algbw_gbps, algbw_gbps * collective(op).factor(n)


# ---------------------------------------------------------------- buffers and checking


def allocate(lay: Layout, peers: Participant, in_place: bool) -> Buffers:
    """Separate buffers, or nccl-tests' in-place: the smaller buffer is the rank's slice
    of the larger (the same buffer when both are the same size)."""

    def empty(elements: int) -> torch.Tensor:
        return torch.empty(elements, dtype=peers.dtype, device=peers.device)

    if not in_place:
        return Buffers(empty(lay.send), empty(lay.recv))
    big = empty(max(lay.send, lay.recv))
    if lay.send == lay.recv:
        return Buffers(big, big)
    small = min(lay.send, lay.recv)
    view = big[peers.rank * small : (peers.rank + 1) * small]
    return Buffers(view, big) if lay.send == small else Buffers(big, view)


def _chunks(elements: int) -> Iterator[tuple[slice, torch.Tensor]]:
    """Consecutive pieces of a buffer: the slice and its element indices."""
    for start in range(0, elements, CHECK_CHUNK):
        stop = min(start + CHECK_CHUNK, elements)
        yield slice(start, stop), torch.arange(start, stop)


def fill(op: Collective, buffers: Buffers, lay: Layout, peers: Participant) -> None:
    """Sentinel in the receive buffer, then this rank's exact inputs in the send buffer."""
    buffers.recv.fill_(SENTINEL)
    for piece, index in _chunks(len(buffers.send)):
        buffers.send[piece].copy_(op.inputs(index, lay, peers).to(peers.dtype))


def wrong_elements(op: Collective, buffers: Buffers, lay: Layout, peers: Participant) -> int:
    """Elements of this rank's receive buffer that differ from the exact result."""
    wrong = 0
    for piece, index in _chunks(len(buffers.recv)):
        expected = op.expected(index, lay, peers)
        if expected is None:
            return 0
        wrong += int((buffers.recv[piece].cpu() != expected.to(peers.dtype)).sum())
    return wrong


def barrier(peers: Participant) -> None:
    if peers.device.type == "cuda":
        dist.barrier(device_ids=[peers.device.index])
    else:
        dist.barrier()
