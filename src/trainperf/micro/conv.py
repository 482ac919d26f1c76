"""Convolution micro-benchmark: the three passes of a 2-D convolution layer, DeepBench style.

For each shape (NCHW input N x C x H x W, K filters of R x S, padding and stride per
axis) three operations are timed, each on tensors made once before timing:
- ``fwd``: the forward convolution, y = conv(x, w) (``torch.nn.functional.conv2d``);
- ``bwd_data``: the gradient of the input, dx from dy and w (``torch.nn.grad.conv2d_input``);
- ``bwd_filter``: the gradient of the filters, dw from x and dy (``torch.nn.grad.conv2d_weight``).

FLOPs of every pass, as DeepBench counts them (https://github.com/baidu-research/DeepBench,
``conv_bench``) and as cuDNN's benchmarks do::

    out_h = (H + 2 * pad_h - R) // stride_h + 1        (out_w likewise)
    flops = 2 * N * K * C * R * S * out_h * out_w

one multiply and one add per filter tap per output element. Backward-data and
backward-filter perform the same multiply-adds as the forward pass, so they share the
count. TFLOP/s = flops / seconds / 1e12.

The shapes are DeepBench's training set (``data/deepbench_conv_train.csv``) or the
distinct convolutions of a zoo model (``model_shapes``).
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.resources
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainperf import models
from trainperf.case.outcome import is_out_of_memory
from trainperf.micro.harness import CacheFlusher, Timing, dtype_of, measured_on, time_op

PASSES = ("fwd", "bwd_data", "bwd_filter")

# conv2d has no float8 kernels; tf32 is float32 storage, its math mode set by the caller.
DTYPES = ("fp32", "tf32", "fp16", "bf16")


@dataclass(frozen=True)
class ConvShape:
    """One convolution in DeepBench's terms: input N x C x H x W, K filters of R x S.

    ``S`` is the filter width and ``R`` its height (DeepBench's ``S_filter_w`` and
    ``R_filter_h``); padding and stride are given per axis.
    """

    W: int
    H: int
    C: int
    N: int
    K: int
    S: int
    R: int
    pad_w: int = 0
    pad_h: int = 0
    stride_w: int = 1
    stride_h: int = 1

    @property
    def out_h(self) -> int:
        return (self.H + 2 * self.pad_h - self.R) // self.stride_h + 1

    @property
    def out_w(self) -> int:
        return (self.W + 2 * self.pad_w - self.S) // self.stride_w + 1

    @property
    def flops(self) -> int:
        """FLOPs of one pass: 2 * N * K * C * R * S * out_h * out_w (DeepBench)."""
        return 2 * self.N * self.K * self.C * self.R * self.S * self.out_h * self.out_w

    def label(self) -> str:
        """A short name, e.g. "W700 H161 C1 N4 K32 5x20 s2" (filter R x S; pad when not 0)."""
        text = f"W{self.W} H{self.H} C{self.C} N{self.N} K{self.K} {self.R}x{self.S}"
        text += f" s{_per_axis(self.stride_h, self.stride_w)}"
        if self.pad_h or self.pad_w:
            text += f" p{_per_axis(self.pad_h, self.pad_w)}"
        return text

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def _per_axis(h: int, w: int) -> str:
    return str(h) if h == w else f"{h}x{w}"


def deepbench_shapes() -> list[ConvShape]:
    """The 94 convolutions of DeepBench's training set, in the file's order (repeats kept)."""
    path = importlib.resources.files("trainperf") / "micro" / "data" / "deepbench_conv_train.csv"
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    return [
        ConvShape(
            W=int(row["W"]),
            H=int(row["H"]),
            C=int(row["C"]),
            N=int(row["N"]),
            K=int(row["K"]),
            S=int(row["S_filter_w"]),
            R=int(row["R_filter_h"]),
            pad_w=int(row["pad_w"]),
            pad_h=int(row["pad_h"]),
            stride_w=int(row["stride_w"]),
            stride_h=int(row["stride_h"]),
        )
        for row in rows
    ]


def model_shapes(model_name: str, batch_size: int) -> list[ConvShape]:
    """The distinct ``nn.Conv2d`` layers of a zoo model at its natural size, first-seen order.

    Input heights and widths come from one forward pass on the meta device (no memory, no
    arithmetic). Grouped or depthwise convolutions (groups != 1) and dilated ones
    (dilation != 1) are skipped: the FLOP formula and the DeepBench passes cover dense,
    undilated convolutions only. Models without ``nn.Conv2d`` (the language models) give
    an empty list.
    """
    spec = models.get(model_name)
    size = spec.resolve_size(None)
    # Built under the meta device, the weights are never allocated nor initialised.
    with torch.device("meta"):
        model = spec.build()
    model = model.to("meta")
    inputs, _ = spec.task.example_batch(batch_size, size, "meta")

    shapes: list[ConvShape] = []

    def record(conv: nn.Conv2d, args: tuple[Any, ...]) -> None:
        if conv.groups != 1 or conv.dilation != (1, 1):
            return
        if not isinstance(conv.padding, tuple):
            raise ValueError(
                f"{model_name}: a Conv2d with padding='{conv.padding}' is not supported"
            )
        n, c, h, w = args[0].shape
        shape = ConvShape(
            W=w,
            H=h,
            C=c,
            N=n,
            K=conv.out_channels,
            S=conv.kernel_size[1],
            R=conv.kernel_size[0],
            pad_w=conv.padding[1],
            pad_h=conv.padding[0],
            stride_w=conv.stride[1],
            stride_h=conv.stride[0],
        )
        if shape not in shapes:
            shapes.append(shape)

    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    handles = [conv.register_forward_pre_hook(record) for conv in convs]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for handle in handles:
            handle.remove()
    return shapes


def _pass_ops(
    shape: ConvShape, device: torch.device, dtype: torch.dtype
) -> dict[str, Callable[[], object]]:
    stride = (shape.stride_h, shape.stride_w)
    padding = (shape.pad_h, shape.pad_w)
    x = torch.randn(shape.N, shape.C, shape.H, shape.W, device=device, dtype=dtype)
    w = torch.randn(shape.K, shape.C, shape.R, shape.S, device=device, dtype=dtype)
    dy = torch.randn(shape.N, shape.K, shape.out_h, shape.out_w, device=device, dtype=dtype)
    return {
        "fwd": lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=padding),
        "bwd_data": lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, stride, padding),
        "bwd_filter": lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, stride, padding),
    }


def _time_columns(name: str, timing: Timing, flops: int) -> dict[str, float]:
    tflops = timing.rates(flops, scale=1e12)
    return {
        f"{name}_time_us_mean": timing.mean_s * 1e6,
        f"{name}_time_us_median": timing.median_s * 1e6,
        f"{name}_time_us_best": timing.best_s * 1e6,
        f"{name}_tflops_mean": tflops["mean"],
        f"{name}_tflops_median": tflops["median"],
        f"{name}_tflops_best": tflops["best"],
    }


def _check_dtype(dtype_name: str) -> torch.dtype:
    if dtype_name not in DTYPES:
        raise ValueError(f"conv dtype '{dtype_name}' is not valid: allowed {', '.join(DTYPES)}")
    return dtype_of(dtype_name)


def _row_head(shape: ConvShape, dtype_name: str) -> dict[str, Any]:
    return {"shape": shape.label(), **shape.as_dict(), "flops": shape.flops, "dtype": dtype_name}


def run_conv(
    shape: ConvShape,
    device: torch.device,
    dtype_name: str,
    warmup: int,
    iters: int,
    flush: CacheFlusher | None,
) -> dict[str, Any]:
    """Time the forward, backward-data and backward-filter passes of one shape.

    The row holds the shape, its FLOPs, the dtype and, for each pass p of ``PASSES``,
    ``p_time_us_{mean,median,best}`` and ``p_tflops_{mean,median,best}``. ``flush`` runs
    between timed calls, outside the windows. For tf32 the caller sets the math mode.
    """
    dtype = _check_dtype(dtype_name)
    row = _row_head(shape, dtype_name) | {"status": "ok"}
    for name, op in _pass_ops(shape, device, dtype).items():
        timing = time_op(op, device, warmup=warmup, iters=iters, between=flush)
        row |= _time_columns(name, timing, shape.flops)
    return row


def run(
    shapes: list[ConvShape],
    device: torch.device,
    dtype_name: str,
    warmup: int = 2,
    iters: int = 5,
    flush: bool = True,
    cudnn_benchmark: bool = True,
) -> list[dict[str, Any]]:
    """One row per shape (see ``run_conv``); a shape that runs out of memory gives a row
    with ``status`` "oom" and the allocator's message as ``reason`` instead of times.

    ``cudnn_benchmark`` switches cuDNN autotuning on, as DeepBench's and cuDNN's own
    benchmarks pick the fastest algorithm: it tunes each shape and pass in its first
    call, a warm-up call when ``warmup`` is 1 or more (with 0 the tuning is timed).
    """
    _check_dtype(dtype_name)
    torch.backends.cudnn.benchmark = cudnn_benchmark and device.type == "cuda"
    flusher = CacheFlusher(device) if flush else None
    rows = []
    for shape in shapes:
        try:
            rows.append(run_conv(shape, device, dtype_name, warmup, iters, flusher))
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            reason = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            rows.append(_row_head(shape, dtype_name) | {"status": "oom", "reason": reason})
    return rows


def document_shapes(document: dict[str, Any]) -> list[ConvShape]:
    """The shapes a document asks for: a zoo model's (``model``, ``batch_size``) or
    DeepBench's, the first ``limit`` of them."""
    if document.get("model"):
        shapes = model_shapes(document["model"], document["batch_size"])
    else:
        shapes = deepbench_shapes()
    return shapes[: document.get("limit") or None]


def run_document(document: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The micro-benchmark kinds' entry point (see trainperf.micro): the document's sweep."""
    from trainperf.step.training_step import set_fp32_math

    device = torch.device(document["device"])
    rows: list[dict[str, Any]] = []
    # "dtypes" (a list, as gemm's); documents stored before it name one "dtype".
    for dtype_name in document.get("dtypes") or [document["dtype"]]:
        set_fp32_math(device, dtype_name)  # tf32 or IEEE float32 for cuDNN
        rows += run(
            document_shapes(document),
            device,
            dtype_name,
            warmup=document["warmup"],
            iters=document["iters"],
            flush=document["flush"],
            cudnn_benchmark=document.get("cudnn_benchmark", True),
        )
    return measured_on(device, {"rows": rows, "cudnn_benchmark": torch.backends.cudnn.benchmark})
