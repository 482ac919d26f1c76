"""Does one device hold the training state of a model at a batch size? A coarse budget.

Per device, in bytes (P parameters, T of them trainable, B the batch per device):

- weights: 4·P (fp32 master weights; autocast keeps the parameters in fp32);
- gradients: 4·T (fp32, as the parameters);
- optimizer state: 4·T for SGD with momentum (one buffer), 8·T for AdamW (two moments),
  as ``spec.optimizer`` names;
- DDP buckets: 4·T on more than one device (DDP copies the gradients into its buckets;
  ``gradient_as_bucket_view=False``, PyTorch's default);
- activations: B × elements per sample × 2 bytes under fp16/bf16 autocast, 4 under
  fp32/tf32. Elements per sample are the outputs of the network's leaf modules (plus the
  input), counted in one forward pass on the meta device (shapes only, no arithmetic):
  roughly what autograd keeps for the backward pass. Tensors written in place (ReLU with
  ``inplace=True``) count once; intermediates inside a module's own ``forward`` (residual
  additions, functional activations, attention scores) are not seen, so this is a
  first-order estimate, not an allocator trace;
- workspace and fragmentation: 10% of all of the above;
- runtime context: 1 GiB on a GPU (CUDA context, cuDNN/cuBLAS handles), none on a CPU.

fits = total ≤ the device's memory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import torch

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
    "outputs of leaf modules per sample, counted in one forward pass on the meta device "
    "(2 B/element under fp16/bf16, 4 under "
    f"fp32/tf32); +{WORKSPACE_FRACTION:.0%} workspace and fragmentation, "
    f"+{GPU_CONTEXT_BYTES / GIB:g} GiB CUDA context on GPUs"
)


@dataclass(frozen=True)
class ShapeCounts:
    """What memory depends on, counted once per model and size."""

    model: str
    size: int
    params: int
    trainable_params: int
    optimizer: str
    activation_elements_per_sample: float


def shape_counts(model: str, size: int | None = None) -> ShapeCounts:
    """Parameters and activation elements per sample of ``model`` at ``size`` (cached)."""
    spec = models.get(model)
    size = spec.resolve_size(size)
    return _count(model, size)


@lru_cache(maxsize=64)
def _count(model: str, size: int) -> ShapeCounts:
    spec = models.get(model)
    with torch.device("meta"):
        net = spec.build()
    net.train()
    inputs, _ = spec.task.example_batch(_COUNT_BATCH, size, "meta")
    seen: dict[int, torch.Tensor] = {}  # id -> tensor, kept alive so ids are not reused

    def keep(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            seen.setdefault(id(value), value)
        elif isinstance(value, tuple | list):
            for item in value:
                keep(item)
        elif isinstance(value, dict):
            for item in value.values():
                keep(item)

    hooks = [
        module.register_forward_hook(lambda _m, _i, out: keep(out))
        for module in net.modules()
        if not any(True for _ in module.children())
    ]
    try:
        keep(inputs)
        net(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    floating = [t for t in seen.values() if t.is_floating_point()]
    params = list(net.parameters())
    return ShapeCounts(
        model=model,
        size=size,
        params=sum(p.numel() for p in params),
        trainable_params=sum(p.numel() for p in params if p.requires_grad),
        optimizer=spec.optimizer,
        activation_elements_per_sample=sum(t.numel() for t in floating) / _COUNT_BATCH,
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
    """The per-device budget (see the module docstring); ``fits`` None without a capacity."""
    if counts.optimizer not in OPTIMIZER_BYTES:
        raise ValueError(
            f"unknown optimizer '{counts.optimizer}': allowed {', '.join(OPTIMIZER_BYTES)}"
        )
    if precision not in ACTIVATION_BYTES:
        raise ValueError(f"unknown precision '{precision}': allowed {', '.join(ACTIVATION_BYTES)}")
    trainable = counts.trainable_params
    parts = {
        "weights_bytes": WEIGHT_BYTES * counts.params,
        "gradients_bytes": GRAD_BYTES * trainable,
        "optimizer_bytes": OPTIMIZER_BYTES[counts.optimizer] * trainable,
        "ddp_buckets_bytes": GRAD_BYTES * trainable if devices > 1 else 0,
        "activations_bytes": device_batch
        * counts.activation_elements_per_sample
        * ACTIVATION_BYTES[precision],
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
