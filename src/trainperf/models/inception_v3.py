"""Inception v3 (Szegedy et al. 2015, "Rethinking the Inception Architecture"), torchvision.

Every convolution is followed by batch norm (eps 0.001) and ReLU. The blocks go by
torchvision's letters: A (35x35), B (grid reduction to 17x17), C (17x17, factorised 7x7),
D (reduction to 8x8), E (8x8, the expanded 3x3 filter bank). 23,834,568 parameters for
1000 classes; 27,161,264 with the auxiliary classifier.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from trainperf.models.layers import ConvBN, truncated_normal_init
from trainperf.models.spec import SizeError, image_classifier

NATURAL_SIZE = 299
# Smallest square input for which the trunk's valid convolutions and stride-2 reductions
# still leave a map (measured on the meta device).
MIN_SIZE = 75
# The auxiliary head pools 5x5/3 and then applies a valid 5x5 convolution, so it needs a
# 17x17 map, which only inputs of this size or more give (measured).
AUX_MIN_SIZE = 299

# Weight of the auxiliary logits in the single tensor returned in training; torchvision's
# reference training script weights the auxiliary loss by 0.4.
AUX_WEIGHT = 0.4


def _avg_pool_3x3(x: Tensor) -> Tensor:
    return F.avg_pool2d(x, kernel_size=3, stride=1, padding=1)


class BlockA(nn.Module):
    """35x35 block: 1x1, 5x5, double 3x3 and pooled branches. Out: 224 + pool_ch."""

    def __init__(self, in_ch: int, pool_ch: int) -> None:
        super().__init__()
        self.b1x1 = ConvBN(in_ch, 64, kernel_size=1)
        self.b5x5 = nn.Sequential(
            ConvBN(in_ch, 48, kernel_size=1), ConvBN(48, 64, kernel_size=5, padding=2)
        )
        self.b3x3dbl = nn.Sequential(
            ConvBN(in_ch, 64, kernel_size=1),
            ConvBN(64, 96, kernel_size=3, padding=1),
            ConvBN(96, 96, kernel_size=3, padding=1),
        )
        self.pool_proj = ConvBN(in_ch, pool_ch, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        parts = [self.b1x1(x), self.b5x5(x), self.b3x3dbl(x), self.pool_proj(_avg_pool_3x3(x))]
        return torch.cat(parts, dim=1)


class BlockB(nn.Module):
    """Grid reduction 35 -> 17: strided 3x3, strided double 3x3, max pool. Out: 480 + in."""

    def __init__(self, in_ch: int) -> None:
        super().__init__()
        self.b3x3 = ConvBN(in_ch, 384, kernel_size=3, stride=2)
        self.b3x3dbl = nn.Sequential(
            ConvBN(in_ch, 64, kernel_size=1),
            ConvBN(64, 96, kernel_size=3, padding=1),
            ConvBN(96, 96, kernel_size=3, stride=2),
        )

    def forward(self, x: Tensor) -> Tensor:
        pooled = F.max_pool2d(x, kernel_size=3, stride=2)
        return torch.cat([self.b3x3(x), self.b3x3dbl(x), pooled], dim=1)


def _conv_1x7(in_ch: int, out_ch: int) -> ConvBN:
    return ConvBN(in_ch, out_ch, kernel_size=(1, 7), padding=(0, 3))


def _conv_7x1(in_ch: int, out_ch: int) -> ConvBN:
    return ConvBN(in_ch, out_ch, kernel_size=(7, 1), padding=(3, 0))


class BlockC(nn.Module):
    """17x17 block with 7x7 convolutions factorised into 1x7 and 7x1. Out: 768."""

    def __init__(self, in_ch: int, mid: int) -> None:
        super().__init__()
        self.b1x1 = ConvBN(in_ch, 192, kernel_size=1)
        self.b7x7 = nn.Sequential(
            ConvBN(in_ch, mid, kernel_size=1), _conv_1x7(mid, mid), _conv_7x1(mid, 192)
        )
        self.b7x7dbl = nn.Sequential(
            ConvBN(in_ch, mid, kernel_size=1),
            _conv_7x1(mid, mid),
            _conv_1x7(mid, mid),
            _conv_7x1(mid, mid),
            _conv_1x7(mid, 192),
        )
        self.pool_proj = ConvBN(in_ch, 192, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        parts = [self.b1x1(x), self.b7x7(x), self.b7x7dbl(x), self.pool_proj(_avg_pool_3x3(x))]
        return torch.cat(parts, dim=1)


class BlockD(nn.Module):
    """Grid reduction 17 -> 8: strided 3x3, 7x7-then-strided-3x3, max pool. Out: 512 + in."""

    def __init__(self, in_ch: int) -> None:
        super().__init__()
        self.b3x3 = nn.Sequential(
            ConvBN(in_ch, 192, kernel_size=1), ConvBN(192, 320, kernel_size=3, stride=2)
        )
        self.b7x7x3 = nn.Sequential(
            ConvBN(in_ch, 192, kernel_size=1),
            _conv_1x7(192, 192),
            _conv_7x1(192, 192),
            ConvBN(192, 192, kernel_size=3, stride=2),
        )

    def forward(self, x: Tensor) -> Tensor:
        pooled = F.max_pool2d(x, kernel_size=3, stride=2)
        return torch.cat([self.b3x3(x), self.b7x7x3(x), pooled], dim=1)


class _SplitConv(nn.Module):
    """A 1x3 and a 3x1 convolution side by side, concatenated (the widening of fig. 7)."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.wide = ConvBN(in_ch, out_ch, kernel_size=(1, 3), padding=(0, 1))
        self.tall = ConvBN(in_ch, out_ch, kernel_size=(3, 1), padding=(1, 0))

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.wide(x), self.tall(x)], dim=1)


