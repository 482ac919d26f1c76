"""Matrix multiply throughput with DeepBench's definition: TFLOP/s = 2·M·N·K / time.

C (M×N) = op(A) · op(B) with op(A) M×K and op(B) K×N; a transposed operand ("T" in
DeepBench's AT/BT columns) is stored transposed and passed as a transposed view, so the
BLAS library gets the transpose flag rather than a copy. Shapes: the 160 DeepBench
training GEMMs, and a square sweep (M = N = K doubling). Between timed calls a buffer
larger than the caches is overwritten, so operands come from memory, not from a warm
cache (``--no-flush`` turns this off). The best TFLOP/s over a full sweep is the device's
maximum achievable matmul rate for that dtype (``max_achievable``): stored, and used beside
the training peak. A partial sweep (``partial_reason``: ``--limit`` cut the shapes, or
``--shapes deepbench`` left out the square sweep, whose large sizes are where a device
reaches its highest rate) stores its best as ``best_of_run`` and ``max_achievable`` as
null with the reason: the best of a few small shapes is not what the machine can do.

Dtypes: fp32 (IEEE: TF32 switched off), tf32 (CUDA compute capability 8.0+), fp16, bf16,
fp8 (e4m3 inputs, scales of 1, bf16 output through ``torch._scaled_mm``, compute capability
8.9+, dimensions multiples of 16). A dtype the device lacks gives rows with status
``skipped`` and the reason.

fp8 accumulation: every fp8 shape is measured twice, rows labelled ``fast_accum``: false
(``use_fast_accum=False``: cuBLASLt periodically promotes the intermediate sums to a higher
precision) and true (``use_fast_accum=True``, cuBLASLt's CUBLASLT_MATMUL_DESC_FAST_ACCUM: no
such promotion, faster on Ada and Hopper and less accurate). float8 training runs both:
torchao's Float8LinearConfig (its default, tensorwise recipe) takes fast accumulation for
the forward GEMM (``gemm_config_output``) and promoted accumulation for the two backward
ones (``gemm_config_grad_input``, ``gemm_config_grad_weight``). ``max_achievable`` keeps
the best row of each dtype; for fp8 it says which accumulation reached it.

fp8 layouts: ``torch._scaled_mm`` (cuBLASLt's fp8 kernels) takes A row-major and B
column-major only, which here is "NT" (A as stored, B stored transposed). A DeepBench shape
in any other layout is ``skipped`` in fp8 with that reason, as is one whose M, N or K is
not a multiple of 16: a copy into the taken layout would time something else. The square
sweep names no layout (``native``): each dtype runs it in the layout its kernels take
(NN, fp8 NT), so the fp8 maximum is measured too.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from trainperf.micro.harness import CacheFlusher, dtype_of, measured_on, time_op
from trainperf.step.training_step import set_fp32_math

CPU_SQUARE_SIZES = (128, 256, 512, 1024)
GPU_SQUARE_SIZES = (256, 512, 1024, 2048, 4096, 8192, 16384)
FP8_MIN_CAPABILITY = (8, 9)
# torch._scaled_mm's use_fast_accum, both measured: promoted (backward GEMMs), fast (forward).
FP8_FAST_ACCUM = (False, True)
TF32_MIN_CAPABILITY = (8, 0)


@dataclass(frozen=True)
class GemmShape:
    M: int
    N: int
    K: int
    a_transposed: bool = False
    b_transposed: bool = False
    # A square-sweep shape: no layout of its own, each dtype takes its kernels' layout.
    native: bool = False

    @property
    def flops(self) -> int:
        """2·M·N·K: one multiply and one add per term of every dot product."""
        return 2 * self.M * self.N * self.K

    def label(self) -> str:
        flags = ("T" if self.a_transposed else "N") + ("T" if self.b_transposed else "N")
        return f"M{self.M} N{self.N} K{self.K} {flags}"


def deepbench_shapes() -> list[GemmShape]:
    """The 160 training GEMMs of DeepBench (M, N, K, AT, BT)."""
    path = resources.files("trainperf") / "micro" / "data" / "deepbench_gemm_train.csv"
    with path.open() as f:
        return [
            GemmShape(int(r["M"]), int(r["N"]), int(r["K"]), r["AT"] == "T", r["BT"] == "T")
            for r in csv.DictReader(f)
        ]


def square_shapes(device_type: str) -> list[GemmShape]:
    sizes = GPU_SQUARE_SIZES if device_type == "cuda" else CPU_SQUARE_SIZES
    return [GemmShape(n, n, n, native=True) for n in sizes]


# The one layout torch._scaled_mm takes: A row-major (as stored), B column-major.
FP8_LAYOUT = {"a_transposed": False, "b_transposed": True}


def in_layout_of(shape: GemmShape, dtype_name: str) -> GemmShape:
    """``shape`` as ``dtype_name`` runs it: a ``native`` shape takes fp8's layout in fp8."""
    return replace(shape, **FP8_LAYOUT) if shape.native and dtype_name == "fp8" else shape


