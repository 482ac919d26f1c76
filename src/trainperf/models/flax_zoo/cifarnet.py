"""CifarNet in Flax NNX, the mirror of trainperf.models.cifarnet (89,578 parameters).

Three 5x5 convolutions (32, 32, 64 channels) in Caffe's order: max pool then ReLU in the
first stage, ReLU then average pool in the others, all 3x3 stride 2 in ceil mode; two
across-channel LRNs of size 3 (torch's ``nn.LocalResponseNorm(3, alpha=5e-5, beta=0.75)``);
a 4x4 adaptive average pool (the identity at 32x32); one linear layer 1024 -> classes.
torch's default initialisation, as the PyTorch network keeps.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

from trainperf.models.flax_zoo.layers import (
    adaptive_avg_pool,
    avg_pool,
    conv,
    linear,
    local_response_norm,
    max_pool,
)

# torch's LRN in trainperf.models.cifarnet; k keeps torch's default 1.
LRN_SIZE, LRN_ALPHA, LRN_BETA = 3, 5e-5, 0.75
CLASSIFIER_MAP = 4


def _lrn(x: jax.Array) -> jax.Array:
    return local_response_norm(x, LRN_SIZE, LRN_ALPHA, LRN_BETA)


class CifarNet(nnx.Module):
    """Caffe ``cifar10_full`` with an adaptive pool before the classifier."""

    def __init__(self, num_classes: int = 10, *, dtype: Any, rngs: nnx.Rngs) -> None:
        self.conv1 = conv(3, 32, 5, padding=2, dtype=dtype, rngs=rngs)
        self.conv2 = conv(32, 32, 5, padding=2, dtype=dtype, rngs=rngs)
        self.conv3 = conv(32, 64, 5, padding=2, dtype=dtype, rngs=rngs)
        self.classifier = linear(64 * CLASSIFIER_MAP**2, num_classes, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = _lrn(jax.nn.relu(max_pool(self.conv1(x), 3, 2, ceil_mode=True)))
        x = _lrn(avg_pool(jax.nn.relu(self.conv2(x)), 3, 2, ceil_mode=True))
        x = avg_pool(jax.nn.relu(self.conv3(x)), 3, 2, ceil_mode=True)
        x = adaptive_avg_pool(x, CLASSIFIER_MAP)
        return self.classifier(x.reshape(x.shape[0], -1))


MODELS = {"cifarnet": CifarNet}
