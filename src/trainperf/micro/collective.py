"""Collective micro-benchmark with the definitions of NVIDIA's nccl-tests.

Definitions, from nccl-tests' doc/PERFORMANCE.md and the ``*GetCollByteCount`` and
``*GetBw`` functions of its src/*.cu, for ``n`` ranks and elements of ``e`` bytes:

==============  ==========================  ============================  =============
op              count (nccl-tests' column)  size_bytes (its size column)  busbw / algbw
==============  ==========================  ============================  =============
all_reduce      count                       count*e                       2(n-1)/n
all_gather      c, sent by each rank        n*c*e, the output             (n-1)/n
reduce_scatter  c, received by each rank    n*c*e, the input              (n-1)/n
all_to_all      c, sent to each peer        n*c*e, each rank's send       (n-1)/n
broadcast       count                       count*e                       1
reduce          count                       count*e                       1
sendrecv        count                       count*e                       1
==============  ==========================  ============================  =============

``size_bytes`` is the larger of the send and receive buffers (nccl-tests prints
``max(sendBytes, recvBytes)``); ``algbw_gbps = size_bytes / time_s / 1e9``. ``busbw_gbps =
algbw_gbps * factor`` makes the numbers comparable to the hardware's bandwidth whatever
``n``: in an all-reduce each rank must send and receive 2(n-1)/n of the data (a
reduce-scatter then an all-gather, (n-1)/n each); broadcast, reduce and send/receive move
the data once over the slowest link. A sweep gives sizes in bytes of ``size_bytes``; the
count is ``size // e``; where the size is a total over ranks (all_gather, reduce_scatter,
all_to_all) it is divided by ``n`` and, as current nccl-tests does (``(count/nranks) &
-(16/eltSize)``), rounded down to whole 16 bytes per rank. The size actually moved is
reported, as nccl-tests does; sizes that leave no element are skipped. (Current nccl-tests
also switches all_reduce's factor to (n-1)/(n+1) when NCCL_ALGO forces NVLS; trainperf keeps
PERFORMANCE.md's 2(n-1)/n, as NCCL picks its algorithm by itself here.)

Timing, as nccl-tests' BenchTime: ``warmup`` untimed iterations, a barrier, then one window
around ``iters`` iterations (CUDA events on a GPU, the host clock on a CPU); the time of
one iteration is the window / ``iters``, averaged over ranks (nccl-tests' default
``-a 1``). ``#wrong`` is checked on one more run with fresh inputs and summed over ranks;
"Avg bus bandwidth" is the mean busbw of every row of an op, in-place and out-of-place.

In-place and out-of-place. torch.distributed's all_reduce, broadcast and reduce take one
tensor that is both the send and the receive buffer (NCCL is called with sendbuff ==
recvbuff): torch has no out-of-place form of them, so they are measured in-place only.
all_gather and reduce_scatter run both ways; in-place, the smaller buffer is the rank's
slice of the larger one, at nccl-tests' offset (``rank * count``). all_to_all and sendrecv
run out-of-place. sendrecv posts its send and receive together (``batch_isend_irecv``,
one NCCL group, as nccl-tests' ncclGroupStart/End): a plain isend then irecv puts both of
two ranks' sends ahead of their receives on the pair's one stream and can deadlock on NCCL.

Checking. Inputs are small integers chosen so that every partial sum over the ranks is an
integer the dtype holds exactly (at most 2**24 in fp32, 2**11 in fp16, 2**8 in bf16), in
any order of reduction; the expected result is computed on the CPU in float64, chunk by
chunk, and compared exactly after casting to the dtype.

Run alone as any job: ``torchrun ... -m trainperf.launch.worker DOC.json OUT.json`` with a document
of kind ``collective``; rank 0 writes OUT.json (``format_table`` prints its rows). With
``under_load`` (``{"gemm_n", "repeats"}``, ops all_reduce only) the sweep is
trainperf.micro.contention's instead: all_reduce beside a GEMM, each against itself alone.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainperf.micro.collective_ops import (  # noqa: F401 - re-exported: this module's API
    CHECK_CHUNK,
    COLLECTIVES,
    DEVICES,
    DTYPES,
    EXACT_INTEGERS,
    GB,
    NCCL_TYPE_NAMES,
    OPS,
    SENTINEL,
    Buffers,
    Collective,
    Layout,
    Participant,
    allocate,
    bandwidths,
    barrier,
    collective,
    fill,
    layout,
    sizes,
    value,
    value_sum,
    wrong_elements,
)
from trainperf.micro.harness import (
    dtype_of,
    parse_bytes,  # noqa: F401 - part of this module's API
    synchronize,
    time_op,
)
from trainperf.parallel.group import RankGroup, default_threads

# ---------------------------------------------------------------- the sweep document


@dataclass(frozen=True)
class Sweep:
    """A collective sweep as the document gives it, checked field by field."""

    ops: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    factor: int
    dtype: str
    warmup: int
    iters: int
    device: str
    timeout_s: float | None = None
    # ``{"gemm_n": N, "repeats": R}``: all_reduce measured beside a GEMM (trainperf.micro.
    # contention); None: the plain sweep.
    under_load: dict[str, int] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.ops, str) or not isinstance(self.ops, Sequence):
            raise ValueError(f"field 'ops' is {self.ops!r}: a list of collectives")
        object.__setattr__(self, "ops", tuple(self.ops))
        for name in ("min_bytes", "max_bytes", "factor", "warmup", "iters"):
            number = getattr(self, name)
            if not isinstance(number, int) or isinstance(number, bool):
                raise ValueError(f"field '{name}' is {number!r}: a whole number")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"field 'timeout_s' is {self.timeout_s!r}: seconds above 0, or null")
        if not self.ops:
            raise ValueError(f"field 'ops' is empty: allowed {', '.join(COLLECTIVES)}")
        for name in self.ops:
            if name not in COLLECTIVES:
                raise ValueError(f"field 'ops' has '{name}': allowed {', '.join(COLLECTIVES)}")
        for name, allowed in (("dtype", DTYPES), ("device", DEVICES)):
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"field '{name}' is '{getattr(self, name)}': allowed {', '.join(allowed)}"
                )
        for name, least in (("warmup", 0), ("iters", 1)):
            if getattr(self, name) < least:
                raise ValueError(f"field '{name}' is {getattr(self, name)}: at least {least}")
        sizes(self.min_bytes, self.max_bytes, self.factor)
        if self.under_load is not None:
            from trainperf.micro.contention import UnderLoad

            UnderLoad.from_document(self.under_load, self.ops)

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> Sweep:
        """The sweep of a ``{"kind": "collective", ...}`` document; ValueError names the field."""
        fields = dict(document)
        kind = fields.pop("kind", "collective")
        if kind != "collective":
            raise ValueError(f"field 'kind' is '{kind}': allowed collective")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(fields) - set(known))
        if unknown:
            raise ValueError(f"unknown fields {', '.join(unknown)}: allowed {', '.join(known)}")
        optional = ("timeout_s", "under_load")
        missing = [name for name in known if name not in fields and name not in optional]
        if missing:
            raise ValueError(f"missing fields {', '.join(missing)}")
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        fields = dataclasses.asdict(self)
        if self.under_load is None:  # the plain sweep's document, as before under_load
            del fields["under_load"]
        return {"kind": "collective", **fields, "ops": list(self.ops)}


# ---------------------------------------------------------------- measuring


def measure(
    op: Collective, lay: Layout, in_place: bool, peers: Participant, warmup: int, iters: int
) -> tuple[float, int]:
    """(seconds per iteration, wrong elements) on this rank, as nccl-tests' BenchTime."""
    buffers = allocate(lay, peers, in_place)
    fill(op, buffers, lay, peers)

    def once() -> None:
        op.run(buffers, peers)

    for _ in range(warmup):
        once()
    synchronize(peers.device)
    barrier(peers)

    def window() -> None:
        for _ in range(iters):
            once()

    time_s = time_op(window, peers.device, warmup=0, iters=1).times_s[0] / iters

    fill(op, buffers, lay, peers)
    once()
    synchronize(peers.device)
    return time_s, wrong_elements(op, buffers, lay, peers)


