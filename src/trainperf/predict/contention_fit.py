"""How much communication and compute slow each other on this machine, from ``trainperf
micro collective --under-load`` (the calibration's (g), ``trainperf.predict.calibrate``):
the slowdowns a prediction prices the overlap and the ranks sharing a host with
(``trainperf.predict.terms.Contention``), each DDP bucket at its own size.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainperf.models.spec import ModelSpec
from trainperf.predict.memory import ACTIVATION_BYTES
from trainperf.predict.roofline import op_profile, roofline_seconds_per_sample
from trainperf.predict.terms import Contention

UNDER_LOAD_SLOWDOWNS = (
    "busbw_slowdown",
    "gemm_slowdown",
    "neighbour_slowdown",
    "memory_slowdown",
    "memory_neighbour_slowdown",
)


@dataclass(frozen=True)
class MeasuredContention:
    """The contention one under-load run measured, what the calibration says of its source,
    and the streaming rate with every rank streaming (None where the run has none)."""

    contention: Contention
    source: dict[str, Any]
    memory_bytes_per_s: float | None


def measured_contention(
    loaded: list[dict[str, Any]],
    spec: ModelSpec,
    batch: int,
    size: int | None,
    precision: str | None,
) -> MeasuredContention | None:
    """The contention of the newest run of ``loaded`` (``micro collective --under-load``
    runs of the system, oldest first) that measured it, or None: how much the all-reduce and
    the compute slow each other, and how much the ranks' compute slows beside the other
    ranks' (their median slowdowns over the sizes; one below 1, which is noise, counts as 1:
    running both never speeds one up).

    The compute's slowdowns are measured twice, on a GEMM (compute-bound) and on STREAM add
    (memory-bound); the model's step takes them in the proportion of its time in each kind
    of op: s = (1 − m)·s_GEMM + m·s_STREAM, m the roofline's memory-bound share of the
    model's step (``trainperf.predict.roofline``) at the GEMM TFLOP/s and STREAM GB/s the same
    run measured on one rank alone. A run without the memory-bound kernel (or without its
    rates) gives the GEMM's slowdowns alone.

    Both slowdowns are also kept per message size (``Contention.by_bytes``, the same blend
    on each size's row), so that each DDP bucket is priced at its own size: the median over
    the sizes stands for none of them where the slowdown grows with the message."""
    usable = [
        r
        for r in loaded
        if r["metrics"]["under_load"].get("gemm_slowdown") is not None
        and r["metrics"]["under_load"].get("busbw_slowdown") is not None
    ]
    if not usable:
        return None
    newest = usable[-1]
    load = newest["metrics"]["under_load"]
    share = _memory_bound_share(load, spec, batch, size, precision)

    def blended(measured: dict[str, Any], compute_bound: str, memory_bound: str) -> float | None:
        """The slowdown of the step's compute in ``measured`` (the summary, or a row)."""
        gemm, stream = measured.get(compute_bound), measured.get(memory_bound)
        if gemm is None:
            return None
        if share is None or stream is None:
            return max(1.0, float(gemm))
        return max(1.0, (1 - share) * float(gemm) + share * float(stream))

    neighbour = blended(load, "neighbour_slowdown", "memory_neighbour_slowdown")
    how = "" if share is None else f", GEMM and STREAM weighed by memory-bound share {share:.2f}"
    contention = Contention(
        blended(load, "gemm_slowdown", "memory_slowdown"),
        max(1.0, float(load["busbw_slowdown"])),
        f"measured by micro collective --under-load, run {newest['id']}{how}",
        1.0 if neighbour is None else neighbour,  # absent from runs before it was measured
        by_bytes=_slowdowns_by_size(newest["metrics"].get("rows") or [], blended),
    )
    source = {
        "micro_id": newest["id"],
        **{key: load.get(key) for key in UNDER_LOAD_SLOWDOWNS},
        "memory_bound_share": share,
        "stream_gbps": load.get("stream_gbps"),
        "by_bytes": [
            {"bytes": n_bytes, "compute_slowdown": compute, "comm_slowdown": comm}
            for n_bytes, compute, comm in contention.by_bytes
        ],
    }
    stream = load.get("stream_gbps")  # absent from runs before it was summarised
    return MeasuredContention(contention, source, float(stream) * 1e9 if stream else None)


def _slowdowns_by_size(
    rows: list[dict[str, Any]], blended: Callable[..., float | None]
) -> tuple[tuple[float, float, float], ...]:
    """``Contention.by_bytes`` from an under-load run's rows: per message size (the median
    where a size has several rows) the compute's slowdown, ``blended`` as the summary's,
    and the all-reduce's; a size without either is left out."""
    by_size: dict[float, list[tuple[float, float]]] = {}
    for row in rows:
        compute = blended(row, "gemm_slowdown", "memory_slowdown")
        comm = row.get("busbw_slowdown")
        if compute is not None and comm is not None and row.get("size_bytes"):
            by_size.setdefault(float(row["size_bytes"]), []).append((compute, max(1.0, comm)))
    return tuple(
        (
            size,
            statistics.median(c for c, _ in pairs),
            statistics.median(m for _, m in pairs),
        )
        for size, pairs in sorted(by_size.items())
    )


def _memory_bound_share(
    load: dict[str, Any], spec: ModelSpec, batch: int, size: int | None, precision: str | None
) -> float | None:
    """The roofline's memory-bound share of ``spec``'s step at ``batch`` on a device of the
    GEMM TFLOP/s and STREAM GB/s measured solo, or None without them."""
    tflops, gbps = load.get("gemm_tflops_solo"), load.get("stream_gbps_solo")
    if not tflops or not gbps:
        return None
    roofline = roofline_seconds_per_sample(
        op_profile(spec, size),
        tflops * 1e12,
        gbps * 1e9,
        activation_bytes=ACTIVATION_BYTES[precision or "fp32"],
        batch=batch,
    )
    return roofline.memory_bound_share