def shape_unsupported(shape: GemmShape, dtype_name: str) -> str | None:
    """Why ``dtype_name`` cannot take ``shape`` as given (fp8 only), or None."""
    if dtype_name != "fp8":
        return None
    if (shape.a_transposed, shape.b_transposed) != tuple(FP8_LAYOUT.values()):
        return (
            "fp8 matmul (torch._scaled_mm) takes A row-major and B column-major only "
            f"(layout NT); this shape is {shape.label().split()[-1]}"
        )
    if any(d % 16 for d in (shape.M, shape.N, shape.K)):
        return "fp8 matmul (torch._scaled_mm) needs M, N and K multiples of 16"
    return None


def unsupported(device: torch.device, dtype_name: str) -> str | None:
    """Why ``dtype_name`` cannot run on ``device``, or None."""
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    if dtype_name == "tf32" and (capability is None or capability < TF32_MIN_CAPABILITY):
        return "tf32 is a tensor-core mode of CUDA GPUs of compute capability 8.0 and newer"
    if dtype_name == "fp8" and (capability is None or capability < FP8_MIN_CAPABILITY):
        return "fp8 matmul needs a CUDA GPU of compute capability 8.9 or newer"
    return None


def _operands(shape: GemmShape, dtype: torch.dtype, device: torch.device):
    def make(rows: int, cols: int, transposed: bool) -> torch.Tensor:
        stored = (cols, rows) if transposed else (rows, cols)
        tensor = torch.randn(stored, device=device).to(dtype)
        return tensor.t() if transposed else tensor

    return make(shape.M, shape.K, shape.a_transposed), make(shape.K, shape.N, shape.b_transposed)


def _fp8_op(shape: GemmShape, device: torch.device, fast_accum: bool):
    # The shape's own layout (shape_unsupported let only fp8's through): B column-major.
    a, b = _operands(shape, torch.float8_e4m3fn, device)
    one = torch.ones((), dtype=torch.float32, device=a.device)  # per-tensor scales
    return lambda: torch._scaled_mm(
        a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast_accum
    )


def accumulations(dtype_name: str) -> tuple[bool | None, ...]:
    """The ``fast_accum`` settings ``dtype_name`` is measured with (None: not a choice)."""
    return FP8_FAST_ACCUM if dtype_name == "fp8" else (None,)


