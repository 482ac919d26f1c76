"""Does one device hold the training state of a model at a batch size? A coarse budget.

Per device, in bytes (P parameters, T of them trainable, B the batch per device):

- weights: 4·P (fp32 master weights; autocast keeps the parameters in fp32);
- gradients: 4·T (fp32, as the parameters);
- optimizer state: 4·T for SGD with momentum (one buffer), 8·T for AdamW (two moments),
  as ``spec.optimizer`` names;
- DDP buckets: 4·T on more than one device (DDP copies the gradients into its buckets;
  ``gradient_as_bucket_view=False``, PyTorch's default);
- activations: B × (E·w + X), what autograd saves for the backward pass. E is the
  floating-point elements saved per sample, w their width (2 bytes under fp16/bf16
  autocast, 4 under fp32/tf32); X the bytes per sample of the integer and boolean tensors
  saved (token ids, targets, pooling indices, dropout masks), whose width does not follow
  the precision;
- workspace and fragmentation: 10% of all of the above;
- runtime context: 1 GiB on a GPU (CUDA context, cuDNN/cuBLAS handles), none on a CPU.

fits = total ≤ the device's memory.

E and X are counted in one forward pass + loss on the meta device (shapes only, no
arithmetic), the model in train mode, with ``torch.autograd.graph.saved_tensors_hooks``
seeing every tensor an operator saves for its backward formula: layer inputs, outputs
of ReLU/sigmoid/softmax, intermediates inside a module's ``forward`` (residual branches,
functional activations, attention), the loss's inputs and targets. Each storage counts once
and whole (the same tensor or several views of it saved by several operators are one
allocation, and a saved view keeps all of its storage alive); parameters and buffers (and
views of them, e.g. the transposed weight a linear layer saves) are the model's state,
counted above, not activations. Counts are divided by the counting batch (2, so batch norm
is defined); the few saved tensors that do not grow with the batch (batch-norm statistics,
a loss's scalar weight) are thus spread over the samples, a negligible overcount.

Attention: on a CUDA GPU ``scaled_dot_product_attention`` runs a fused kernel (flash, or
memory-efficient on any CUDA GPU and precision, dropout included) that saves q, k, v, the
output and one logsumexp per row, O(L); a CPU training with dropout runs the math path,
which saves the L×L probabilities and the dropout mask, O(L²). The meta device always takes
the math path, so the GPU count routes the call to the memory-efficient kernel
(``aten._scaled_dot_product_efficient_attention``, whose meta kernel and backward formula
torch provides); the CPU count keeps the math path (a CPU without dropout would take its
own flash kernel: an overestimate there).

Not counted: what the backward pass allocates transiently (gradients of activations,
freed layer by layer; the workspace fraction stands for them); the allocator's rounding
and caching. Under 16-bit autocast some saved tensors stay fp32 (the inputs of layer norm,
softmax and the loss, which autocast runs in fp32, and a residual stream summed in fp32):
counting them at 2 bytes is a documented approximation, as is the batch itself, which the
data pipeline holds in fp32 while the first layer saves its 16-bit copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from trainperf import models

GIB = 2**30
WEIGHT_BYTES, GRAD_BYTES = 4, 4
OPTIMIZER_BYTES = {"sgd": 4, "adamw": 8}
ACTIVATION_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
WORKSPACE_FRACTION = 0.10
GPU_CONTEXT_BYTES = GIB
# Batch norm needs more than one value per channel; counts are divided by this batch.
_COUNT_BATCH = 2

ASSUMPTIONS = (
    "memory: fp32 weights, gradients (4 B/param) and optimizer state (SGD momentum 4 B, "
    "AdamW 8 B/param); DDP bucket copy of the gradients above 1 device; activations = "
    "the tensors autograd saves for backward (distinct storages, parameters excluded) per "
    "sample, counted in one forward pass + loss on the meta device, attention as a fused "
    "kernel on GPUs and the math path on CPUs (floating-point 2 B/element under fp16/bf16, "
    f"4 under fp32/tf32; integer and boolean tensors as saved); +{WORKSPACE_FRACTION:.0%} "
    f"workspace and fragmentation, +{GPU_CONTEXT_BYTES / GIB:g} GiB CUDA context on GPUs"
)


@dataclass(frozen=True)
class SavedTensors:
    """Tensors autograd saves for backward: floating-point elements and other bytes."""

    elements: float  # floating point: their width follows the precision
    other_bytes: float  # integer and boolean (ids, targets, indices, masks): as saved

    def per(self, batch: int) -> SavedTensors:
        return SavedTensors(self.elements / batch, self.other_bytes / batch)

    def bytes(self, precision: str) -> float:
        return self.elements * ACTIVATION_BYTES[precision] + self.other_bytes


@dataclass(frozen=True)
class ShapeCounts:
    """What memory depends on, counted once per model and size; activations per sample."""

    model: str
    size: int
    params: int
    trainable_params: int
    optimizer: str
    gpu_activations: SavedTensors  # attention through a fused kernel
    cpu_activations: SavedTensors  # attention through the math path


def saved_for_backward(model: nn.Module, step: Callable[[], Any]) -> SavedTensors:
    """What autograd saves while ``step()`` runs (forward + loss), ``model``'s state excluded.

    Each storage counts once, whole; a tensor that is a parameter or buffer of ``model``, or
    a view of one, is not counted. Works on the meta device (shapes only).
    """
    # Storage identity, not data_ptr(): every meta tensor's data_ptr() is 0, while the
    # StorageImpl is shared by all views of a storage and by tensors an in-place op returns,
    # and differs otherwise; StorageWeakRef hashes it (torch's meta converter keys
    # storages the same way). id(t._base) would miss tensors that share a storage without
    # being views (detach(), in-place results).
    state = {StorageWeakRef(t.untyped_storage()) for t in (*model.parameters(), *model.buffers())}
    saved: dict[StorageWeakRef, torch.Tensor] = {}  # strong refs keep the identities unique

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        key = StorageWeakRef(tensor.untyped_storage())
        if key not in state:
            saved.setdefault(key, tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    sizes = [(t.untyped_storage().nbytes(), t) for t in saved.values()]
    return SavedTensors(
        elements=sum(n // t.element_size() for n, t in sizes if t.is_floating_point()),
        other_bytes=sum(n for n, t in sizes if not t.is_floating_point()),
    )


class FusedAttention(TorchFunctionMode):
    """Runs ``scaled_dot_product_attention`` as the memory-efficient kernel, as a GPU would.

    The meta device always picks the math path; this sends the call to the fused kernel
    every CUDA GPU can run, so autograd saves what it saves on a GPU. ``calls`` says how
    many calls were sent (0: the model has no attention).
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        # Grouped-query attention (k, v with fewer heads) is left to the math path: the
        # memory-efficient kernel takes equal heads only.
        if func is F.scaled_dot_product_attention and not kwargs.pop("enable_gqa", False):
            self.calls += 1
            return _efficient_attention(*args, **kwargs)
        return func(*args, **kwargs)


