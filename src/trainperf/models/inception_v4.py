"""Inception-v4 (Szegedy et al. 2016, "Inception-v4, Inception-ResNet and the Impact of
Residual Connections on Learning"), following the TF-slim model and its timm port.

Stem (mixed 3a/4a/5a: 299 -> 35x35x384), 4 Inception-A, Reduction-A (-> 17x17x1024),
7 Inception-B, Reduction-B (-> 8x8x1536), 3 Inception-C, global average pool, linear
1536 -> classes. Every convolution is followed by batch norm (eps 0.001) and ReLU.
42,679,816 parameters for 1000 classes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from trainperf.models.layers import ConvBN
from trainperf.models.spec import image_classifier

NATURAL_SIZE = 299
# Smallest square input for which the stem's valid convolutions and the two reductions
# still leave a map (measured on the meta device).
MIN_SIZE = 75


def _conv_1xk(in_ch: int, out_ch: int, k: int) -> ConvBN:
    return ConvBN(in_ch, out_ch, kernel_size=(1, k), padding=(0, k // 2))


def _conv_kx1(in_ch: int, out_ch: int, k: int) -> ConvBN:
    return ConvBN(in_ch, out_ch, kernel_size=(k, 1), padding=(k // 2, 0))


def _pooled_proj(in_ch: int, out_ch: int) -> nn.Sequential:
    # TF-slim's "SAME" average pooling divides by the number of real pixels at the
    # border, hence count_include_pad=False.
    return nn.Sequential(
        nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
        ConvBN(in_ch, out_ch, kernel_size=1),
    )


class Parallel(nn.Module):
    """Branches applied to the same input, concatenated along channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([branch(x) for branch in self.branches], dim=1)


def stem() -> nn.Sequential:
    """299x299x3 -> 35x35x384; each mixed step joins a pooled and a convolved path."""
    return nn.Sequential(
        ConvBN(3, 32, kernel_size=3, stride=2),
        ConvBN(32, 32, kernel_size=3),
        ConvBN(32, 64, kernel_size=3, padding=1),
        Parallel(nn.MaxPool2d(3, stride=2), ConvBN(64, 96, kernel_size=3, stride=2)),  # 3a
        Parallel(  # 4a
            nn.Sequential(ConvBN(160, 64, kernel_size=1), ConvBN(64, 96, kernel_size=3)),
            nn.Sequential(
                ConvBN(160, 64, kernel_size=1),
                _conv_1xk(64, 64, 7),
                _conv_kx1(64, 64, 7),
                ConvBN(64, 96, kernel_size=3),
            ),
        ),
        Parallel(ConvBN(192, 192, kernel_size=3, stride=2), nn.MaxPool2d(3, stride=2)),  # 5a
    )


def inception_a() -> Parallel:
    """35x35 block, 384 -> 384 channels."""
    return Parallel(
        ConvBN(384, 96, kernel_size=1),
        nn.Sequential(ConvBN(384, 64, kernel_size=1), ConvBN(64, 96, kernel_size=3, padding=1)),
        nn.Sequential(
            ConvBN(384, 64, kernel_size=1),
            ConvBN(64, 96, kernel_size=3, padding=1),
            ConvBN(96, 96, kernel_size=3, padding=1),
        ),
        _pooled_proj(384, 96),
    )


def reduction_a() -> Parallel:
    """35x35x384 -> 17x17x1024."""
    return Parallel(
        ConvBN(384, 384, kernel_size=3, stride=2),
        nn.Sequential(
            ConvBN(384, 192, kernel_size=1),
            ConvBN(192, 224, kernel_size=3, padding=1),
            ConvBN(224, 256, kernel_size=3, stride=2),
        ),
        nn.MaxPool2d(3, stride=2),
    )


def inception_b() -> Parallel:
    """17x17 block, 1024 -> 1024 channels, 7x7 convolutions factorised into 1x7 and 7x1."""
    return Parallel(
        ConvBN(1024, 384, kernel_size=1),
        nn.Sequential(
            ConvBN(1024, 192, kernel_size=1), _conv_1xk(192, 224, 7), _conv_kx1(224, 256, 7)
        ),
        nn.Sequential(
            ConvBN(1024, 192, kernel_size=1),
            _conv_kx1(192, 192, 7),
            _conv_1xk(192, 224, 7),
            _conv_kx1(224, 224, 7),
            _conv_1xk(224, 256, 7),
        ),
        _pooled_proj(1024, 128),
    )


def reduction_b() -> Parallel:
    """17x17x1024 -> 8x8x1536."""
    return Parallel(
        nn.Sequential(ConvBN(1024, 192, kernel_size=1), ConvBN(192, 192, kernel_size=3, stride=2)),
        nn.Sequential(
            ConvBN(1024, 256, kernel_size=1),
            _conv_1xk(256, 256, 7),
            _conv_kx1(256, 320, 7),
            ConvBN(320, 320, kernel_size=3, stride=2),
        ),
        nn.MaxPool2d(3, stride=2),
    )


class SplitConv(Parallel):
    """A 1x3 and a 3x1 convolution side by side (the widened tips of Inception-C)."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__(_conv_1xk(in_ch, out_ch, 3), _conv_kx1(in_ch, out_ch, 3))


def inception_c() -> Parallel:
    """8x8 block, 1536 -> 1536 channels."""
    return Parallel(
        ConvBN(1536, 256, kernel_size=1),
        nn.Sequential(ConvBN(1536, 384, kernel_size=1), SplitConv(384, 256)),
        nn.Sequential(
            ConvBN(1536, 384, kernel_size=1),
            _conv_kx1(384, 448, 3),
            _conv_1xk(448, 512, 3),
            SplitConv(512, 256),
        ),
        _pooled_proj(1536, 256),
    )


class InceptionV4(nn.Module):
    """The Inception-v4 trunk and a linear classifier on its globally pooled features."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.0) -> None:
        super().__init__()
        self.features = nn.Sequential(
            stem(),
            *(inception_a() for _ in range(4)),
            reduction_a(),
            *(inception_b() for _ in range(7)),
            reduction_b(),
            *(inception_c() for _ in range(3)),
        )
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        # timm's default is no dropout (TF-slim keeps 0.8); the cost is the same either way.
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(1536, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.features(x)).flatten(1)
        return self.fc(self.dropout(x))


def inception_v4(num_classes: int = 1000, dropout: float = 0.0) -> InceptionV4:
    """Inception-v4 as timm builds it, with PyTorch's default initialisation."""
    return InceptionV4(num_classes=num_classes, dropout=dropout)


DESCRIPTION = "Inception-v4 as in TF-slim / timm (Szegedy 2016)"
SIZES = (NATURAL_SIZE, MIN_SIZE)
SPECS = [image_classifier("inception_v4", inception_v4, SIZES, DESCRIPTION, family="inception")]