def run_gemm(
    shape: GemmShape,
    device: torch.device,
    dtype_name: str,
    *,
    warmup: int = 3,
    iters: int = 10,
    flusher: CacheFlusher | None = None,
    fast_accum: bool | None = None,
) -> dict[str, Any]:
    """One shape: times (µs) and TFLOP/s, mean, median and best. fp8 rows carry
    ``fast_accum`` (torch._scaled_mm's use_fast_accum; False when not given)."""
    shape = in_layout_of(shape, dtype_name)
    row: dict[str, Any] = {"shape": shape.label(), **asdict(shape), "dtype": dtype_name}
    if dtype_name == "fp8":
        fast_accum = bool(fast_accum)
        row["fast_accum"] = fast_accum
    row["flops"] = shape.flops
    reason = unsupported(device, dtype_name) or shape_unsupported(shape, dtype_name)
    if reason:
        return row | {"status": "skipped", "reason": reason}
    set_fp32_math(device, dtype_name)  # TF32 only for the tf32 rows (precision.fp32_math)
    try:
        if dtype_name == "fp8":
            op = _fp8_op(shape, device, fast_accum)
        else:
            a, b = _operands(shape, dtype_of(dtype_name), device)
            op = lambda: torch.matmul(a, b)  # noqa: E731 - the measured call
        timing = time_op(op, device, warmup=warmup, iters=iters, between=flusher)
    except torch.OutOfMemoryError as exc:
        return row | {"status": "oom", "reason": str(exc).splitlines()[0]}
    except (RuntimeError, ValueError) as exc:
        return row | {"status": "error", "reason": str(exc).splitlines()[0][:300]}
    tflops = timing.rates(shape.flops, 1e12)
    return row | {
        "status": "ok",
        "time_us_mean": timing.mean_s * 1e6,
        "time_us_median": timing.median_s * 1e6,
        "time_us_best": timing.best_s * 1e6,
        "tflops_mean": tflops["mean"],
        "tflops_median": tflops["median"],
        "tflops_best": tflops["best"],
    }


def run(
    shapes: list[GemmShape],
    device: torch.device,
    dtypes: list[str],
    *,
    warmup: int = 3,
    iters: int = 10,
    flush: bool = True,
) -> dict[str, Any]:
    """Every shape in every dtype (fp8 in both accumulations, side by side); the summary
    holds the best TFLOP/s per dtype."""
    flusher = CacheFlusher(device) if flush else None
    rows = [
        run_gemm(s, device, d, warmup=warmup, iters=iters, flusher=flusher, fast_accum=fast)
        for d in dtypes
        for s in shapes
        for fast in accumulations(d)
    ]
    return {"rows": rows, "max_achievable": max_achievable(rows), "flush": flush}


def document_shapes(document: dict[str, Any], device_type: str) -> list[GemmShape]:
    """The shapes a document asks for (``shapes``: deepbench, square or all; ``limit``)."""
    shapes = []
    if document["shapes"] in ("deepbench", "all"):
        shapes += deepbench_shapes()
    if document["shapes"] in ("square", "all"):
        shapes += square_shapes(device_type)
    return shapes[: document.get("limit") or None]


def partial_reason(document: dict[str, Any], device_type: str) -> str | None:
    """Why the best of the document's sweep is not the device's maximum achievable rate
    (module doc), or None for a full sweep: every shape of the square sweep, with or
    without DeepBench's."""
    if document["shapes"] == "deepbench":
        return (
            "a partial sweep: --shapes deepbench leaves out the square sweep, where a device "
            "reaches its highest rate"
        )
    every = len(document_shapes(document | {"limit": None}, device_type))
    measured = len(document_shapes(document, device_type))
    if measured < every:
        return f"a partial sweep: --limit {document['limit']} measured {measured} of {every} shapes"
    return None


def run_document(document: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The micro-benchmark kinds' entry point (see trainperf.micro): the document's sweep;
    a partial one keeps its best apart from the maximum achievable (module doc)."""
    device = torch.device(document["device"])
    metrics = run(
        document_shapes(document, device.type),
        device,
        document["dtypes"],
        warmup=document["warmup"],
        iters=document["iters"],
        flush=document["flush"],
    )
    if reason := partial_reason(document, device.type):
        metrics["best_of_run"] = metrics["max_achievable"]
        metrics["max_achievable"] = None
        metrics["max_achievable_absent_reason"] = reason
    return measured_on(device, metrics)


def max_achievable(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per dtype, the best TFLOP/s of any shape (the device's achievable matmul rate); for
    fp8 with the ``fast_accum`` of the row that reached it."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["status"] != "ok":
            continue
        current = best.get(row["dtype"])
        if current is None or row["tflops_best"] > current["tflops"]:
            entry = {"tflops": row["tflops_best"], "shape": row["shape"]}
            if "fast_accum" in row:
                entry["fast_accum"] = row["fast_accum"]
            best[row["dtype"]] = entry
    return best
