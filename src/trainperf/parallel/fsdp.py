"""Sharded data parallelism (FSDP2) and activation checkpointing of a model's blocks.

**Blocks.** Both work on a transformer's repeated blocks (``trainperf.models.blocks``, which
the predictor counts too). A model without them (the CNNs, a user's network built
otherwise) cannot be wrapped this way, and a case asking for it is refused
(``trainperf.case.spec``; a user's network is probed in a child process,
``trainperf.models.blocks.probe_blocks``, so
that its code never runs in trainperf's own process).

**Sharding** (PyTorch FSDP2, ``torch.distributed.fsdp.fully_shard``; the layout of
torchtitan): each block is sharded on its own, then the root takes the parameters left
(embeddings, final norm, output layer). Every parameter is split along dim 0 over the ranks
(a DTensor); before a block's forward its parameters are all-gathered, after it they are
freed again when ``reshard_after_forward`` (then gathered once more for the backward), and
each block's gradients are reduce-scattered as its backward ends: per step 3× the blocks'
sharded parameter bytes travel (ZeRO stage 3, Rajbhandari et al., SC20), 2× without
resharding. The root keeps FSDP2's default, ``reshard_after_forward=None``: not resharded
after its forward, since the backward needs its parameters (the output layer's) at once,
as PyTorch's documentation advises and torchtitan does; its parameters travel twice
(all-gather, reduce-scatter) whatever the case's choice for the blocks.
Under precision bf16 the policy is ``MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32 or bf16)``: the gathered copies and the compute are bf16, the sharded
parameters and optimizer state fp32 (torchtitan's default).

**Activation checkpointing** (Chen et al. 2016, "Training deep nets with sublinear memory
cost"), ``torch.utils.checkpoint`` non-reentrant, per block:
- ``full``: a block keeps only its input; its forward runs again in the backward (about a
  third more FLOPs);
- ``selective``: the outputs of the compute-bound operators (matrix multiplies, attention)
  are kept and only the cheap memory-bound ones (norms, activations, rotary embeddings,
  residual additions) are recomputed (Korthikanti et al. 2022, "Reducing activation
  recomputation in large transformer models", whose selective scheme torchtitan's per-op
  policy follows).

**Exposed communication** of a sharded step is measured as DDP's is (step time minus the
same step without communication, ``trainperf.step.rank_case``): ``local_collectives``
swaps FSDP's all-gather (then its reduce-scatter) for a local copy of the same bytes, so
every shape, kernel and allocation of the step stays and only the network is gone. The
copy fills every rank's slot with this rank's shard, which keeps the weights finite but
wrong: it runs after everything else of the case is measured.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from trainperf.models.blocks import (
    blocks_of,
    kept_op_packets,
)


def _compute_bound_ops() -> set[Any]:
    return {packet.default for packet in kept_op_packets()}


def _selective_policy(saved: set[Any], ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in saved else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_context() -> Any:
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    policy = functools.partial(_selective_policy, _compute_bound_ops())
    return create_selective_checkpoint_contexts(policy)


def has_dropout(module: nn.Module) -> bool:
    """Whether ``module`` draws random numbers in training: a dropout layer with p > 0, or a
    module that passes a ``dropout_p`` > 0 to attention (the zoo's GPT-2 and BERT)."""
    return any(
        (isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0) or getattr(m, "dropout_p", 0) > 0
        for m in module.modules()
    )


def apply_checkpointing(model: nn.Module, mode: str, model_name: str) -> None:
    """Wrap each block of ``model`` for ``mode`` (``none`` leaves it as it is).

    A block with dropout is recomputed with the random state its forward had
    (``preserve_rng_state``): otherwise the recomputation draws other masks and the
    gradients are not those of the model. Saving and restoring that state costs a copy of
    the generators' state per block (on a GPU, the CUDA generator's), so a block that
    draws nothing (Llama's) skips it."""
    if mode == "none":
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    blocks = blocks_of(model, model_name)
    options: dict[str, Any] = {"preserve_rng_state": has_dropout(blocks)}
    if mode == "selective":
        options["context_fn"] = _selective_context
    for index, block in enumerate(blocks):
        blocks[index] = checkpoint_wrapper(block, **options)


def mixed_precision(precision: str, reduce: str) -> Any:
    """FSDP2's policy for the case's precision: bf16 gathers and computes in bf16 and
    reduce-scatters in ``reduce`` (fp32 or bf16); the other precisions keep fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision != "bf16":
        return MixedPrecisionPolicy()
    reduce_dtype = torch.float32 if reduce == "fp32" else torch.bfloat16
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)


def shard(
    model: nn.Module,
    model_name: str,
    *,
    precision: str,
    reduce: str,
    reshard_after_forward: bool,
    device: torch.device,
) -> nn.Module:
    """``model`` sharded over the default process group: each block (resharded after its
    forward as the case says), then the root with the library's default (module doc)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    options = {"mesh": mesh, "mp_policy": mixed_precision(precision, reduce)}
    for block in blocks_of(model, model_name):
        fully_shard(block, **options, reshard_after_forward=reshard_after_forward)
    return fully_shard(model, **options)


class _LocalAllGather:
    """An all-gather without the network: every slot of the output gets this rank's input."""

    def allocate(self, size: Any, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(
        self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any, async_op=False
    ) -> None:
        slots = output_tensor.view(group.size(), -1)
        slots.copy_(input_tensor.view(1, -1).expand_as(slots))


class _LocalReduceScatter(_LocalAllGather):
    """A reduce-scatter without the network: the output is this rank's chunk of the input."""

    def __call__(  # type: ignore[override]
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: Any,
        op: Any = None,
        async_op: bool = False,
    ) -> None:
        output_tensor.copy_(input_tensor.view(group.size(), -1)[group.rank()])


def local_collectives(model: nn.Module, *, all_gather: bool, reduce_scatter: bool) -> None:
    """Replace the sharded modules' all-gather and/or reduce-scatter by local copies
    (module doc: for measuring the step without communication; it spoils the weights)."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            if all_gather:
                module.set_custom_all_gather(_LocalAllGather())
            if reduce_scatter:
                module.set_custom_reduce_scatter(_LocalReduceScatter())
