"""Contention, measured: all_reduce beside a GEMM on the same ranks (``micro collective
--under-load``).

A training step overlaps the gradient all_reduce with the backward GEMMs, and the two
compete: on a CPU for cores and memory bandwidth (gloo runs the all_reduce in its own
threads while the main thread runs ``torch.matmul``), on a GPU for SMs and memory (NCCL's
kernels on their stream beside a GEMM stream). Per message size, every rank measures

- the all_reduce alone: one window of ``iters`` calls, busbw as nccl-tests defines it
  (trainperf.micro.collective);
- a square GEMM (``gemm_n``³, the sweep's dtype) alone: back-to-back calls, TFLOP/s =
  2·n³ / time per call (DeepBench's definition, trainperf.micro.gemm);
- the GEMM solo: one rank at a time runs the same GEMMs while the others wait, so its
  rate against the GEMM alone (every rank computing at once, no all_reduce) tells how much
  ranks that share a host slow each other's compute (cores, caches, the memory bus) even
  when nothing is communicated: ``neighbour_slowdown`` = solo / alone TFLOP/s (1 when each
  rank has a device of its own);
- a memory-bound kernel beside them: STREAM's "add" (c = a + b, McCalpin's STREAM
  benchmark; 3 arrays moved per element, 2 read and 1 written) of ``STREAM_ELEMENTS``
  elements, alone, solo and beside the all_reduce like the GEMM. A training step is partly
  compute-bound, partly memory-bound (trainperf.predict.roofline), and its two kinds of
  kernels suffer differently beside a neighbour or a collective (the memory bus is shared
  where the cores are not), so the predictor weighs the two slowdowns by the step's
  memory-bound share, computed at the rates measured here (GEMM TFLOP/s and STREAM GB/s
  solo);
- both together: the all_reduce window runs in a second thread while the main thread
  issues GEMMs back to back from before the window opens until it closes. The window's
  time is the all_reduce under load; the GEMMs that ran wholly inside it give the GEMM rate
  under communication, so neither number includes a stretch where the other was idle.

The four are repeated ``repeats`` times in turn (alone, alone, solo, together), so slow drift
of the machine falls on all three alike; each is the median over repetitions of the mean
over ranks. slowdown = alone / under load (busbw, and GEMM TFLOP/s): 1 when the two do not
compete, 2 when each gets half the machine. The window holds at least ``MIN_GEMMS`` calls of
the longer kernel (GEMM or STREAM add): where ``iters`` all_reduces are shorter, the ranks
agree on more iterations (the row's ``iters``). A GEMM rate that cannot be measured (no
GEMM fitted inside the window) is null with ``*_absent_reason``, never a guess.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from trainperf.micro.collective_ops import (
    COLLECTIVES,
    Participant,
    allocate,
    bandwidths,
    barrier,
    fill,
    layout,
    wrong_elements,
)
from trainperf.micro.harness import synchronize

# The all_reduce window lasts at least this many GEMMs alone.
MIN_GEMMS = 8
# Default GEMM side: ~1-10 ms per call on a CPU core, ~0.1 ms on a current GPU in bf16.
DEFAULT_GEMM_N = {"cpu": 256, "cuda": 4096}
DEFAULT_REPEATS = 3
# STREAM add arrays: 3 x 64 MiB fp32 on a CPU, beyond the last-level cache of most servers
# (a 2-socket Xeon Gold 6148 has 2 x 27.5 MB; 16 MiB arrays ran at 22-27 GB/s on one core
# of the 2-vCPU dev VM against 14 GB/s from 64 MiB up, the rate DDP's 0.25-0.5 GB bucket
# copies reached there: 11.5-12.8 GB/s), 3 x 256 MiB on a GPU (~0.3 ms a call on an H100's
# 3.35 TB/s).
STREAM_ELEMENTS = {"cpu": 16 * 2**20, "cuda": 64 * 2**20}
STREAM_ARRAYS = 3  # bytes moved per call = 3 x elements x element size (STREAM's count)
UNDER_LOAD_OPS = ("all_reduce",)
_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_DTYPES = {name: dtype for dtype, name in _DTYPE_NAMES.items()}
NO_GEMM_INSIDE = (
    "no GEMM ran wholly inside the all_reduce window under load (one GEMM outlasts it): "
    "use a smaller --gemm-size"
)
NO_STREAM_INSIDE = (
    "no STREAM add ran wholly inside the all_reduce window under load (one call outlasts it)"
)


@dataclass(frozen=True)
class UnderLoad:
    """The document's ``under_load``: the GEMM's side and the alone/together repetitions."""

    gemm_n: int
    repeats: int

    @classmethod
    def from_document(cls, under_load: Any, ops: Sequence[str]) -> UnderLoad:
        """ValueError naming the field unless ``under_load`` is ``{"gemm_n", "repeats"}`` of
        whole numbers >= 1 and ``ops`` is all_reduce alone."""
        if not isinstance(under_load, dict) or set(under_load) != {"gemm_n", "repeats"}:
            raise ValueError(f"field 'under_load' is {under_load!r}: {{'gemm_n': N, 'repeats': R}}")
        for name, number in under_load.items():
            if not isinstance(number, int) or isinstance(number, bool) or number < 1:
                raise ValueError(f"field 'under_load.{name}' is {number!r}: a whole number >= 1")
        if tuple(ops) != UNDER_LOAD_OPS:
            raise ValueError(
                f"field 'ops' is {list(ops)!r}: under load measures "
                f"{', '.join(UNDER_LOAD_OPS)} only"
            )
        return cls(**under_load)


# ---------------------------------------------------------------- clocks


class _Clock:
    """Points in time on the device: the host clock on a CPU, CUDA events on a GPU (recorded
    on the current stream, so a point is where that stream's work reached)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def now(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def wait(self, point: Any) -> None:
        if self.cuda:
            point.synchronize()

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start


# ---------------------------------------------------------------- one size


def _back_to_back(
    clock: _Clock, kernel: Callable[[], object], until: Callable[[int], bool]
) -> list[tuple[Any, Any]]:
    """(start, end) of calls of ``kernel`` run back to back until ``until(calls so far)``;
    on a GPU at most two are queued ahead, so the host's loop follows the device."""
    spans: list[tuple[Any, Any]] = []
    while not until(len(spans)):
        start = clock.now()
        kernel()
        spans.append((start, clock.now()))
        if len(spans) > 2:
            clock.wait(spans[-3][1])
    if spans:
        clock.wait(spans[-1][1])
    return spans


def _per_call_s(clock: _Clock, spans: list[tuple[Any, Any]]) -> float:
    return clock.seconds(spans[0][0], spans[-1][1]) / len(spans)


def _comm_window(clock: _Clock, run: Callable[[], None], iters: int) -> tuple[Any, Any]:
    """(start, end) of ``iters`` all_reduces, the end waited for (on a GPU, on the current
    stream only: the device as a whole also runs the GEMMs)."""
    start = clock.now()
    for _ in range(iters):
        run()
    end = clock.now()
    clock.wait(end)
    return start, end


def _together(
    clock: _Clock,
    run: Callable[[], None],
    kernel: Callable[[], object],
    iters: int,
    peers: Participant,
) -> tuple[float, float | None]:
    """(all_reduce seconds per call, ``kernel`` seconds per call or None: none wholly
    inside the window) with both running."""
    window: list[Any] = []
    done = threading.Event()
    failure: list[BaseException] = []
    comm_stream = torch.cuda.Stream(peers.device) if clock.cuda else None

    def communicate() -> None:
        try:
            if clock.cuda:
                torch.cuda.set_device(peers.device)
                with torch.cuda.stream(comm_stream):
                    window.extend(_comm_window(clock, run, iters))
            else:
                window.extend(_comm_window(clock, run, iters))
        except BaseException as exc:  # raised again on the main thread
            failure.append(exc)
        finally:
            done.set()

    kernel()  # the load is running before the window opens
    thread = threading.Thread(target=communicate, name="trainperf-all-reduce", daemon=True)
    thread.start()
    spans = _back_to_back(clock, kernel, lambda calls: done.is_set())
    thread.join()
    synchronize(peers.device)
    if failure:
        raise failure[0]
    start, end = window
    inside = [
        (s, e) for s, e in spans if clock.seconds(start, s) >= 0 and clock.seconds(e, end) >= 0
    ]
    kernel_s = _per_call_s(clock, inside) if inside else None
    return clock.seconds(start, end) / iters, kernel_s


def _solo_s(clock: _Clock, kernel: Callable[[], object], calls: int, peers: Participant) -> float:
    """Seconds per call of ``kernel`` on this rank while every other rank waits at a
    barrier: the ranks take turns, one at a time."""
    mine = 0.0
    for turn in range(peers.n):
        barrier(peers)
        if turn == peers.rank:
            mine = _per_call_s(clock, _back_to_back(clock, kernel, lambda done: done >= calls))
    barrier(peers)
    return mine


def _agreed_max(value: float, peers: Participant) -> float:
    """The largest ``value`` over the ranks (so that every rank runs the same count)."""
    tensor = torch.tensor([value], dtype=torch.float64, device=peers.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def measure_size(
    load: UnderLoad, peers: Participant, size: int, warmup: int, iters: int
) -> dict[str, Any] | None:
    """This rank's row of one message size: per repetition, the all_reduce's seconds alone
    and beside the GEMM, and the GEMM's and STREAM add's per call alone, solo and beside the
    all_reduce (None where none fitted), and the wrong elements."""
    op = COLLECTIVES["all_reduce"]
    elsize = torch.empty((), dtype=peers.dtype).element_size()
    lay = layout(op.name, size, elsize, peers.n)
    if lay is None:
        return None
    buffers = allocate(lay, peers, True)
    fill(op, buffers, lay, peers)
    n = load.gemm_n
    a = torch.randn(n, n, device=peers.device).to(peers.dtype)
    b = torch.randn(n, n, device=peers.device).to(peers.dtype)
    clock = _Clock(peers.device)

    def run() -> None:
        op.run(buffers, peers)

    def gemm() -> object:
        return torch.matmul(a, b)

    elements = STREAM_ELEMENTS[peers.device.type]
    x, y = (torch.rand(elements, device=peers.device, dtype=peers.dtype) for _ in range(2))
    z = torch.empty_like(x)

    def stream() -> object:
        return torch.add(x, y, out=z)

    for _ in range(warmup):
        run()
        gemm()
        stream()
    synchronize(peers.device)
    barrier(peers)
    comm_s = clock.seconds(*_comm_window(clock, run, iters)) / iters
    probe = {
        name: _per_call_s(clock, _back_to_back(clock, kernel, lambda calls: calls >= 3))
        for name, kernel in (("gemm", gemm), ("stream", stream))
    }
    # The window holds MIN_GEMMS calls of the longer kernel, with one count on every rank.
    longest = max(probe.values())
    iters = int(_agreed_max(max(iters, math.ceil(MIN_GEMMS * longest / comm_s)), peers))
    kernels = [
        (name, kernel, max(MIN_GEMMS, math.ceil(iters * comm_s / probe[name])))
        for name, kernel in (("gemm", gemm), ("stream", stream))
    ]

    samples: dict[str, list[float | None]] = {key: [] for key in _SAMPLES}
    for _ in range(load.repeats):
        barrier(peers)
        start, end = _comm_window(clock, run, iters)
        samples["comm_alone_s"].append(clock.seconds(start, end) / iters)
        for name, kernel, calls in kernels:
            barrier(peers)
            spans = _back_to_back(clock, kernel, lambda done, calls=calls: done >= calls)
            samples[f"{name}_alone_s"].append(_per_call_s(clock, spans))
            samples[f"{name}_solo_s"].append(_solo_s(clock, kernel, calls, peers))
            barrier(peers)
            comm_loaded, kernel_loaded = _together(clock, run, kernel, iters, peers)
            samples[f"{name}_loaded_s"].append(kernel_loaded)
            if name == "gemm":  # the all_reduce under load: beside the GEMM
                samples["comm_loaded_s"].append(comm_loaded)

    fill(op, buffers, lay, peers)
    run()
    synchronize(peers.device)
    row = {"op": op.name, "size_bytes": lay.size_bytes, "count": lay.count}
    row |= {"dtype": _DTYPE_NAMES[peers.dtype], "in_place": True, "redop": op.redop, "iters": iters}
    row |= {"gemm_n": n, "gemm_calls_alone": kernels[0][2], "stream_elements": elements}
    return row | samples | {"wrong": wrong_elements(op, buffers, lay, peers)}


def sweep(
    load: UnderLoad, peers: Participant, sizes: Sequence[int], warmup: int, iters: int
) -> list[dict[str, Any]]:
    """This rank's rows, one per message size (sizes that leave no element skipped)."""
    rows = (measure_size(load, peers, size, warmup, iters) for size in sizes)
    return [row for row in rows if row is not None]


# ---------------------------------------------------------------- rank 0: the rows


def _tflops(n: int, seconds: float) -> float:
    return 2 * n**3 / seconds / 1e12


_SAMPLES = (
    "comm_alone_s",
    "gemm_alone_s",
    "gemm_solo_s",
    "comm_loaded_s",
    "gemm_loaded_s",
    "stream_alone_s",
    "stream_solo_s",
    "stream_loaded_s",
)


def _tflops_of(row: dict[str, Any], seconds: float) -> float:
    return _tflops(row["gemm_n"], seconds)


def _gbps(row: dict[str, Any], seconds: float) -> float:
    """STREAM add's GB/s: 3 arrays of the row's elements moved per call."""
    return STREAM_ARRAYS * row["stream_elements"] * _DTYPES[row["dtype"]].itemsize / seconds / 1e9


def _over_ranks(same: Sequence[dict[str, Any]], key: str) -> list[float | None]:
    """Per repetition, the mean of ``key`` over ranks (None if a rank has none)."""
    values = zip(*(r[key] for r in same), strict=True)
    return [None if None in v else statistics.fmean(v) for v in values]


def combine(per_rank: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows of every rank into one per size: per repetition the mean over ranks, then the
    median over repetitions; busbw and TFLOP/s alone and under load, and both slowdowns."""
    n_ranks = len(per_rank)
    combined = []
    for same in zip(*per_rank, strict=True):
        first = same[0]
        row = {k: v for k, v in first.items() if not k.endswith("_s") and k != "wrong"}
        means = {key: _over_ranks(same, key) for key in _SAMPLES}
        comm_alone = statistics.median(means["comm_alone_s"])
        comm_loaded = statistics.median(means["comm_loaded_s"])
        algbw, busbw = bandwidths(row["op"], row["size_bytes"], comm_alone, n_ranks)
        _, busbw_loaded = bandwidths(row["op"], row["size_bytes"], comm_loaded, n_ranks)
        row |= {"time_us": comm_alone * 1e6, "algbw_gbps": algbw, "busbw_gbps": busbw}
        row |= {"time_us_loaded": comm_loaded * 1e6, "busbw_gbps_loaded": busbw_loaded}
        row["busbw_slowdown"] = comm_loaded / comm_alone
        _rates(row, means, "gemm", "gemm_tflops", _tflops_of, NO_GEMM_INSIDE)
        _rates(row, means, "stream", "stream_gbps", _gbps, NO_STREAM_INSIDE)
        row["repeats"] = len(first["comm_alone_s"])
        # Every repetition's value kept (seconds per call, mean over ranks; null: none fitted).
        row["samples"] = means
        combined.append(row | {"wrong": sum(r["wrong"] for r in same)})
    return combined


# The slowdowns each kernel's rates give (``_rates``): beside the other ranks' calls, and
# beside the all_reduce.
_SLOWDOWNS = {
    "gemm": ("neighbour_slowdown", "gemm_slowdown"),
    "stream": ("memory_neighbour_slowdown", "memory_slowdown"),
}


def _rates(
    row: dict[str, Any],
    means: dict[str, list[float | None]],
    kernel: str,
    rate: str,
    rate_of: Callable[[dict[str, Any], float], float],
    none_inside: str,
) -> None:
    """``kernel``'s rates into ``row`` (``rate``, ``rate``_solo, ``rate``_loaded: the median
    over repetitions of ``rate_of(row, seconds per call)``) and its two slowdowns; the
    loaded ones null with ``none_inside`` where no call fitted inside the window."""
    neighbour, loaded_slowdown = _SLOWDOWNS[kernel]
    alone = statistics.median(rate_of(row, s) for s in means[f"{kernel}_alone_s"])
    solo = statistics.median(rate_of(row, s) for s in means[f"{kernel}_solo_s"])
    row |= {rate: alone, f"{rate}_solo": solo, neighbour: solo / alone}
    loaded = [rate_of(row, s) for s in means[f"{kernel}_loaded_s"] if s is not None]
    if loaded:
        row[f"{rate}_loaded"] = statistics.median(loaded)
        row[loaded_slowdown] = alone / row[f"{rate}_loaded"]
    else:
        for key in (f"{rate}_loaded", loaded_slowdown):
            row |= {key: None, f"{key}_absent_reason": none_inside}


# What the predictor's host model reads (``summary``): slowdowns, and the rates solo.
SUMMARY_SLOWDOWNS = (
    "busbw_slowdown",
    "gemm_slowdown",
    "neighbour_slowdown",
    "memory_slowdown",
    "memory_neighbour_slowdown",
)
# ``stream_gbps``: every rank streaming at once, the rate of DDP's bucket copies.
SUMMARY_RATES = ("gemm_tflops_solo", "stream_gbps_solo", "stream_gbps")


def summary(rows: Sequence[dict[str, Any]], load: UnderLoad, dtype: str) -> dict[str, Any]:
    """What the predictor's host model reads: the median slowdowns and rates over the
    sizes."""
    out: dict[str, Any] = {"gemm_n": load.gemm_n, "gemm_dtype": dtype, "repeats": load.repeats}
    for key in SUMMARY_SLOWDOWNS + SUMMARY_RATES:
        values = [r[key] for r in rows if r.get(key) is not None]
        out[key] = statistics.median(values) if values else None
        if not values:
            inside = {"gemm_slowdown": NO_GEMM_INSIDE, "memory_slowdown": NO_STREAM_INSIDE}
            out[f"{key}_absent_reason"] = "no size of the sweep measured it" + (
                f" ({inside[key]})" if key in inside else ""
            )
    return out


# ---------------------------------------------------------------- the table


def _number(value: Any, width: int, fmt: str) -> str:
    return f"{value:{width}{fmt}}" if isinstance(value, int | float) else f"{'--':>{width}s}"


def format_table(metrics: dict[str, Any], world_size: int, backend: str) -> str:
    """One line per size: busbw alone, under load and the slowdown; GEMM TFLOP/s the same."""
    load = metrics["under_load"]
    lines = [
        f"# world_size {world_size}  backend {backend}  all_reduce under load: GEMM "
        f"M=N=K={load['gemm_n']} {load['gemm_dtype']}, median of {load['repeats']} repeats",
        "#",
        "# {:>10s}  {:>6s}  {:>9s}  {:>9s}  {:>8s}  {:>9s}  {:>9s}  {:>8s}  {:>6s}".format(
            "", "", "busbw", "", "", "GEMM", "", "", ""
        ),
        "# {:>10s}  {:>6s}  {:>9s}  {:>9s}  {:>8s}  {:>9s}  {:>9s}  {:>8s}  {:>6s}".format(
            "size (B)",
            "iters",
            "alone",
            "loaded",
            "slowdown",
            "alone",
            "loaded",
            "slowdown",
            "#wrong",
        ),
        "# {:>10s}  {:>6s}  {:>9s}  {:>9s}  {:>8s}  {:>9s}  {:>9s}  {:>8s}  {:>6s}".format(
            "", "", "(GB/s)", "(GB/s)", "", "(TFLOP/s)", "(TFLOP/s)", "", ""
        ),
    ]
    for row in metrics["rows"]:
        lines.append(
            f"  {row['size_bytes']:10d}  {row['iters']:6d}  {row['busbw_gbps']:9.3f}"
            f"  {row['busbw_gbps_loaded']:9.3f}  {row['busbw_slowdown']:8.2f}"
            f"  {row['gemm_tflops']:9.4f}  {_number(row['gemm_tflops_loaded'], 9, '.4f')}"
            f"  {_number(row['gemm_slowdown'], 8, '.2f')}  {row['wrong']:6d}"
        )
    lines.append(
        f"# Median slowdown      : busbw {_number(load['busbw_slowdown'], 0, '.2f')}"
        f"  GEMM {_number(load['gemm_slowdown'], 0, '.2f')}"
        f"  GEMM beside the other ranks' GEMMs "
        f"{_number(load.get('neighbour_slowdown'), 0, '.2f')}"
    )
    lines.append(
        f"# STREAM add {_number(load.get('stream_gbps_solo'), 0, '.3g')} GB/s solo: "
        f"beside the all_reduce {_number(load.get('memory_slowdown'), 0, '.2f')}, beside "
        f"the other ranks' {_number(load.get('memory_neighbour_slowdown'), 0, '.2f')}"
    )
    for key in SUMMARY_SLOWDOWNS:
        if load.get(f"{key}_absent_reason"):
            lines.append(f"# {key} absent: {load[f'{key}_absent_reason']}")
    absent = {
        r["gemm_tflops_loaded_absent_reason"]
        for r in metrics["rows"]
        if r.get("gemm_tflops_loaded_absent_reason")
    }
    lines += [f"# GEMM under load absent for some sizes: {reason}" for reason in sorted(absent)]
    return "\n".join(line.rstrip() for line in lines) + "\n"
