"""The Flax NNX zoo: the JAX versions of trainperf.models' networks, by the same names.

Each family module mirrors its PyTorch module layer for layer (same parameter counts, same
convolution and matmul shapes, so the same FLOPs; trainperf.models.flax_zoo.layers gives torch's
pooling, LRN and attention semantics) and lists its networks in ``MODELS``; this file
joins them by hand, as trainperf.models does. One difference, which changes no parameter
and no matmul: images are NHWC, so the classifier's flattened input is ordered height,
width, channel instead of channel, height, width.

``build(name, dtype=..., rngs=...)`` returns the module in training mode; ``dtype`` is the
computation dtype (bfloat16 for mixed precision) and parameters stay float32 (Flax's
``param_dtype`` default). ``model.train()``/``model.eval()`` switch dropout and batch norm.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from trainperf import models as torch_zoo
from trainperf.models.flax_zoo import alexnet, bert, cifarnet, gpt2, resnet, vgg
from trainperf.models.spec import ImageClassification

_FAMILIES = (cifarnet, alexnet, resnet, vgg, bert, gpt2)
_FACTORIES: dict[str, Callable[..., nnx.Module]] = {
    name: factory for family in _FAMILIES for name, factory in family.MODELS.items()
}


class NoFlaxModel(ValueError):
    """A model name with no Flax version (a PyTorch-only zoo model, or no model at all)."""


def names() -> list[str]:
    """Zoo names that have a Flax version, in the order of the PyTorch registry."""
    return [name for name in torch_zoo.names() if name in _FACTORIES]


def has(name: str) -> bool:
    return name in _FACTORIES


def check_model(name: str) -> None:
    """Raise ``NoFlaxModel`` (one line, naming those there are) unless ``name`` has a
    Flax version."""
    if name not in _FACTORIES:
        raise NoFlaxModel(
            f"model '{name}' has no Flax version (framework jax): available {', '.join(names())}"
        )


def build(name: str, *, dtype: Any = jnp.float32, rngs: nnx.Rngs) -> nnx.Module:
    """The Flax network ``name``, initialised from ``rngs`` (streams ``params`` and
    ``dropout``), computing in ``dtype``; its task's options (an image classifier's
    ``num_classes``) are those of the PyTorch spec."""
    check_model(name)
    task = torch_zoo.get(name).task
    options = {"num_classes": task.num_classes} if isinstance(task, ImageClassification) else {}
    return _FACTORIES[name](**options, dtype=dtype, rngs=rngs)


def abstract(name: str) -> nnx.Module:
    """The float32 network ``name`` under ``nnx.eval_shape``: shapes and dtypes, no weights
    (for counting parameters and FLOPs of the largest models for free)."""
    return nnx.eval_shape(lambda: build(name, rngs=nnx.Rngs(0)))


def count_params(module: nnx.Module) -> int:
    """Elements of the module's ``nnx.Param`` variables: batch-norm statistics and RNG state
    excluded, as torch's ``parameters()``; a shared (tied) parameter counts once."""
    leaves = jax.tree.leaves(nnx.state(module, nnx.Param))
    return sum(math.prod(leaf.shape) for leaf in leaves)
