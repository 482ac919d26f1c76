"""Peak memory of a case (device memory on a GPU, resident set size of the process on a CPU)
and its parts: the training state counted from its tensors, and the activations a step
keeps for its backward, counted from what autograd saves (the same count on every device,
the one the memory predictor makes on the meta device: trainperf.predict.memory)."""

from __future__ import annotations

import contextlib
import resource
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


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
        # The caching allocator exists only once CUDA is initialised; before that, resetting
        # its statistics fails with "Invalid device argument" (seen on an H200, torch 2.11,
        # in a single-GPU case whose first CUDA call this was). init() is a no-op after.
        torch.cuda.init()
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


def _state_storages(model: torch.nn.Module) -> set[StorageWeakRef]:
    return {StorageWeakRef(t.untyped_storage()) for t in (*model.parameters(), *model.buffers())}


def _is_state(tensor: torch.Tensor, state: set[StorageWeakRef]) -> bool:
    """Whether a saved tensor is the model's state, not an activation: a parameter or a
    buffer of it, or a view of one (a linear layer saves its weight transposed). Under FSDP2
    the parameters gathered for a block's forward are ``nn.Parameter``s swapped into the
    module for that time: they are state too (freed and gathered again by FSDP)."""
    base = tensor._base if tensor._base is not None else tensor
    return isinstance(base, torch.nn.Parameter) or (
        StorageWeakRef(tensor.untyped_storage()) in state
    )


def saved_storages(
    model: torch.nn.Module, step: Callable[[], object]
) -> dict[StorageWeakRef, torch.Tensor]:
    """The tensors autograd saves for the backward while ``step()`` runs, one per storage
    (keyed by it: a tensor, or several views of one storage saved by several operators, is
    one allocation), the model's state excluded (``_is_state``). Works on every device,
    the meta device included (shapes only): each storage is taken whole, as its whole
    allocation stays alive."""
    # Storage identity, not data_ptr(): every meta tensor's data_ptr() is 0, while the
    # StorageImpl is shared by all views of a storage and by tensors an in-place op
    # returns; StorageWeakRef hashes it (torch's meta converter keys storages the same way).
    state = _state_storages(model)
    saved: dict[StorageWeakRef, torch.Tensor] = {}  # strong refs keep the identities unique

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if not _is_state(tensor, state):
            saved.setdefault(StorageWeakRef(tensor.untyped_storage()), tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    return saved


class _KeptOutputs(TorchDispatchMode):
    """The outputs of ``ops`` while ``inside`` is set: what selective checkpointing keeps
    of a block (in a cache of its own, which no saved-tensor hook sees)."""

    def __init__(self, ops: frozenset[Any]) -> None:
        super().__init__()
        self.ops, self.inside = ops, False
        self.kept: dict[StorageWeakRef, torch.Tensor] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.inside and func._overloadpacket in self.ops:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.kept.setdefault(StorageWeakRef(t.untyped_storage()), t)
        return out


def saved_activation_bytes(
    model: torch.nn.Module,
    step: Callable[[], object],
    checkpointed: Sequence[torch.nn.Module] = (),
    kept_ops: frozenset[Any] = frozenset(),
) -> tuple[int, str]:
    """(bytes, how) of the activations one ``step()`` (forward, loss, backward) keeps for
    its backward, on this rank: what autograd saves (``saved_storages``) and, for the
    ``checkpointed`` blocks, whose own saves happen inside ``torch.utils.checkpoint`` where
    no outer hook sees them, the inputs each keeps to recompute itself and, under selective
    checkpointing, the outputs of the operators it keeps (``kept_ops``, aten packets).
    Measured alike on a CPU and a GPU, as the predictor counts them on the meta device
    (trainperf.predict.memory): the forward pass's peak, not the backward's transients."""
    state = _state_storages(model)
    inputs: dict[StorageWeakRef, torch.Tensor] = {}
    kept = _KeptOutputs(kept_ops)

    def enter(module: torch.nn.Module, args: tuple) -> None:
        kept.inside = True
        for t in args:
            if isinstance(t, torch.Tensor) and not _is_state(t, state):
                inputs.setdefault(StorageWeakRef(t.untyped_storage()), t)

    def leave(module: torch.nn.Module, args: tuple, output: Any) -> None:
        kept.inside = False

    hooks = [block.register_forward_pre_hook(enter) for block in checkpointed]
    hooks += [block.register_forward_hook(leave) for block in checkpointed]
    try:
        with kept if kept_ops else contextlib.nullcontext():
            saved = saved_storages(model, step)
    finally:
        for hook in hooks:
            hook.remove()
    tensors = {**saved, **inputs, **kept.kept}.values()
    how = "autograd's saved tensors (saved_tensors_hooks), distinct storages, parameters excluded"
    if checkpointed:
        what = "inputs and kept outputs" if kept_ops else "inputs"
        how += f", with the {what} of each checkpointed block"
    return sum(t.untyped_storage().nbytes() for t in tensors), how


def memory_split(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: Callable[[], object],
    checkpointed: Sequence[torch.nn.Module] = (),
    kept_ops: frozenset[Any] = frozenset(),
) -> dict:
    """The training state in bytes (``training_state_bytes``) and what one ``step()``
    saves for its backward (``saved_activation_bytes``)."""
    activations, how = saved_activation_bytes(model, step, checkpointed, kept_ops)
    split = training_state_bytes(model, optimizer)
    return split | {"mem_activations_bytes": activations, "mem_activations_source": how}
