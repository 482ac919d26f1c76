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

**Sharded** (FSDP2 / ZeRO-3 over N ranks, ``sharded_memory``; P parameters, T trainable,
R of them in the root, K in the largest block, p bytes per gathered parameter: 2 under
bf16's ``MixedPrecisionPolicy``, else 4; r bytes per reduced gradient, 4 or 2), per rank:

- sharded state: (4·P + 4·T + optimizer·T) / N (fp32 master weights, their gradients and
  the optimizer state, each rank holding its 1/N of every parameter);
- gathered parameters: p·(R + 2K) when each block is resharded after its forward (the root
  stays gathered around the blocks; the block computing and the next, prefetched), p·P
  without resharding (every block stays gathered from its forward to its backward);
- gathered gradients, when the activations peak at the start of the backward: the root's,
  p·R, held whole until its reduce-scatter at the end, a block's, p·K, and the block being
  reduce-scattered, r·K;
- activations: B × (what is saved outside the blocks + inside them): ``none``, all of it;
  ``full``, the inputs of every block; ``selective``, the inputs and the matmul and
  attention outputs of every block; checkpointed, plus the rest of what one block saves,
  as it is recomputed in the backward (n blocks: kept·(1 − 1/n) + one block's saved);
- workspace 10% of the above and the 1 GiB context, as for one device.

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

Attention is counted as the kernel that will run it (``trainperf.models.attention``: the
same rule picks the kernel and decides whether grouped key/value heads are repeated, for
the model and for this count; ``AttentionPlan``: a device type, 16-bit or not, a GPU's
compute capability from the catalog). The meta device always takes the math path, so
``FusedAttention`` sends each call to the planned kernel's operator: FlashAttention on a
GPU of compute capability 8.0+ in fp16/bf16 (grouped heads kept grouped), the
memory-efficient kernel on other GPUs and in fp32/TF32 (heads repeated, as torchtitan's
``repeat_kv`` does), the CPU's flash kernel without dropout; each saves q, k, v, the
output and one logsumexp per row, O(L). A CPU training with dropout (BERT, GPT-2) runs the
math path, which saves the L×L probabilities and the dropout mask, O(L²), and is counted so.

Sharded data parallelism needs the model split as FSDP shards it (``block_counts``): the
repeated blocks (``trainperf.models.blocks.find_blocks``) and the root (every other
parameter). One forward pass + loss on the meta device, with module hooks marking which
block runs, attributes each saved storage to the block (or the root) that saved it first,
and records what activation checkpointing would keep: the inputs of every block (full),
and those plus the outputs of the matrix multiplies and attention kernels inside the
blocks (selective, ``SELECTIVE_SAVED_OPS``); and the forward FLOPs inside and outside the
blocks (``torch.utils.flop_counter``'s formulas), by which the step's compute is split.

Not counted: what the backward pass allocates transiently (gradients of activations,
freed layer by layer; the workspace fraction stands for them); the allocator's rounding
and caching. Under 16-bit autocast some saved tensors stay fp32 (the inputs of layer norm,
softmax and the loss, which autocast runs in fp32, and a residual stream summed in fp32):
counting them at 2 bytes is a documented approximation, as is the batch itself, which the
data pipeline holds in fp32 while the first layer saves its 16-bit copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from trainperf.models.attention import AttentionPlan
from trainperf.models.blocks import blocks_of, kept_op_packets
from trainperf.models.flops import count_parameters
from trainperf.models.spec import ModelSpec, overflow_is_a_size_error

GIB = 2**30
WEIGHT_BYTES, GRAD_BYTES = 4, 4
OPTIMIZER_BYTES = {"sgd": 4, "adamw": 8}
ACTIVATION_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
WORKSPACE_FRACTION = 0.10
GPU_CONTEXT_BYTES = GIB
# The plan of a GPU counted when none is named: pre-Ampere or unknown (memory-efficient).
GPU = AttentionPlan("cuda")
# Batch norm needs more than one value per channel; counts are divided by this batch.
_COUNT_BATCH = 2

ASSUMPTIONS = (
    "memory: fp32 weights, gradients (4 B/param) and optimizer state (SGD momentum 4 B, "
    "AdamW 8 B/param); DDP bucket copy of the gradients above 1 device; activations = "
    "the tensors autograd saves for backward (distinct storages, parameters excluded) per "
    "sample, counted in one forward pass + loss on the meta device, attention as the kernel "
    "that will run it (flash, memory-efficient, or the math path of a CPU with dropout; "
    "floating-point 2 B/element under fp16/bf16, "
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

    def scaled(self, factor: float) -> SavedTensors:
        return SavedTensors(self.elements * factor, self.other_bytes * factor)

    def __add__(self, other: SavedTensors) -> SavedTensors:
        return SavedTensors(self.elements + other.elements, self.other_bytes + other.other_bytes)


@dataclass(frozen=True)
class ShapeCounts:
    """What memory depends on, counted once per model and size; activations per sample."""

    model: str
    size: int
    params: int
    trainable_params: int
    optimizer: str
    activations: SavedTensors  # attention through the planned kernel
    plan: AttentionPlan
    # Trainable parameters registered under more than one name (tied weights: GPT-2's
    # token embedding is its output layer too), counted once.
    tied_params: int = 0


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
    state = _state_storages(model)
    saved: dict[StorageWeakRef, torch.Tensor] = {}  # strong refs keep the identities unique

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        key = StorageWeakRef(tensor.untyped_storage())
        if key not in state:
            saved.setdefault(key, tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    return _tally(saved.values())


def _state_storages(model: nn.Module) -> set[StorageWeakRef]:
    return {StorageWeakRef(t.untyped_storage()) for t in (*model.parameters(), *model.buffers())}


def _tally(tensors: Iterable[torch.Tensor]) -> SavedTensors:
    """The whole storages of ``tensors`` (each given once): float elements, other bytes."""
    sizes = [(t.untyped_storage().nbytes(), t) for t in tensors]
    return SavedTensors(
        elements=sum(n // t.element_size() for n, t in sizes if t.is_floating_point()),
        other_bytes=sum(n for n, t in sizes if not t.is_floating_point()),
    )


class FusedAttention(TorchFunctionMode):
    """Runs ``scaled_dot_product_attention`` as the kernel ``plan`` says PyTorch would pick
    (``trainperf.models.attention.kernel_for``), so that autograd saves what it saves there.

    The meta device always takes the math path; this sends each call to the aten operator
    of the planned kernel (flash on CUDA or on the CPU, memory-efficient), each of which has
    a meta kernel and a backward formula, with grouped key/value heads repeated exactly
    when the kernel needs equal heads (``attend``'s rule); a call planned for the math
    path stays on it. ``calls`` counts the calls (0: the model has no attention).
    """

    def __init__(self, plan: AttentionPlan) -> None:
        super().__init__()
        self.plan = plan
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        self.calls += 1
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
        call = dict(zip(names, args, strict=False)) | kwargs  # positional as in the signature
        dropout = call.get("dropout_p", 0.0) > 0
        kernel = self.plan.kernel(dropout)
        if kernel == "math":
            return func(*args, **kwargs)
        heads, kv_heads = call["query"].shape[-3], call["key"].shape[-3]
        call.pop("enable_gqa", None)
        if kv_heads != heads and not self.plan.takes_grouped_heads(dropout):
            for name in ("key", "value"):
                call[name] = call[name].repeat_interleave(heads // kv_heads, dim=-3)
        return _call_kernel(_KERNELS[(self.plan.device_type, kernel)], **call)


def _call_kernel(
    kernel: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """``scaled_dot_product_attention``'s arguments passed to an aten kernel; its output."""
    return kernel(query, key, value, attn_mask, dropout_p, is_causal, scale)[0]


_aten = torch.ops.aten
# (device type, kernel) -> the aten operator, called with SDPA's arguments in its own order
# (the memory-efficient kernel computes the logsumexp its backward needs: True).
_KERNELS = {
    ("cuda", "efficient"): lambda q, k, v, mask, p, causal, scale: (
        _aten._scaled_dot_product_efficient_attention(q, k, v, mask, True, p, causal, scale=scale)
    ),
    ("cuda", "flash"): lambda q, k, v, mask, p, causal, scale: (
        _aten._scaled_dot_product_flash_attention(q, k, v, p, causal, scale=scale)
    ),
    ("cpu", "flash"): lambda q, k, v, mask, p, causal, scale: (
        _aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, p, causal, attn_mask=mask, scale=scale
        )
    ),
}


def attention_plan(gpu: bool, precision: str, capability: tuple[int, int] | None) -> AttentionPlan:
    """Where the predicted training's attention runs: a GPU of ``capability`` (None: one
    not known, taken as pre-Ampere, the memory-efficient kernel) or a CPU, in 16-bit
    under fp16/bf16."""
    return AttentionPlan("cuda" if gpu else "cpu", precision in ("fp16", "bf16"), capability)


def shape_counts(
    spec: ModelSpec, size: int | None = None, plan: AttentionPlan = GPU
) -> ShapeCounts:
    """Parameters and activations per sample of the model ``spec`` at ``size``, attention
    as ``plan`` runs it (cached)."""
    resolved = spec.resolve_size(size)
    with overflow_is_a_size_error(spec.name, resolved):
        return _count(spec, resolved, plan)


@lru_cache(maxsize=64)
def _count(spec: ModelSpec, size: int, plan: AttentionPlan) -> ShapeCounts:
    net = spec.build_on_meta()

    def step() -> Any:
        inputs, targets = spec.task.example_batch(_COUNT_BATCH, size, "meta")
        return spec.loss(net(inputs), targets)

    with FusedAttention(plan):
        activations = saved_for_backward(net, step).per(_COUNT_BATCH)
    return ShapeCounts(
        **_model_fields(spec, size, net),
        activations=activations,
        plan=plan,
        tied_params=tied_parameters(net),
    )


def tied_parameters(net: nn.Module) -> int:
    """Elements of the trainable parameters ``net`` registers under more than one name."""
    names: dict[int, list[str]] = {}
    tensors: dict[int, torch.Tensor] = {}
    for name, param in net.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
        tensors[id(param)] = param
    return sum(
        tensors[key].numel()
        for key, seen in names.items()
        if len(seen) > 1 and tensors[key].requires_grad
    )


def _model_fields(spec: ModelSpec, size: int, net: nn.Module) -> dict[str, Any]:
    """The fields ShapeCounts and BlockCounts both begin with: which model, its parameters."""
    params, trainable = count_parameters(net)
    return {
        "model": spec.name,
        "size": size,
        "params": params,
        "trainable_params": trainable,
        "optimizer": spec.optimizer,
    }


@dataclass(frozen=True)
class BlockCounts:
    """A model as FSDP shards it (module doc): ``blocks`` repeated blocks and the root
    holding every other parameter; FLOPs and saved tensors per sample."""

    model: str
    size: int
    params: int
    trainable_params: int
    optimizer: str
    blocks: int
    block_params: int  # the largest block's
    root_params: int
    forward_flops: float  # one forward pass + loss
    block_flops_share: float  # the share of forward_flops inside the blocks
    saved_outside: SavedTensors  # saved for backward outside the blocks (embedding, head, loss)
    saved_in_blocks: SavedTensors  # inside all the blocks
    saved_in_largest_block: SavedTensors
    block_inputs: SavedTensors  # every block's inputs, distinct storages: full checkpointing
    selective_kept: SavedTensors  # those and the SELECTIVE_SAVED_OPS outputs in every block
    plan: AttentionPlan  # where the attention of these counts runs


class _BlockRecorder(TorchDispatchMode):
    """Forward FLOPs per region (a block's index, or None outside the blocks) and the
    outputs of ``SELECTIVE_SAVED_OPS`` inside the blocks, as FlopCounterMode dispatches."""

    def __init__(self) -> None:
        super().__init__()
        self.region: int | None = None
        self.flops: dict[int | None, int] = {}
        self.kept: dict[StorageWeakRef, torch.Tensor] = {}
        self._kept_ops = kept_op_packets()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        formula = flop_registry.get(func._overloadpacket)
        if formula is None:
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        if formula is not None:
            flops = formula(*args, **kwargs, out_val=out)
            self.flops[self.region] = self.flops.get(self.region, 0) + flops
        if self.region is not None and func._overloadpacket in self._kept_ops:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.kept.setdefault(StorageWeakRef(t.untyped_storage()), t)
        return out


def block_counts(
    spec: ModelSpec, size: int | None = None, plan: AttentionPlan = GPU
) -> BlockCounts:
    """The model ``spec`` at ``size`` split into blocks and root (module doc; cached),
    attention as ``plan`` runs it. Raises ``trainperf.models.blocks.NoBlocks`` for a model
    without repeated blocks."""
    return _count_blocks(spec, spec.resolve_size(size), plan)


@lru_cache(maxsize=16)
def _count_blocks(spec: ModelSpec, size: int, plan: AttentionPlan) -> BlockCounts:
    net = spec.build_on_meta()
    blocks = blocks_of(net, spec.name)
    state = _state_storages(net)
    recorder = _BlockRecorder()
    saved: dict[StorageWeakRef, tuple[torch.Tensor, int | None]] = {}
    inputs: dict[StorageWeakRef, torch.Tensor] = {}

    def enter(index: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple) -> None:
            recorder.region = index
            for t in tree_leaves(args):
                if isinstance(t, torch.Tensor) and StorageWeakRef(t.untyped_storage()) not in state:
                    inputs.setdefault(StorageWeakRef(t.untyped_storage()), t)

        return hook

    def leave(module: nn.Module, args: tuple, output: Any) -> None:
        recorder.region = None

    for index, block in enumerate(blocks):
        block.register_forward_pre_hook(enter(index))
        block.register_forward_hook(leave)

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        key = StorageWeakRef(tensor.untyped_storage())
        if key not in state:
            saved.setdefault(key, (tensor, recorder.region))
        return tensor

    saving = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    with FusedAttention(plan), recorder, saving:
        inputs_, targets = spec.task.example_batch(_COUNT_BATCH, size, "meta")
        spec.loss(net(inputs_), targets)

    per_block = [
        _tally(t for t, region in saved.values() if region == index).per(_COUNT_BATCH)
        for index in range(len(blocks))
    ]
    block_sizes = [count_parameters(block)[0] for block in blocks]
    total_flops = sum(recorder.flops.values())
    fields = _model_fields(spec, size, net)
    return BlockCounts(
        **fields,
        blocks=len(blocks),
        block_params=max(block_sizes),
        root_params=fields["params"] - sum(block_sizes),
        forward_flops=total_flops / _COUNT_BATCH,
        block_flops_share=1 - recorder.flops.get(None, 0) / total_flops if total_flops else 0.0,
        saved_outside=_tally(t for t, region in saved.values() if region is None).per(_COUNT_BATCH),
        saved_in_blocks=sum(per_block, SavedTensors(0, 0)),
        saved_in_largest_block=max(per_block, key=lambda c: (c.elements, c.other_bytes)),
        block_inputs=_tally(inputs.values()).per(_COUNT_BATCH),
        selective_kept=_tally({**inputs, **recorder.kept}.values()).per(_COUNT_BATCH),
        plan=plan,
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


def with_overheads(
    parts: dict[str, float], gpu: bool, memory_bytes: float | None
) -> dict[str, Any]:
    """``parts`` (bytes) with the workspace fraction, the GPU context, their total, the
    device's memory and whether the total fits in it (module doc)."""
    workspace = WORKSPACE_FRACTION * sum(parts.values())
    context = GPU_CONTEXT_BYTES if gpu else 0
    total = sum(parts.values()) + workspace + context
    return {k: float(v) for k, v in parts.items()} | {
        "workspace_bytes": float(workspace),
        "context_bytes": float(context),
        "total_bytes": float(total),
        "available_bytes": None if memory_bytes is None else float(memory_bytes),
        "fits": None if memory_bytes is None else total <= memory_bytes,
    }


def memory_breakdown(
    counts: ShapeCounts,
    device_batch: int,
    precision: str,
    memory_bytes: float | None,
    *,
    devices: int = 1,
) -> MemoryBreakdown:
    """The per-device budget (see the module docstring); ``fits`` None without a capacity.
    A GPU's (``counts.plan``) adds the CUDA context."""
    if counts.optimizer not in OPTIMIZER_BYTES:
        raise ValueError(
            f"unknown optimizer '{counts.optimizer}': allowed {', '.join(OPTIMIZER_BYTES)}"
        )
    if precision not in ACTIVATION_BYTES:
        raise ValueError(f"unknown precision '{precision}': allowed {', '.join(ACTIVATION_BYTES)}")
    trainable = counts.trainable_params
    activations = counts.activations
    gpu = counts.plan.device_type == "cuda"
    parts = {
        "weights_bytes": WEIGHT_BYTES * counts.params,
        "gradients_bytes": GRAD_BYTES * trainable,
        "optimizer_bytes": OPTIMIZER_BYTES[counts.optimizer] * trainable,
        "ddp_buckets_bytes": GRAD_BYTES * trainable if devices > 1 else 0,
        "activations_bytes": device_batch * activations.bytes(precision),
    }
    return MemoryBreakdown(**with_overheads(parts, gpu, memory_bytes))


@dataclass(frozen=True)
class ShardedMemory:
    """A rank's budget under sharded data parallelism (module doc)."""

    weights_bytes: float  # the rank's shard of each
    gradients_bytes: float
    optimizer_bytes: float
    gathered_params_bytes: float
    gathered_grads_bytes: float
    activations_bytes: float
    workspace_bytes: float
    context_bytes: float
    total_bytes: float
    available_bytes: float | None
    fits: bool | None

    @property
    def sharded_state_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def checkpointed_activations(counts: BlockCounts, checkpointing: str) -> SavedTensors:
    """What is held per sample at the start of the backward (module doc), by checkpointing
    mode: checkpointed, every block keeps its share of what checkpointing keeps, and the
    block recomputed adds the rest of what it saves."""
    kept = {
        "none": counts.saved_in_blocks,
        "full": counts.block_inputs,
        "selective": counts.selective_kept,
    }
    if checkpointing not in kept:
        raise ValueError(f"unknown checkpointing '{checkpointing}': allowed {', '.join(kept)}")
    held = kept[checkpointing]
    if checkpointing != "none":
        held = held + counts.saved_in_largest_block + held.scaled(-1 / counts.blocks)
    return counts.saved_outside + held


def sharded_memory(
    counts: BlockCounts,
    device_batch: int,
    precision: str,
    memory_bytes: float | None,
    *,
    ranks: int,
    param_bytes: int,
    reduce_bytes: int,
    checkpointing: str = "none",
    reshard_after_forward: bool = True,
) -> ShardedMemory:
    """The per-rank budget of ``counts`` sharded over ``ranks`` (module doc)."""
    if counts.optimizer not in OPTIMIZER_BYTES:
        raise ValueError(
            f"unknown optimizer '{counts.optimizer}': allowed {', '.join(OPTIMIZER_BYTES)}"
        )
    trainable, block, root = counts.trainable_params, counts.block_params, counts.root_params
    gathered = counts.params if not reshard_after_forward else root + 2 * block
    parts = {
        "weights_bytes": WEIGHT_BYTES * counts.params / ranks,
        "gradients_bytes": GRAD_BYTES * trainable / ranks,
        "optimizer_bytes": OPTIMIZER_BYTES[counts.optimizer] * trainable / ranks,
        "gathered_params_bytes": param_bytes * gathered,
        "gathered_grads_bytes": param_bytes * (root + block) + reduce_bytes * block,
        "activations_bytes": device_batch
        * checkpointed_activations(counts, checkpointing).bytes(precision),
    }
    gpu = counts.plan.device_type == "cuda"
    return ShardedMemory(**with_overheads(parts, gpu, memory_bytes))