class BlockE(nn.Module):
    """8x8 block with the 3x3 branches split into parallel 1x3 and 3x1. Out: 2048."""

    def __init__(self, in_ch: int) -> None:
        super().__init__()
        self.b1x1 = ConvBN(in_ch, 320, kernel_size=1)
        self.b3x3 = ConvBN(in_ch, 384, kernel_size=1)
        self.b3x3_split = _SplitConv(384, 384)
        self.b3x3dbl = nn.Sequential(
            ConvBN(in_ch, 448, kernel_size=1), ConvBN(448, 384, kernel_size=3, padding=1)
        )
        self.b3x3dbl_split = _SplitConv(384, 384)
        self.pool_proj = ConvBN(in_ch, 192, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        parts = [
            self.b1x1(x),
            self.b3x3_split(self.b3x3(x)),
            self.b3x3dbl_split(self.b3x3dbl(x)),
            self.pool_proj(_avg_pool_3x3(x)),
        ]
        return torch.cat(parts, dim=1)


class AuxHead(nn.Module):
    """Auxiliary classifier on the 17x17 map: 5x5/3 pool, 1x1 and 5x5 convs, linear."""

    def __init__(self, in_ch: int, num_classes: int) -> None:
        super().__init__()
        self.conv0 = ConvBN(in_ch, 128, kernel_size=1)
        self.conv1 = ConvBN(128, 768, kernel_size=5)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        if min(x.shape[-2:]) < 17:
            raise SizeError(
                f"inception_v3's auxiliary classifier needs a 17x17 map (input of "
                f"{AUX_MIN_SIZE} or more); got {tuple(x.shape[-2:])}"
            )
        x = F.avg_pool2d(x, kernel_size=5, stride=3)
        x = self.conv1(self.conv0(x))
        return self.fc(F.adaptive_avg_pool2d(x, (1, 1)).flatten(1))


class InceptionV3(nn.Module):
    """Inception v3 trunk; with ``aux_logits`` an auxiliary head used only in training.

    In training mode with the auxiliary head on, ``forward`` returns one tensor,
    ``main + 0.4 * aux``, instead of two: every training step of the zoo is
    ``loss(model(x), y)``, and summing logits runs the same layers as the reference's
    two-loss objective and sends gradients to both heads, so a step costs the same. The
    sum is a benchmarking device, not the paper's loss. In eval mode only the main logits return.
    """

    def __init__(self, num_classes: int = 1000, aux_logits: bool = False) -> None:
        super().__init__()
        # Valid (unpadded) convolutions shrink 299 to 35 by the first Inception block.
        self.stem = nn.Sequential(
            ConvBN(3, 32, kernel_size=3, stride=2),
            ConvBN(32, 32, kernel_size=3),
            ConvBN(32, 64, kernel_size=3, padding=1),
            nn.MaxPool2d(kernel_size=3, stride=2),
            ConvBN(64, 80, kernel_size=1),
            ConvBN(80, 192, kernel_size=3),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.grid35 = nn.Sequential(BlockA(192, 32), BlockA(256, 64), BlockA(288, 64))
        self.grid17 = nn.Sequential(
            BlockB(288),
            BlockC(768, mid=128),
            BlockC(768, mid=160),
            BlockC(768, mid=160),
            BlockC(768, mid=192),
        )
        self.aux = AuxHead(768, num_classes) if aux_logits else None
        self.grid8 = nn.Sequential(BlockD(768), BlockE(1280), BlockE(2048))
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=0.5)
        self.fc = nn.Linear(2048, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        # torchvision's scheme: truncated normals of std 0.1, narrower in the auxiliary
        # head (0.01 for its 5x5 conv, 0.001 for its linear layer) so that it starts
        # close to silent; batch norm as the identity.
        truncated_normal_init(self, std=0.1)
        if self.aux is not None:
            nn.init.trunc_normal_(self.aux.conv1.conv.weight, std=0.01, a=-2.0, b=2.0)
            nn.init.trunc_normal_(self.aux.fc.weight, std=0.001, a=-2.0, b=2.0)

    def forward(self, x: Tensor) -> Tensor:
        x = self.grid17(self.grid35(self.stem(x)))
        aux = self.aux(x) if self.training and self.aux is not None else None
        x = self.grid8(x)
        logits = self.fc(self.dropout(self.pool(x).flatten(1)))
        if aux is not None:
            logits = logits + AUX_WEIGHT * aux
        return logits


def inception_v3(num_classes: int = 1000, aux_logits: bool = False) -> InceptionV3:
    """Inception v3 as torchvision builds it (``transform_input=False``).

    With ``aux_logits`` training needs inputs of at least ``AUX_MIN_SIZE`` (299).
    """
    return InceptionV3(num_classes=num_classes, aux_logits=aux_logits)


DESCRIPTION = "Inception v3 as in torchvision (Szegedy 2015, Rethinking the Inception)"
SIZES = (NATURAL_SIZE, MIN_SIZE)
SPECS = [image_classifier("inception_v3", inception_v3, SIZES, DESCRIPTION, family="inception")]
