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

import functools
import json
import subprocess
import sys
from typing import Any

import torch
from torch import nn

# activation_checkpointing: none, full (a block keeps only its input), selective (the
# outputs of SELECTIVE_SAVED_OPS are kept); trainperf.parallel.fsdp's module doc.
CHECKPOINTING = ("none", "full", "selective")
# The smallest share of a model's parameters its repeated blocks hold (module doc).
BLOCKS_MIN_SHARE = 0.5
# How long a user's network may take to be built on the meta device (blocks_refusal).
PROBE_TIMEOUT_S = 120.0


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


def blocks_refusal(model_name: str) -> str | None:
    """Why ``model_name`` cannot be sharded or checkpointed block by block, or None. A zoo
    model is built on the meta device here (once per name); a user's network is probed."""
    from trainperf import models

    if models.is_custom_reference(model_name):
        return probe_blocks(model_name)
    return _zoo_blocks_refusal(model_name)


@functools.lru_cache(maxsize=64)
def _zoo_blocks_refusal(model_name: str) -> str | None:
    from trainperf import models

    model = models.get(model_name).build_on_meta()
    try:
        blocks_of(model, model_name)
    except NoBlocks as exc:
        return str(exc)
    return None


def probe_blocks(reference: str) -> str | None:
    """For a user's network (``module:function``): the refusal line when it has no
    repeated blocks, else None. The function runs in a child process on the meta device
    (module doc); when the child fails (the user's code raises, hangs, crashes) nothing is
    decided here and the case's worker meets the failure and records it."""
    command = [sys.executable, "-m", "trainperf.models.blocks", reference]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
        answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return None
    return answer.get("refusal")


def _probe_main(reference: str) -> None:
    from trainperf import models

    model = models.get(reference).build_on_meta()
    try:
        blocks_of(model, reference)
        refusal = None
    except NoBlocks as exc:
        refusal = str(exc)
    print(json.dumps({"refusal": refusal}))


if __name__ == "__main__":
    _probe_main(sys.argv[1])
