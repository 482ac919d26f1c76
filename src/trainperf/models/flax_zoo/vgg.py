"""VGG in Flax NNX, the mirror of trainperf.models.vgg (configurations D and E, no batch norm).

The convolution plan is the PyTorch module's ``CONFIGS`` itself (3x3 convolutions with
padding 1, "M" a 2x2 stride-2 max pool); then a 7x7 adaptive average pool and the
4096-4096-classes classifier with dropout 0.5 after each hidden layer. torchvision's
initialisation: He normal by fan-out for the convolutions, N(0, 0.01) for the linear
layers, zero biases.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
from flax import nnx

from trainperf.models.flax_zoo.layers import adaptive_avg_pool, conv, linear, max_pool
from trainperf.models.vgg import CONFIGS

CLASSIFIER_MAP = 7
CONV_INIT = {
    "kernel_init": nnx.initializers.variance_scaling(2.0, "fan_out", "normal"),
    "bias_init": nnx.initializers.zeros_init(),
}
LINEAR_INIT = {
    "kernel_init": nnx.initializers.normal(0.01),
    "bias_init": nnx.initializers.zeros_init(),
}


def _features(config: list[int | str], *, dtype: Any, rngs: nnx.Rngs) -> nnx.Sequential:
    layers: list[Any] = []
    in_ch = 3
    for item in config:
        if item == "M":
            layers.append(partial(max_pool, kernel=2, stride=2))
        else:
            out_ch = int(item)
            convolution = conv(in_ch, out_ch, 3, padding=1, dtype=dtype, rngs=rngs, **CONV_INIT)
            layers += [convolution, jax.nn.relu]
            in_ch = out_ch
    return nnx.Sequential(*layers)


class VGG(nnx.Module):
    """Convolution stacks, a 7x7 adaptive pool, a 4096-4096 classifier with dropout."""

    def __init__(
        self,
        config: list[int | str],
        num_classes: int = 1000,
        dropout: float = 0.5,
        *,
        dtype: Any,
        rngs: nnx.Rngs,
    ) -> None:
        self.features = _features(config, dtype=dtype, rngs=rngs)
        dense = partial(linear, dtype=dtype, rngs=rngs, **LINEAR_INIT)
        self.classifier = nnx.Sequential(
            dense(512 * CLASSIFIER_MAP**2, 4096),
            jax.nn.relu,
            nnx.Dropout(dropout, rngs=rngs),
            dense(4096, 4096),
            jax.nn.relu,
            nnx.Dropout(dropout, rngs=rngs),
            dense(4096, num_classes),
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        x = adaptive_avg_pool(self.features(x), CLASSIFIER_MAP)
        return self.classifier(x.reshape(x.shape[0], -1))


def vgg(variant: str, num_classes: int = 1000, *, dtype: Any, rngs: nnx.Rngs) -> VGG:
    """The VGG named ``variant`` (a key of trainperf.models.vgg.CONFIGS)."""
    return VGG(CONFIGS[variant], num_classes, dtype=dtype, rngs=rngs)


MODELS = {name: partial(vgg, name) for name in CONFIGS}
