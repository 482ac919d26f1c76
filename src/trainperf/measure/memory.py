"""Peak memory of a case (device memory on a GPU, resident set size of the process on a CPU)
and its parts: the training state counted from its tensors, and what a forward pass holds."""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MemoryPeak:
    mem_peak_bytes: int
    source: str
    mem_reserved_peak_bytes: int | None = None
    # Per CUDA device when the case uses several in one process (DataParallel).
    mem_peak_bytes_per_device: list[int] | None = None


def _indices(device: torch.device, device_indices: Sequence[int] | None) -> list[int]:
    return list(device_indices) if device_indices is not None else [device.index or 0]


def reset_peak(device: torch.device, device_indices: Sequence[int] | None = None) -> None:
    """Forget earlier peaks, so the reading covers what follows (GPU only: RSS cannot).

    ``device_indices``: every CUDA device the case uses (DataParallel); default ``device``.
    """
    if device.type == "cuda":
        for index in _indices(device, device_indices):
            torch.cuda.reset_peak_memory_stats(index)


def read_peak(device: torch.device, device_indices: Sequence[int] | None = None) -> MemoryPeak:
    """The peak since ``reset_peak``: allocated tensors (and the caching allocator's
    reservation) on a GPU; on a CPU the process's peak RSS over its whole life, which a
    fresh worker process per case keeps meaningful.

    Over several GPUs (``device_indices``) the peak is the largest device's, as a ddp
    case reports the largest rank's: it is what must fit on one device. Each device's
    peak is in ``mem_peak_bytes_per_device``.
    """
    if device.type == "cuda":
        indices = _indices(device, device_indices)
        allocated = [int(torch.cuda.max_memory_allocated(i)) for i in indices]
        reserved = [int(torch.cuda.max_memory_reserved(i)) for i in indices]
        several = len(indices) > 1
        return MemoryPeak(
            mem_peak_bytes=max(allocated),
            source="torch.cuda.max_memory_allocated" + (" (max over devices)" if several else ""),
            mem_reserved_peak_bytes=max(reserved),
            mem_peak_bytes_per_device=allocated if several else None,
        )
    # ru_maxrss is in kilobytes on Linux, in bytes on macOS.
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024
    return MemoryPeak(
        mem_peak_bytes=int(maxrss * scale), source="getrusage ru_maxrss (process RSS)"
    )


def _local_bytes(tensor: torch.Tensor) -> int:
    """Bytes this process holds of ``tensor``: its shard when it is a DTensor (FSDP)."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def training_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """What the training state occupies in this process, counted from the tensors
    themselves (exact, on every device): parameters, gradients (as the last step left
    them) and optimizer state (momentum, Adam's moments), each this rank's shard under
    FSDP. A tied parameter counts once."""
    params = list(model.parameters())
    state = [
        value
        for per_param in optimizer.state.values()
        for value in per_param.values()
        if isinstance(value, torch.Tensor) and value.dim() > 0  # not Adam's step counter
    ]
    return {
        "mem_params_bytes": sum(_local_bytes(p) for p in params),
        "mem_grads_bytes": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        "mem_optimizer_bytes": sum(_local_bytes(t) for t in state),
    }


def forward_retained_bytes(
    model: torch.nn.Module, device: torch.device, step: Callable[[], object]
) -> tuple[int | None, str]:
    """(bytes, how) of the memory one forward pass allocates and still holds when it ends,
    measured on a CUDA device around the root module's forward within ``step()``: the
    activations saved for the backward (only the blocks' inputs under full checkpointing)
    and the output. None on a CPU, whose allocator keeps no count of live bytes."""
    if device.type != "cuda":
        return None, "the CPU allocator keeps no count of live bytes (CUDA devices only)"
    before: list[int] = []
    after: list[int] = []

    def allocated(into: list[int]) -> Callable[..., None]:
        return lambda *_: into.append(torch.cuda.memory_allocated(device))

    hooks = [
        model.register_forward_pre_hook(allocated(before)),
        model.register_forward_hook(allocated(after)),
    ]
    try:
        step()
    finally:
        for hook in hooks:
            hook.remove()
    # The caching allocator counts on the host as it hands out memory: no synchronize.
    return after[-1] - before[-1], "torch.cuda.memory_allocated after - before the forward"


def memory_split(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: Callable[[], object],
    device: torch.device,
) -> dict:
    """The training state in bytes and what one forward pass of ``step()`` holds, with
    the reason when the device cannot tell (``training_state_bytes``,
    ``forward_retained_bytes``)."""
    split = training_state_bytes(model, optimizer)
    retained, how = forward_retained_bytes(model, device, step)
    split["mem_activations_bytes"] = retained
    split["mem_activations_source" if retained is not None else "mem_activations_absent"] = how
    return split