def sweep(spec: Sweep, peers: Participant) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """This rank's rows (``time_s``, ``wrong``) of every op and size, and the ops skipped."""
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    elsize = torch.empty((), dtype=peers.dtype).element_size()
    for name in spec.ops:
        op = COLLECTIVES[name]
        if peers.n < op.min_ranks:
            skipped[name] = (
                f"{name} needs at least {op.min_ranks} ranks (each sends to the next); "
                f"this job has {peers.n}"
            )
            continue
        for size in sizes(spec.min_bytes, spec.max_bytes, spec.factor):
            lay = layout(name, size, elsize, peers.n)
            if lay is None:
                continue
            for in_place in op.in_place:
                time_s, wrong = measure(op, lay, in_place, peers, spec.warmup, spec.iters)
                row = {"op": name, "size_bytes": lay.size_bytes, "count": lay.count}
                row |= {"dtype": spec.dtype, "in_place": in_place}
                row |= {"redop": op.redop} if op.redop else {}
                row |= {"root": op.root} if op.root is not None else {}
                rows.append(row | {"time_s": time_s, "wrong": wrong})
    return rows, skipped


def combine(per_rank: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows of every rank into one: time averaged over ranks, wrong elements summed."""
    n = len(per_rank)
    combined = []
    for same in zip(*per_rank, strict=True):
        row = {k: v for k, v in same[0].items() if k not in ("time_s", "wrong")}
        time_s = statistics.fmean(r["time_s"] for r in same)
        algbw, busbw = bandwidths(row["op"], row["size_bytes"], time_s, n)
        row |= {"time_us": time_s * 1e6, "algbw_gbps": algbw, "busbw_gbps": busbw}
        combined.append(row | {"wrong": sum(r["wrong"] for r in same)})
    return combined


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean busbw of every op over all its rows (nccl-tests' "Avg bus bandwidth")."""
    by_op: dict[str, list[float]] = {}
    for row in rows:
        by_op.setdefault(row["op"], []).append(row["busbw_gbps"])
    return {op: statistics.fmean(values) for op, values in by_op.items()}


def run_document(document: dict[str, Any], workdir: Path) -> dict[str, Any] | None:
    """The micro-benchmark kinds' entry point (see trainperf.micro): run the sweep
    ``document`` describes on this rank of a torchrun job.

    Returns ``{"device", "metrics"}`` on rank 0 and None elsewhere. ``workdir`` is the
    job's folder; nothing is written there.
    """
    spec = Sweep.from_document(document)
    with RankGroup(spec.device, spec.timeout_s) as job:
        if spec.device == "cpu":
            torch.set_num_threads(default_threads(job.ranks.local_world_size))
        peers = Participant(job.ranks.rank, job.ranks.world_size, job.device, dtype_of(spec.dtype))
        if spec.under_load is not None:
            from trainperf.micro import contention

            load = contention.UnderLoad.from_document(spec.under_load, spec.ops)
            points = sizes(spec.min_bytes, spec.max_bytes, spec.factor)
            rows = contention.sweep(load, peers, points, spec.warmup, spec.iters)
            skipped = {}
        else:
            rows, skipped = sweep(spec, peers)
        gathered = job.gather(rows)
        if gathered is None:
            return None
        from trainperf.step.benchmark import device_info

        if spec.under_load is not None:
            combined = contention.combine(gathered)
        else:
            combined = combine(gathered)
        device = device_info(job.device) | {
            "backend": job.backend,
            "world_size": job.ranks.world_size,
            "local_world_size": job.ranks.local_world_size,
            "torch": torch.__version__,
        }
        if spec.device == "cuda":
            version = torch.cuda.nccl.version()
            device["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else version
        metrics = {
            "rows": combined,
            "avg_busbw_gbps": summary(combined),
            "wrong_total": sum(r["wrong"] for r in combined),
            "skipped": skipped,
            "world_size": job.ranks.world_size,
        }
        if spec.under_load is not None:
            metrics["under_load"] = contention.summary(combined, load, spec.dtype)
        return {"device": device, "metrics": metrics}


# ---------------------------------------------------------------- nccl-tests' table


def _time_text(time_us: float) -> str:
    if time_us >= 10000:
        return f"{time_us:7.0f}"
    return f"{time_us:7.1f}" if time_us >= 100 else f"{time_us:7.2f}"


def format_table(
    rows: Sequence[dict[str, Any]],
    world_size: int,
    backend: str,
    skipped: dict[str, str] | None = None,
) -> str:
    """The rows laid out as nccl-tests prints them: one block per op, one line per size,
    out-of-place then in-place columns ("--" where torch has no such form)."""
    lines = [f"# world_size {world_size}  backend {backend}"]
    # nccl-tests' printf formats, so that the columns line up as in its output.
    left, right = "# {:>10s}  {:>12s}  {:>8s}  {:>6s}  {:>6s}", "  {:>7s}  {:>6s}  {:>6s} {:>6s}"
    header = [
        left.format("", "", "", "", "") + "           out-of-place" + " " * 23 + "in-place",
        left.format("size", "count", "type", "redop", "root")
        + 2 * right.format("time", "algbw", "busbw", "#wrong"),
        left.format("(B)", "(elements)", "", "", "")
        + 2 * right.format("(us)", "(GB/s)", "(GB/s)", ""),
    ]
    averages = summary(rows)
    for op in averages:
        lines += ["#", f"# {op}", *header]
        lines += [_table_line(same) for same in _by_size(r for r in rows if r["op"] == op)]
        lines.append(f"# Avg bus bandwidth    : {averages[op]:g}")
    for op, reason in (skipped or {}).items():
        lines += ["#", f"# {op} skipped: {reason}"]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _by_size(rows: Any) -> list[list[dict[str, Any]]]:
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["size_bytes"], row["count"]), []).append(row)
    return list(groups.values())


def _table_line(same: list[dict[str, Any]]) -> str:
    first = same[0]
    root = first.get("root")
    line = (
        f"{first['size_bytes']:12d}  {first['count']:12d}  "
        f"{NCCL_TYPE_NAMES.get(first['dtype'], first['dtype']):>8s}  "
        f"{first.get('redop') or 'none':>6s}  {-1 if root is None else root:6d}"
    )
    for in_place in (False, True):
        row = next((r for r in same if r["in_place"] == in_place), None)
        if row is None:
            line += f"  {'--':>7s}  {'--':>6s}  {'--':>6s}  {'--':>5s}"
        else:
            line += (
                f"  {_time_text(row['time_us'])}  {row['algbw_gbps']:6.2f}"
                f"  {row['busbw_gbps']:6.2f}  {row['wrong']:5d}"
            )
    return line