def _efficient_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    # scaled_dot_product_attention's arguments; compute_log_sumexp=True: backward needs it.
    efficient = torch.ops.aten._scaled_dot_product_efficient_attention
    return efficient(query, key, value, attn_mask, True, dropout_p, is_causal, scale=scale)[0]


def shape_counts(model: str, size: int | None = None) -> ShapeCounts:
    """Parameters and activations per sample of ``model`` at ``size`` (cached)."""
    spec = models.get(model)
    size = spec.resolve_size(size)
    return _count(model, size)


@lru_cache(maxsize=64)
def _count(model: str, size: int) -> ShapeCounts:
    spec = models.get(model)
    with torch.device("meta"):
        net = spec.build()
    net.train()

    def step() -> Any:
        inputs, targets = spec.task.example_batch(_COUNT_BATCH, size, "meta")
        return spec.loss(net(inputs), targets)

    with FusedAttention() as fused:
        gpu = saved_for_backward(net, step).per(_COUNT_BATCH)
    cpu = saved_for_backward(net, step).per(_COUNT_BATCH) if fused.calls else gpu
    params = list(net.parameters())
    return ShapeCounts(
        model=model,
        size=size,
        params=sum(p.numel() for p in params),
        trainable_params=sum(p.numel() for p in params if p.requires_grad),
        optimizer=spec.optimizer,
        gpu_activations=gpu,
        cpu_activations=cpu,
    )


@dataclass(frozen=True)
class MemoryBreakdown:
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    ddp_buckets_bytes: float
    activations_bytes: float
    workspace_bytes: float
    context_bytes: float
    total_bytes: float
    available_bytes: float | None
    fits: bool | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def memory_breakdown(
    counts: ShapeCounts,
    device_batch: int,
    precision: str,
    memory_bytes: float | None,
    *,
    devices: int = 1,
    gpu: bool = True,
) -> MemoryBreakdown:
    """The per-device budget (see the module docstring); ``fits`` None without a capacity.

    ``gpu`` picks the activations counted with fused attention and adds the CUDA context;
    on a CPU the activations are those of the math attention path.
    """
    if counts.optimizer not in OPTIMIZER_BYTES:
        raise ValueError(
            f"unknown optimizer '{counts.optimizer}': allowed {', '.join(OPTIMIZER_BYTES)}"
        )
    if precision not in ACTIVATION_BYTES:
        raise ValueError(f"unknown precision '{precision}': allowed {', '.join(ACTIVATION_BYTES)}")
    trainable = counts.trainable_params
    activations = counts.gpu_activations if gpu else counts.cpu_activations
    parts = {
        "weights_bytes": WEIGHT_BYTES * counts.params,
        "gradients_bytes": GRAD_BYTES * trainable,
        "optimizer_bytes": OPTIMIZER_BYTES[counts.optimizer] * trainable,
        "ddp_buckets_bytes": GRAD_BYTES * trainable if devices > 1 else 0,
        "activations_bytes": device_batch * activations.bytes(precision),
    }
    workspace = WORKSPACE_FRACTION * sum(parts.values())
    context = GPU_CONTEXT_BYTES if gpu else 0
    total = sum(parts.values()) + workspace + context
    return MemoryBreakdown(
        **{k: float(v) for k, v in parts.items()},
        workspace_bytes=float(workspace),
        context_bytes=float(context),
        total_bytes=float(total),
        available_bytes=None if memory_bytes is None else float(memory_bytes),
        fits=None if memory_bytes is None else total <= memory_bytes,
    )
