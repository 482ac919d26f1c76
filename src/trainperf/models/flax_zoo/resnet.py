"""ResNet in Flax NNX, the mirror of trainperf.models.resnet (torchvision's, bottlenecks v1.5).

The variants and their blocks are the PyTorch module's ``VARIANTS``: basic blocks (two 3x3
convolutions) for 18 and 34 layers, bottlenecks (1x1 -> 3x3 strided -> 1x1, 4x expansion)
for 50, 101 and 152. Convolutions have no bias; each is followed by batch norm with torch's
settings (momentum 0.1, i.e. Flax's 0.9; eps 1e-5); the shortcut is a 1x1 projection with
batch norm where the shape changes. Stem: 7x7/2 convolution, 3x3/2 max pool with padding 1.
A global average pool (torch's 1x1 adaptive pool) feeds the linear classifier.
torchvision's initialisation: He normal by fan-out for the convolutions, batch norm as the
identity, torch's default for the linear layer.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
from flax import nnx

from trainperf.models import resnet as torch_resnet
from trainperf.models.flax_zoo.layers import conv, linear, max_pool

CONV_INIT = {"kernel_init": nnx.initializers.variance_scaling(2.0, "fan_out", "normal")}


def _conv(in_ch: int, out_ch: int, kernel: int, stride: int, **layer: Any) -> nnx.Conv:
    padding = kernel // 2
    return conv(in_ch, out_ch, kernel, stride=stride, padding=padding, use_bias=False, **layer)


def _batch_norm(channels: int, *, dtype: Any, rngs: nnx.Rngs) -> nnx.BatchNorm:
    return nnx.BatchNorm(channels, momentum=0.9, epsilon=1e-5, dtype=dtype, rngs=rngs)


class ConvBN(nnx.Module):
    """A convolution without bias and its batch norm."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int = 1, **layer: Any):
        self.conv = _conv(in_ch, out_ch, kernel, stride, **CONV_INIT, **layer)
        self.bn = _batch_norm(out_ch, **layer)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.bn(self.conv(x))


class Shortcut(nnx.Module):
    """Identity, or a 1x1 projection with batch norm where the shape changes (option B)."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, **layer: Any) -> None:
        identity = stride == 1 and in_ch == out_ch
        self.projection = None if identity else ConvBN(in_ch, out_ch, 1, stride, **layer)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x if self.projection is None else self.projection(x)


class BasicBlock(nnx.Module):
    """Two 3x3 convolutions around the shortcut."""

    expansion = 1

    def __init__(self, in_ch: int, width: int, stride: int = 1, **layer: Any) -> None:
        self.first = ConvBN(in_ch, width, 3, stride, **layer)
        self.second = ConvBN(width, width, 3, **layer)
        self.shortcut = Shortcut(in_ch, width, stride, **layer)

    def __call__(self, x: jax.Array) -> jax.Array:
        out = self.second(jax.nn.relu(self.first(x)))
        return jax.nn.relu(out + self.shortcut(x))


class Bottleneck(nnx.Module):
    """1x1 reduce, 3x3 (strided here: v1.5), 1x1 expand by 4, plus the shortcut."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int = 1, **layer: Any) -> None:
        out_ch = width * self.expansion
        self.reduce = ConvBN(in_ch, width, 1, **layer)
        self.spatial = ConvBN(width, width, 3, stride, **layer)
        self.expand = ConvBN(width, out_ch, 1, **layer)
        self.shortcut = Shortcut(in_ch, out_ch, stride, **layer)

    def __call__(self, x: jax.Array) -> jax.Array:
        out = jax.nn.relu(self.reduce(x))
        out = self.expand(jax.nn.relu(self.spatial(out)))
        return jax.nn.relu(out + self.shortcut(x))


# The Flax block of each PyTorch block class.
BLOCKS = {torch_resnet.BasicBlock: BasicBlock, torch_resnet.Bottleneck: Bottleneck}


class ResNet(nnx.Module):
    """Stem (7x7/2 conv, 3x3/2 max pool), four stages of blocks, global pool, linear."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        depths: tuple[int, int, int, int],
        num_classes: int,
        *,
        dtype: Any,
        rngs: nnx.Rngs,
    ) -> None:
        layer = {"dtype": dtype, "rngs": rngs}
        self.stem = ConvBN(3, 64, 7, 2, **layer)
        blocks = []
        in_ch = 64
        for i, depth in enumerate(depths):
            width = 64 * 2**i
            # The first stage follows the max pool and keeps the resolution.
            stride = 1 if i == 0 else 2
            for j in range(depth):
                blocks.append(block(in_ch, width, stride if j == 0 else 1, **layer))
                in_ch = width * block.expansion
        self.blocks = nnx.Sequential(*blocks)
        self.fc = linear(in_ch, num_classes, **layer)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = max_pool(jax.nn.relu(self.stem(x)), 3, 2, padding=1)
        return self.fc(self.blocks(x).mean(axis=(1, 2)))


def resnet(variant: str, num_classes: int = 1000, *, dtype: Any, rngs: nnx.Rngs) -> ResNet:
    """The ResNet named ``variant`` (a key of trainperf.models.resnet.VARIANTS)."""
    torch_block, depths = torch_resnet.VARIANTS[variant]
    return ResNet(BLOCKS[torch_block], depths, num_classes, dtype=dtype, rngs=rngs)


MODELS = {name: partial(resnet, name) for name in torch_resnet.VARIANTS}
