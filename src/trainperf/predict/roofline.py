"""Per-operation roofline of one training step, counted on the meta device.

The roofline model (Williams, Waterman & Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 2009) bounds a kernel's time by the
slower of its arithmetic and its DRAM traffic. Applied op by op to the aten ops of one
training step (forward + loss + backward):

    t_i = max(F_i / (P · c), Q_i · (a / e) / (W · m)),    t = Σ_i t_i / B

with F_i the op's FLOPs (``torch.utils.flop_counter``'s formulas: 2 per multiply-add, only
matrix multiplies, convolutions and attention count), Q_i its bytes moved when every tensor
operand is read or written exactly once (the roofline's minimal, "compulsory" traffic), P
the peak FLOP/s, W the DRAM bandwidth in bytes/s, c and m the achieved fractions of each,
a the bytes per activation element of the precision trained in, e those the profile was
counted in (4, fp32 on meta), and B the batch. Element-wise ops, normalization and pooling
have F_i = 0 and so cost Q_i / W: this is what makes ResNet-50 memory-bound in part, where
FLOPs / peak alone predicts it 2-2.7x too fast.

Weights move once per step whatever the batch, activations once per sample, so each op is
counted at two batches and fitted as x(B) = x_fixed + x_per_sample · B (exact for both FLOPs
and bytes: the shapes are linear in the batch). The optimizer step is not counted, as in
``trainperf.models.flops``. Each op is marked as the forward's (with the loss) or the
backward's, so that the forward's share of the step's time comes from the ops priced, not
from the FLOP rule forward : backward = 1 : 2 (``RooflineTime.forward_share``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from trainperf.models.spec import ModelSpec, overflow_is_a_size_error

# Batches the step is counted at; the second fits the batch-independent part (weights).
COUNT_BATCHES = (2, 4)

# Lavin & Gray, "Fast algorithms for convolutional neural networks", CVPR 2016: Winograd
# F(2×2, 3×3) computes a 2×2 output tile of a 3×3 convolution with (2+3−1)² = 16 multiplies
# where the direct method needs 2·2·3·3 = 36, a 36/16 = 2.25x reduction. cuDNN also has
# F(4×4, 3×3) (4x in theory), whose transforms cost more; 2.25 is the conservative gain.
WINOGRAD_SPEEDUP = 2.25

_aten = torch.ops.aten
_CONVOLUTIONS = {
    _aten.convolution,
    _aten._convolution,
    _aten.convolution_backward,
    _aten.cudnn_convolution,
    _aten.convolution_overrideable,
    _aten._slow_conv2d_forward,
}
# Ops that move no data although their schema has no alias annotation: ``_unsafe_view`` is
# a view that autograd does not track (native_functions.yaml), and the ``empty`` family
# allocates memory without initializing it. Views proper are found from the schema.
_NO_DATA = {
    _aten._unsafe_view,
    _aten.empty,
    _aten.empty_like,
    _aten.empty_strided,
    _aten.new_empty,
    _aten.new_empty_strided,
}
# Ops whose ``self`` is not read: the ``*_like`` factories take only its shape, the in-place
# fills and samplers overwrite it. Only their outputs (and other inputs) count.
_SELF_NOT_READ = {
    _aten.zeros_like,
    _aten.ones_like,
    _aten.full_like,
    _aten.rand_like,
    _aten.randn_like,
    _aten.fill_,
    _aten.zero_,
    _aten.bernoulli_,
    _aten.uniform_,
    _aten.normal_,
}

Batch = tuple[Any, Any]

# What kind of kernel an aten op runs, for the rate its FLOPs go at (``op_class``): the
# fused attention kernels (flash, memory-efficient, cuDNN; forward and backward) reach a
# lower fraction of peak than a GEMM (FlashAttention-2 50-73% of an A100's peak, 35% of an
# H100's: Dao 2023, Shah et al. 2024), matrix multiplies their own, convolutions theirs.
OP_CLASSES = ("gemm", "attention", "conv", "other")
_GEMMS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "_addmm_activation"}


def op_class(op: str) -> str:
    """``op`` ("aten.mm.default") as one of ``OP_CLASSES``."""
    name = op.split(".")[1] if op.count(".") >= 1 else op
    if "attention" in name:
        return "attention"
    if name in _GEMMS:
        return "gemm"
    if "convolution" in name or name.startswith("_slow_conv") or name.startswith("cudnn_conv"):
        return "conv"
    return "other"


def _causal_kernel(func: Any, bound: dict[str, Any]) -> bool:
    """A fused attention kernel called with ``is_causal``: it skips the score blocks above
    the diagonal (FlashAttention-2, Dao 2023, §3.1: "we can skip the computation of about
    half of the blocks"), so it does half the FLOPs of the formula, which counts the whole
    square. The math path materialises the whole square and is counted as it is."""
    return "attention" in func._overloadpacket.__name__ and bound.get("is_causal") is True


@dataclass(frozen=True)
class OpCost:
    """``count`` identical calls of aten op ``op``; per call FLOPs and bytes at batch B are
    ``flops_fixed + flops_per_sample · B`` and ``bytes_fixed + bytes_per_sample · B``;
    ``backward``: run by autograd's backward pass, not by the forward or the loss."""

    op: str
    count: int
    flops_fixed: float
    flops_per_sample: float
    bytes_fixed: float
    bytes_per_sample: float
    winograd: bool  # a 2-D 3×3 convolution, stride 1, dilation 1, groups 1
    backward: bool = False

    def flops(self, batch: int) -> float:
        return self.flops_fixed + self.flops_per_sample * batch

    def bytes(self, batch: int) -> float:
        return self.bytes_fixed + self.bytes_per_sample * batch


@dataclass(frozen=True)
class OpProfile:
    """The aten ops of one training step: ``ops`` grouped, ``element_bytes`` the bytes per
    element of the floating-point tensors they were counted with (4: fp32 on meta)."""

    model: str
    size: int | None
    element_bytes: int
    ops: tuple[OpCost, ...]

    def flops_per_sample(self, batch: int = COUNT_BATCHES[0]) -> float:
        """Σ count · FLOPs(B) / B: the training FLOPs per sample, as FlopCounterMode counts."""
        return sum(op.count * op.flops(batch) for op in self.ops) / batch

    def bytes_per_sample(self, batch: int = COUNT_BATCHES[0]) -> float:
        """Σ count · bytes(B) / B at ``element_bytes`` per element."""
        return sum(op.count * op.bytes(batch) for op in self.ops) / batch


@dataclass(frozen=True)
class RooflineTime:
    """Roofline seconds of a training step per sample, split by the side that bounds each op.

    ``flops_per_sample`` are the counted (direct) FLOPs, ``bytes_per_sample`` the traffic at
    the precision asked for; ``arithmetic_intensity`` = their ratio (FLOP/byte);
    ``winograd_share`` the fraction of FLOPs in Winograd-eligible convolutions."""

    seconds_per_sample: float
    compute_bound_s: float
    memory_bound_s: float
    memory_bound_share: float
    flops_per_sample: float
    bytes_per_sample: float
    arithmetic_intensity: float
    winograd_share: float
    batch: int
    # Seconds per sample of each op class (``op_class``), whichever side bounds its ops.
    class_seconds: dict[str, float] = field(default_factory=dict)
    # Seconds per sample of the forward's ops (and the loss's), whichever side bounds them.
    forward_s: float = 0.0

    @property
    def forward_share(self) -> float:
        """The forward's share of the step's time (forward + loss + backward)."""
        return self.forward_s / self.seconds_per_sample if self.seconds_per_sample else 0.0


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements of ``t``: a broadcast dimension (stride 0, as after
    ``expand``) is read once, so it does not multiply the count."""
    if t.numel() == 0:
        return 0
    if t.layout != torch.strided:
        return t.numel() * t.element_size()
    distinct = math.prod(n for n, s in zip(t.shape, t.stride(), strict=True) if s != 0)
    return distinct * t.element_size()


def _bound_arguments(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    names = [a.name for a in func._schema.arguments]
    return {**dict(zip(names, args, strict=False)), **kwargs}


def _winograd_eligible(func: Any, bound: dict[str, Any]) -> bool:
    """cuDNN's Winograd convolutions take 2-D 3×3 kernels, stride 1, dilation 1, groups 1;
    the backward of such a convolution is one too (data and weight gradients)."""
    if func._overloadpacket not in _CONVOLUTIONS:
        return False
    weight = bound.get("weight")
    return (
        isinstance(weight, torch.Tensor)
        and weight.dim() == 4
        and tuple(weight.shape[2:]) == (3, 3)
        and all(s == 1 for s in bound.get("stride", [1]))
        and all(d == 1 for d in bound.get("dilation", [1]))
        and bound.get("groups", 1) == 1
    )


def _moves_no_data(func: Any) -> bool:
    # ``is_view`` comes from the schema's alias annotations: a return written ``Tensor(a)``
    # (no ``!``) aliases an input's storage (view, reshape, transpose, detach, unbind...);
    # in-place ops, ``Tensor(a!)``, do read and write and are kept.
    return func.is_view or func._overloadpacket in _NO_DATA


class _OpRecorder(TorchDispatchMode):
    """Records (op, FLOPs, bytes, Winograd) per aten call, as FlopCounterMode dispatches:
    an op without a FLOP formula is decomposed when it can be, so the FLOPs are the ones
    ``FlopCounterMode`` counts, and the traffic is that of the ops that actually run."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int, int, bool, bool]] = []
        self.backward = False  # set once the forward and the loss have run

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._overloadpacket not in flop_registry:
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        if not _moves_no_data(func):
            self._record(func, args, kwargs, out)
        return out

    def _record(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        bound = _bound_arguments(func, args, kwargs)
        # ``out=`` arguments are written, not read: they are counted as outputs only.
        unread = {a.name for a in func._schema.arguments if a.is_out}
        if func._overloadpacket in _SELF_NOT_READ:
            unread.add("self")
        inputs = {id(t): t for k, v in bound.items() if k not in unread for t in _tensors(v)}
        outputs = {id(t): t for t in _tensors(out)}
        moved = sum(map(tensor_bytes, inputs.values())) + sum(map(tensor_bytes, outputs.values()))
        # Called as FlopCounterMode calls it: the registry's formula with ``out_val``.
        formula = flop_registry.get(func._overloadpacket)
        flops = formula(*args, **kwargs, out_val=out) if formula else 0
        if _causal_kernel(func, bound):
            flops //= 2
        if flops or moved:
            wino = _winograd_eligible(func, bound)
            self.calls.append((str(func), int(flops), moved, wino, self.backward))


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _record_step(model: nn.Module, batch: Batch, loss: Callable[[Any, Any], torch.Tensor]):
    model.zero_grad(set_to_none=True)  # as a training loop does: no accumulation into .grad
    inputs, targets = batch
    with _OpRecorder() as recorder:
        value = loss(model(inputs), targets)
        recorder.backward = True
        value.backward()
    return recorder.calls


def profile_step(
    build: Callable[[], nn.Module],
    example_batch: Callable[[int], Batch],
    loss: Callable[[Any, Any], torch.Tensor],
    *,
    model: str = "custom",
    size: int | None = None,
) -> OpProfile:
    """Profile forward + loss + backward of ``build()`` on the meta device.

    ``example_batch(n)`` returns meta ``(inputs, targets)`` of n samples. The step runs at
    each of ``COUNT_BATCHES`` (b1, b2); per call, x_per_sample = (x(b2) − x(b1)) / (b2 − b1)
    and x_fixed = x(b1) − b1 · x_per_sample. Identical calls are grouped."""
    with torch.device("meta"):
        net = build()
    net.train()
    b1, b2 = COUNT_BATCHES
    first, second = (_record_step(net, example_batch(b), loss) for b in COUNT_BATCHES)
    if [(c[0], c[4]) for c in first] != [(c[0], c[4]) for c in second]:
        raise RuntimeError(f"{model}: the ops of a training step differ between batches")
    grouped: Counter[tuple] = Counter()
    for (op, f1, q1, wino, back), (_, f2, q2, _, _) in zip(first, second, strict=True):
        flops_ps, bytes_ps = (f2 - f1) / (b2 - b1), (q2 - q1) / (b2 - b1)
        costs = (f1 - b1 * flops_ps, flops_ps, q1 - b1 * bytes_ps, bytes_ps)
        grouped[(op, *costs, wino, back)] += 1
    floats = [p for p in net.parameters() if p.is_floating_point()]
    element = floats[0].element_size() if floats else torch.get_default_dtype().itemsize
    ops = tuple(
        OpCost(op, n, *costs, wino, back) for (op, *costs, wino, back), n in grouped.items()
    )
    return OpProfile(model=model, size=size, element_bytes=element, ops=ops)


def op_profile(spec: ModelSpec, size: int | None = None) -> OpProfile:
    """The roofline profile of a training step of the model ``spec`` at ``size`` (image
    size or sequence length; its natural one when None), counted once per model and size."""
    resolved = spec.resolve_size(size)
    with overflow_is_a_size_error(spec.name, resolved):
        return _zoo_profile(spec, resolved)


def zoo_step_profile(spec: ModelSpec, size: int) -> OpProfile:
    """The roofline profile of a training step of the model ``spec`` at ``size``, counted
    afresh (under whatever dispatch mode the caller has entered; ``op_profile`` caches)."""
    return profile_step(
        spec.build,
        lambda n: spec.task.example_batch(n, size, "meta"),
        spec.loss,
        model=spec.name,
        size=size,
    )


_zoo_profile = lru_cache(maxsize=64)(zoo_step_profile)


def roofline_seconds_per_sample(
    profile: OpProfile,
    peak_flops: float,
    memory_bytes_per_s: float,
    *,
    compute_fraction: float = 1.0,
    memory_fraction: float = 1.0,
    activation_bytes: int = 4,
    winograd: bool = False,
    batch: int | None = None,
    class_fractions: Mapping[str, float] | None = None,
) -> RooflineTime:
    """Roofline time of a training step per sample:

        t = Σ_ops count · max(F(B) / (w · P · c), Q(B) · (a / e) / (W · m)) / B

    F and Q an op's FLOPs and bytes at batch B (``batch``; the counting batch, 2, when
    None: larger batches spread the weights' traffic over more samples), P ``peak_flops``,
    W ``memory_bytes_per_s``, c and m the fractions, a ``activation_bytes`` and e the
    profile's bytes per element (a = 2 halves the traffic for 16-bit training, an
    approximation: integer tensors and fp32 master weights are scaled alike), w =
    WINOGRAD_SPEEDUP for Winograd-eligible convolutions when ``winograd``, else 1;
    ``class_fractions`` ({"gemm": c_g, "attention": c_a, ...}) give the ops of a class
    (``op_class``) their own c instead of ``compute_fraction``. An op
    whose compute side is the larger (ties included) adds to ``compute_bound_s``, the
    others to ``memory_bound_s``."""
    if not peak_flops > 0:
        raise ValueError(f"peak_flops must be > 0 FLOP/s, got {peak_flops}")
    if not memory_bytes_per_s > 0:
        raise ValueError(f"memory_bytes_per_s must be > 0 bytes/s, got {memory_bytes_per_s}")
    classes = dict(class_fractions or {})
    unknown = sorted(set(classes) - set(OP_CLASSES))
    if unknown:
        raise ValueError(f"unknown op classes {unknown}: allowed {', '.join(OP_CLASSES)}")
    for name, fraction in (
        ("compute_fraction", compute_fraction),
        ("memory_fraction", memory_fraction),
        *((f"class_fractions[{k!r}]", v) for k, v in classes.items()),
    ):
        if not 0 < fraction <= 1:
            raise ValueError(f"{name} must be in (0, 1], got {fraction}")
    if not activation_bytes > 0:
        raise ValueError(f"activation_bytes must be > 0, got {activation_bytes}")
    batch = COUNT_BATCHES[0] if batch is None else batch
    if not (isinstance(batch, int) and batch >= 1):
        raise ValueError(f"batch must be an integer >= 1, got {batch}")
    flop_rate = peak_flops * compute_fraction
    byte_rate = memory_bytes_per_s * memory_fraction
    scale = activation_bytes / profile.element_bytes
    compute_s = memory_s = forward_s = flops = eligible = moved = 0.0
    by_class: dict[str, float] = {}
    for op in profile.ops:
        op_flops, op_bytes = op.count * op.flops(batch), op.count * op.bytes(batch) * scale
        speedup = WINOGRAD_SPEEDUP if winograd and op.winograd else 1.0
        kind = op_class(op.op)
        rate = peak_flops * classes[kind] if kind in classes else flop_rate
        t_flops, t_bytes = op_flops / speedup / rate, op_bytes / byte_rate
        if t_flops >= t_bytes:
            compute_s += t_flops
        else:
            memory_s += t_bytes
        by_class[kind] = by_class.get(kind, 0.0) + max(t_flops, t_bytes)
        forward_s += 0.0 if op.backward else max(t_flops, t_bytes)
        flops += op_flops
        moved += op_bytes
        eligible += op_flops if op.winograd else 0.0
    total_s = compute_s + memory_s
    return RooflineTime(
        seconds_per_sample=total_s / batch,
        compute_bound_s=compute_s / batch,
        memory_bound_s=memory_s / batch,
        memory_bound_share=memory_s / total_s if total_s else 0.0,
        flops_per_sample=flops / batch,
        bytes_per_sample=moved / batch,
        arithmetic_intensity=flops / moved if moved else math.inf,
        winograd_share=eligible / flops if flops else 0.0,
        batch=batch,
        class_seconds={kind: seconds / batch for kind, seconds in by_class.items()},
        forward_s=forward_s / batch,
    )
