"""Where a training step's time goes, by operator category, from torch.profiler.

Categories (``CATEGORIES``): convolution, matrix multiply (mm, addmm, bmm, linear, GEMM
kernels), normalization (batch, layer, group, instance and RMS norm), element-wise and
activation (ReLU, GELU, add, mul, dropout, softmax, the loss: every op that maps elements
one by one or nearly so; activations are element-wise ops and are counted here), pooling,
attention (scaled dot-product, flash and memory-efficient attention), communication
(collectives of NCCL, Gloo and c10d), optimizer (the ``Optimizer.step``/``zero_grad``
ranges, ``_foreach_`` and fused optimizer kernels), memory copies (copy_, to, clone,
contiguous, cat, memcpy/memset) and other (views, allocations, reductions, bookkeeping).

An op is filed by its own name, matched case-insensitively against ``CATEGORY_PATTERNS``,
an ordered table whose first matching row wins (see the table for why the order matters).
The autograd engine's events name the backward node (``ConvolutionBackward0``,
``autograd::engine::evaluate_function: AddmmBackward0``); they are filed as the forward
op the node differentiates (``aten::convolution``, ``aten::addmm``); their self time is
the engine's bookkeeping for that node, small beside the op's own. Since ops are filed by
name and not by caller, two things follow: ``nn.LocalResponseNorm`` has no ATen op of its
own (``F.local_response_norm`` is pow, constant_pad_nd, avg_pool3d, mul, add and div), so
it shows up as element-wise and pooling, not normalization; and an optimizer running a
per-parameter loop (torch's default on the CPU, ``foreach=False``) shows its mul_/add_ as
element-wise, while the ``_foreach_`` and fused kernels of the GPU default are optimizer.

Times are *self* (exclusive) times: an event's time less that of the events inside it.
``aten::conv2d`` contains ``aten::convolution``, which contains ``aten::mkldnn_convolution``;
adding their inclusive times would count the same convolution three times, while their
self times add up to the time of the whole, each part counted once, so the categories'
shares add up to 1. On a CPU the measure is self CPU time. On a GPU it is self device
time: the kernels an op launched itself (not through a child op), filed under that op's
name; kernels launched outside any op are filed by kernel name. The CPU time of the CUDA
runtime calls (launches, synchronizations, allocations, copies) is broken down apart.

The profiler adds overhead per op, so profiled times are above unprofiled ones, most of
all for small ops; the shares are the result, the milliseconds only a scale for them.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.autograd import DeviceType

from trainperf.profile.overlap import communication_overlap, is_step_marker

CATEGORIES = (
    "convolution",
    "matrix multiply",
    "normalization",
    "element-wise and activation",
    "pooling",
    "attention",
    "communication",
    "optimizer",
    "memory copies",
    "other",
)

# Checked in order, first match wins; a name matching no row is "other". Order matters
# where one category's names contain another's substrings: attention before matrix
# multiply (sdpa's names and kernels mention GEMMs), convolution before matrix multiply
# (cuDNN's "implicit_convolve_sgemm"), matrix multiply before element-wise ("addmm"
# contains "add"), optimizer before element-wise ("_foreach_add_", "zero_grad") and
# before memory copies ("_foreach_copy_"). The first row holds names that a later
# substring would misfile.
CATEGORY_PATTERNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "other",
        (
            "aten::expand",  # a view; "exp" is the exponential
            "aten::broadcast_",  # broadcast_tensors/broadcast_to: views, not the collective
            "aten::topk",  # a selection, not aten::to
            "upsample",  # upsample_bilinear2d interpolates; "linear" is not a GEMM
            "convert",  # _convert_indices..., _convert_weight...: not convolutions
            # Autograd's bookkeeping ("mul" in accumulate): the gradient sums it does are
            # aten::add_ events of their own.
            "accumulategrad",
            "padded",  # _pack_padded_sequence, to_padded_tensor: "add" in padded
        ),
    ),
    (
        "communication",
        (
            "nccl",
            "gloo",
            "c10d",
            "record_param_comms",
            "all_reduce",
            "allreduce",
            "all_gather",
            "allgather",
            "reduce_scatter",
            "all_to_all",
            "alltoall",
            "broadcast_coalesced",
        ),
    ),
    ("attention", ("attention", "sdpa", "flash", "scaled_dot_product", "fmha")),
    (
        "convolution",
        ("conv", "cudnn_convolution", "mkldnn_convolution", "convolution_backward", "slow_conv"),
    ),
    (
        "matrix multiply",
        (
            "aten::mm",
            "aten::mv",
            "aten::dot",
            "addmm",
            "addmv",
            "bmm",  # bmm, baddbmm
            "matmul",
            "linear",
            "einsum",
            "multi_dot",
            "gemm",
            "_scaled_mm",
            "_int_mm",
        ),
    ),
    (
        "normalization",
        ("batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm"),
    ),
    ("pooling", ("pool",)),
    (
        "optimizer",
        (
            "Optimizer.step",
            "Optimizer.zero_grad",
            "_foreach_",
            "multi_tensor_apply",  # the CUDA kernels of the _foreach_ ops
            "_fused_sgd",
            "_fused_adam",  # also _fused_adamw
        ),
    ),
    (
        "memory copies",
        (
            "aten::copy_",
            "aten::to",  # aten::to, to_copy (of ToCopyBackward0), to_dense, ...
            "aten::_to_copy",
            "aten::_copy_from",
            "aten::cat",
            "aten::stack",
            "memcpy",
            "memset",
            "aten::contiguous",  # not is_contiguous (a query)
            "clone",
        ),
    ),
    (
        "element-wise and activation",
        (
            "relu",
            "gelu",
            "silu",
            "elu",
            "sigmoid",
            "tanh",
            "softplus",
            "hardswish",
            "threshold",
            "clamp",
            "add",
            "mul",
            "div",
            "sub",
            "aten::neg",  # not resolve_neg, _neg_view (views)
            "abs",
            "dropout",
            "bernoulli",
            "softmax",
            "exp",
            "log",
            "pow",
            "sqrt",
            "where",
            "fill",
            "aten::zero_",  # not nonzero_static
            "loss",  # nll_loss, cross_entropy_loss, mse_loss, ...
            "cross_entropy",  # binary_cross_entropy
            "aten::sin",
            "aten::cos",
            "aten::erf",
            "aten::reciprocal",
            "aten::square",
            "aten::glu",
            "aten::lerp",
            "aten::maximum",
            "aten::minimum",
            "aten::mish",
            "elementwise",  # CUDA kernels: vectorized_elementwise_kernel, ...
        ),
    ),
)

_LOWERED = tuple((cat, tuple(p.lower() for p in pats)) for cat, pats in CATEGORY_PATTERNS)
_ENGINE_PREFIX = "autograd::engine::evaluate_function: "
_BACKWARD_NODE = re.compile(r"^([A-Z][A-Za-z0-9]*?)Backwards?\d*$")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
TOP_OPS = 10


def forward_op_of(node_name: str) -> str | None:
    """The ATen op an autograd node differentiates: 'NativeBatchNormBackward0' ->
    'aten::native_batch_norm', 'MaxPool2DWithIndicesBackward0' ->
    'aten::max_pool2d_with_indices'; None for a name that is not a backward node."""
    match = _BACKWARD_NODE.match(node_name.removeprefix(_ENGINE_PREFIX))
    if match is None:
        return None
    base = re.sub(r"(\d)D", r"\1d", match.group(1))  # MaxPool2D -> MaxPool2d
    return "aten::" + _CAMEL_BOUNDARY.sub("_", base).lower()


def categorize(op_name: str) -> str:
    """The category (one of ``CATEGORIES``) of an ATen op, kernel or profiler range name."""
    name = forward_op_of(op_name) or op_name.removeprefix(_ENGINE_PREFIX)
    lowered = name.lower()
    for category, patterns in _LOWERED:
        if any(pattern in lowered for pattern in patterns):
            return category
    return "other"


def aggregate(
    events: Iterable[tuple[str, float, int]], steps: int
) -> tuple[list[dict], list[dict]]:
    """Categories and top ops of ``(name, self_time_us, calls)`` events over ``steps`` steps.

    Events of the same name are merged. Returns one entry per category in ``CATEGORIES``
    order, ``{"category", "ms", "share"}``, and the ``TOP_OPS`` events of largest self
    time, ``{"name", "category", "ms", "calls", "share"}``; ``ms`` and ``calls`` are per
    step, ``share`` a fraction of the total over all events (all 0.0 if that is zero).
    """
    if steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    time_us: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for name, self_us, count in events:
        time_us[name] += self_us
        calls[name] += count
    total_us = sum(time_us.values())
    per_category = dict.fromkeys(CATEGORIES, 0.0)
    for name, self_us in time_us.items():
        per_category[categorize(name)] += self_us

    def share(us: float) -> float:
        return us / total_us if total_us > 0 else 0.0

    categories = [
        {"category": cat, "ms": us / 1e3 / steps, "share": share(us)}
        for cat, us in per_category.items()
    ]
    largest = sorted(time_us, key=lambda name: (-time_us[name], name))[:TOP_OPS]
    top_ops = [
        {
            "name": name,
            "category": categorize(name),
            "ms": time_us[name] / 1e3 / steps,
            "calls": calls[name] / steps,
            "share": share(time_us[name]),
        }
        for name in largest
    ]
    return categories, top_ops


# CUDA runtime and driver API calls by group; any other cuda*/cu[A-Z]* call is "other".
CUDA_API_GROUPS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "synchronize",
        frozenset(
            {
                "cudaDeviceSynchronize",
                "cudaStreamSynchronize",
                "cudaEventSynchronize",
                "cuCtxSynchronize",
                "cuStreamSynchronize",
                "cuEventSynchronize",
            }
        ),
    ),
    (
        "malloc/free",
        frozenset(
            {
                "cudaMalloc",
                "cudaFree",
                "cudaMallocAsync",
                "cudaFreeAsync",
                "cudaHostAlloc",
                "cudaMallocHost",
                "cudaFreeHost",
            }
        ),
    ),
    (
        "kernel launch",
        frozenset(
            {"cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"}
        ),
    ),
    ("memcpy", frozenset({"cudaMemcpy", "cudaMemcpyAsync", "cudaMemsetAsync"})),
)
CUDA_API_OTHER = "other"
# The host's own time in the collective calls (the c10d ops, ``c10d::allreduce_``, which
# enqueue NCCL's work on a GPU): beside the CUDA calls, what a multi-GPU step's host spends
# on communication. Their CUDA calls (event records, stream waits) are counted as CUDA.
NCCL_CALLS = "NCCL calls"
_COLLECTIVE_CALL_PREFIX = "c10d::"
_CUDA_API_NAME = re.compile(r"^(cuda|cu[A-Z])")
_API_VERSION_SUFFIX = re.compile(r"_v\d+$")  # CUPTI may name cudaLaunchKernel_v7000


def cuda_api_group(name: str) -> str | None:
    """The group of a CUDA runtime/driver API call or a collective call (``NCCL_CALLS``),
    or None for a name that is neither."""
    if name.startswith(_COLLECTIVE_CALL_PREFIX):
        return NCCL_CALLS
    if not _CUDA_API_NAME.match(name):
        return None
    bare = _API_VERSION_SUFFIX.sub("", name)
    for group, names in CUDA_API_GROUPS:
        if bare in names:
            return group
    return CUDA_API_OTHER


def cuda_api_breakdown(events: Iterable[tuple[str, float, int]], steps: int) -> list[dict]:
    """Host time of the CUDA API calls among ``(name, self_time_us, calls)`` events, by group.

    One ``{"group", "ms", "share", "calls"}`` per group (``ms`` and ``calls`` per step,
    ``share`` of all CUDA API time), in ``CUDA_API_GROUPS`` order, then ``NCCL_CALLS`` and
    "other"; events that are neither CUDA API nor collective calls are left out.
    """
    if steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    groups = [group for group, _ in CUDA_API_GROUPS] + [NCCL_CALLS, CUDA_API_OTHER]
    time_us = dict.fromkeys(groups, 0.0)
    calls = dict.fromkeys(groups, 0)
    for name, self_us, count in events:
        group = cuda_api_group(name)
        if group is not None:
            time_us[group] += self_us
            calls[group] += count
    total_us = sum(time_us.values())
    return [
        {
            "group": group,
            "ms": time_us[group] / 1e3 / steps,
            "share": time_us[group] / total_us if total_us > 0 else 0.0,
            "calls": calls[group] / steps,
        }
        for group in groups
    ]


def _is_host(event: Any) -> bool:
    return event.device_type == DeviceType.CPU and not event.is_async


def host_entries(events: Iterable[Any]) -> list[tuple[str, float, int]]:
    """``(name, self CPU us, 1)`` of each host event of a profile (FunctionEvents)."""
    return [
        (e.key, e.self_cpu_time_total, 1)
        for e in events
        if _is_host(e) and not is_step_marker(e.key)
    ]


def async_communication_entries(events: Iterable[Any]) -> list[tuple[str, float, int]]:
    """``(name, duration us, 1)`` of the collectives a CPU backend ran on its own threads:
    gloo's ``gloo:all_reduce`` ranges are asynchronous host events, from the call to its
    completion (waiting for the other ranks included), with no self CPU time of their own;
    their durations are gloo's time, as the NCCL kernels' durations are on a GPU."""
    return [
        (e.key, e.time_range.end - e.time_range.start, 1)
        for e in events
        if e.device_type == DeviceType.CPU and e.is_async and categorize(e.key) == "communication"
    ]


def device_entries(
    events: Iterable[Any],
) -> tuple[list[tuple[str, float, int]], list[tuple[str, float, int]]]:
    """Self device time of a profile's FunctionEvents, each kernel counted once.

    Returns the entries for the categories: each host op with the kernels it launched
    itself (``self_device_time_total``), plus kernels no op launched under their own
    names; and the entries of every kernel (memcpy and memset included) by kernel name.
    """
    ops: list[tuple[str, float, int]] = []
    kernels: list[tuple[str, float, int]] = []
    launched_us: dict[str, float] = defaultdict(float)
    launched_calls: dict[str, int] = defaultdict(int)
    for event in events:
        if _is_host(event):
            if is_step_marker(event.key):
                continue  # a kernel it launched itself is filed by name below
            if event.self_device_time_total > 0:
                ops.append((event.key, event.self_device_time_total, 1))
            for kernel in event.kernels:
                launched_us[kernel.name] += kernel.duration
                launched_calls[kernel.name] += 1
        elif not event.is_async and not getattr(event, "is_user_annotation", False):
            # (A user annotation on the device's row, ProfilerStep#N or nccl:all_reduce, is a
            # range drawn over kernels, not one: counting it would count them twice.)
            kernels.append((event.key, event.self_device_time_total, 1))
    kernel_us: dict[str, float] = defaultdict(float)
    kernel_calls: dict[str, int] = defaultdict(int)
    for name, us, count in kernels:
        kernel_us[name] += us
        kernel_calls[name] += count
    # A kernel whose launch no op enclosed is attached to no host event: file it by name.
    # (Durations are whole nanoseconds in microseconds: the tolerance absorbs rounding.)
    unlaunched = [
        (name, us - launched_us[name], kernel_calls[name] - launched_calls[name])
        for name, us in kernel_us.items()
        if us - launched_us[name] > 1e-3
    ]
    return ops + unlaunched, kernels


def summarize(events: Iterable[Any], on_cuda: bool, steps: int, elapsed_s: float) -> dict:
    """The result of ``profile_categories`` from a profile's events (``prof.events()``)."""
    events = list(events)
    host = host_entries(events)
    if on_cuda:
        entries, kernels = device_entries(events)
        source = "torch.profiler self device time"
    else:
        entries, kernels = host + async_communication_entries(events), []
        source = "torch.profiler self CPU time"
    categories, top_ops = aggregate(entries, steps)
    profiled_step_ms = elapsed_s * 1e3 / steps
    overlap = communication_overlap(
        events, on_cuda, steps, lambda name: categorize(name) == "communication"
    )
    return {
        "source": source,
        "steps": steps,
        "profiled_step_ms": profiled_step_ms,
        **overlap,
        "comm_exposed_share": overlap["comm_exposed_ms"] / profiled_step_ms,
        "total_ms": sum(entry["ms"] for entry in categories),
        "categories": categories,
        "top_ops": top_ops,
        "top_kernels": aggregate(kernels, steps)[1] if on_cuda else None,
        "cuda_api": cuda_api_breakdown(host, steps) if on_cuda else None,
        "cuda_api_absent_reason": None if on_cuda else "no CUDA device: the CUDA API is not used",
    }


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_categories(
    step: Callable[[], object], device: torch.device, steps: int = 3, warmup: int = 1
) -> dict:
    """Profile ``steps`` calls of ``step`` after ``warmup`` others; time by category.

    The last warm-up call (there is always one) runs under the profiler's own warm-up
    phase (``torch.profiler.schedule``): CUPTI and the profiler's buffers start there and
    its events are dropped, so the first profiled step carries no profiler start-up.

    Returns ``source`` (the measure), ``steps``, ``profiled_step_ms`` (wall time per
    profiled step, device synchronized at both edges), ``total_ms`` (self time per step
    over all ops: below ``profiled_step_ms`` by the Python time between ops on a CPU, by
    device idle time on a GPU), ``categories`` and ``top_ops`` (see ``aggregate``), and on
    CUDA ``top_kernels`` and ``cuda_api`` (see ``cuda_api_breakdown``). A kernel's category
    in ``top_kernels`` comes from its name and is a guess (cuDNN names convolution kernels
    "...implicit_gemm..."); the ``categories`` come from the names of the launching ops.
    On a CPU those two are None and ``cuda_api_absent_reason`` says why.
    """
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device type '{device.type}' is not supported: allowed cpu, cuda")
    if steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if warmup < 0:
        raise ValueError(f"warmup must be an integer of 0 or more, got {warmup!r}")
    from torch.profiler import ProfilerActivity, profile, schedule

    on_cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    for _ in range(warmup - 1):
        step()
    # One warm-up step, then one recorded "step" of the profiler holding all ``steps``.
    plan = schedule(wait=0, warmup=1, active=1, repeat=1)
    with profile(activities=activities, record_shapes=False, schedule=plan) as prof:
        step()
        _synchronize(device)
        prof.step()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        _synchronize(device)
        elapsed_s = time.perf_counter() - start
    return summarize(prof.events(), on_cuda, steps, elapsed_s)
