"""A model's repeated blocks, which FSDP2 shards and activation checkpointing wraps one by
one (``trainperf.parallel.fsdp``) and which the predictor counts (``trainperf.predict``):
the one definition of both, apart from the runtime that shards.

**Blocks.** The ``nn.ModuleList`` whose members are all of one class and which holds at
least half of the model's parameters (GPT-2's ``blocks``, BERT's encoder layers, Llama's
``layers``; not, say, a list of parallel branches inside one Inception module); with
several such lists, the one holding the most parameters. A model without one (the CNNs, a
user's network built otherwise) cannot be sharded or checkpointed block by block.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# activation_checkpointing: none, full (a block keeps only its input), selective (the
# outputs of SELECTIVE_SAVED_OPS are kept); trainperf.parallel.fsdp's module doc.
CHECKPOINTING = ("none", "full", "selective")
# The smallest share of a model's parameters its repeated blocks hold (module doc).
BLOCKS_MIN_SHARE = 0.5


class NoBlocks(ValueError):
    """A model without repeated blocks to shard or checkpoint one by one."""


def find_blocks(model: nn.Module) -> tuple[str, nn.ModuleList] | None:
    """(name, list) of the model's repeated blocks (module doc), or None."""

    def size(module: nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    candidates = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.ModuleList)
        and len(module) > 0
        and len({type(block) for block in module}) == 1
        and size(module) >= BLOCKS_MIN_SHARE * size(model)
    ]
    return max(candidates, key=lambda item: size(item[1]), default=None)


def blocks_of(model: nn.Module, model_name: str) -> nn.ModuleList:
    found = find_blocks(model)
    if found is None:
        raise NoBlocks(
            f"{model_name} has no repeated blocks (an nn.ModuleList of modules of one class "
            "holding most of its weights, as transformers hold their layers): parallel fsdp "
            "and activation checkpointing wrap those; use parallel ddp and "
            "activation_checkpointing none"
        )
    return found[1]


# Operators whose outputs selective checkpointing keeps (aten names): the matrix multiplies
# and the attention kernels of every backend (recomputing them would cost what
# checkpointing saves). trainperf.predict.memory counts what they keep from the same list.
SELECTIVE_SAVED_OPS = (
    "mm",
    "addmm",
    "bmm",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
)


def kept_op_packets() -> frozenset[Any]:
    """The aten operators (overload packets) of ``SELECTIVE_SAVED_OPS`` this torch has."""
    aten = torch.ops.aten
    return frozenset(getattr(aten, name) for name in SELECTIVE_SAVED_OPS if hasattr(aten, name))
