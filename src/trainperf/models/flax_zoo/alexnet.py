"""AlexNet in Flax NNX, the mirror of trainperf.models.alexnet (61,100,840 parameters).

The single tower of torchvision: five convolutions (64-192-384-256-256 channels), three
3x3 stride-2 max poolings (floor mode), a 6x6 adaptive average pool, then dropout 0.5 ->
linear 9216 -> 4096 -> ReLU -> dropout -> 4096 -> 4096 -> ReLU -> classes. torch's
default initialisation, as torchvision keeps.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
from flax import nnx

from trainperf.models.flax_zoo.layers import adaptive_avg_pool, conv, linear, max_pool

CLASSIFIER_MAP = 6


class AlexNet(nnx.Module):
    """Five convolutions, three max poolings, a 6x6 adaptive pool, three linear layers."""

    def __init__(
        self, num_classes: int = 1000, dropout: float = 0.5, *, dtype: Any, rngs: nnx.Rngs
    ) -> None:
        layer = {"dtype": dtype, "rngs": rngs}
        pool = partial(max_pool, kernel=3, stride=2)
        relu = jax.nn.relu
        self.features = nnx.Sequential(
            conv(3, 64, 11, stride=4, padding=2, **layer),
            relu,
            pool,
            conv(64, 192, 5, padding=2, **layer),
            relu,
            pool,
            conv(192, 384, 3, padding=1, **layer),
            relu,
            conv(384, 256, 3, padding=1, **layer),
            relu,
            conv(256, 256, 3, padding=1, **layer),
            relu,
            pool,
        )
        self.classifier = nnx.Sequential(
            nnx.Dropout(dropout, rngs=rngs),
            linear(256 * CLASSIFIER_MAP**2, 4096, **layer),
            relu,
            nnx.Dropout(dropout, rngs=rngs),
            linear(4096, 4096, **layer),
            relu,
            linear(4096, num_classes, **layer),
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        x = adaptive_avg_pool(self.features(x), CLASSIFIER_MAP)
        return self.classifier(x.reshape(x.shape[0], -1))


MODELS = {"alexnet": AlexNet}
