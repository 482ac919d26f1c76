"""GoogLeNet (Inception v1, Szegedy et al. 2014) in the form torchvision ships.

torchvision's version differs from the paper in ways that change the cost, and the zoo
follows torchvision because that is what benchmarks measure: batch normalisation after
every convolution (eps 0.001, convolutions without bias), and a 3x3 convolution where the
paper's "5x5" branch is. 6,624,904 parameters for 1000 classes; 13,004,888 with the two
auxiliary classifiers.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from trainperf.models.layers import ConvBN, truncated_normal_init
from trainperf.models.spec import image_classifier

NATURAL_SIZE = 224
# Smallest square input that survives the four ceil-mode stride-2 poolings (measured on
# the meta device). The auxiliary heads pool adaptively, so they do not raise it.
MIN_SIZE = 15

# Weight of each auxiliary head's logits in the single tensor returned in training; the
# paper weights their losses by 0.3.
AUX_WEIGHT = 0.3


class Inception(nn.Module):
    """Four parallel branches concatenated along channels: 1x1, 3x3, "5x5", pooled 1x1."""

    def __init__(
        self, in_ch: int, c1: int, c3_red: int, c3: int, c5_red: int, c5: int, pool_proj: int
    ) -> None:
        super().__init__()
        self.branch1 = ConvBN(in_ch, c1, kernel_size=1)
        self.branch2 = nn.Sequential(
            ConvBN(in_ch, c3_red, kernel_size=1), ConvBN(c3_red, c3, kernel_size=3, padding=1)
        )
        # A 3x3 kernel, not the paper's 5x5: torchvision's choice, kept for equal counts.
        self.branch3 = nn.Sequential(
            ConvBN(in_ch, c5_red, kernel_size=1), ConvBN(c5_red, c5, kernel_size=3, padding=1)
        )
        self.branch4 = nn.Sequential(
            nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=True),
            ConvBN(in_ch, pool_proj, kernel_size=1),
        )

    def forward(self, x: Tensor) -> Tensor:
        branches = (self.branch1, self.branch2, self.branch3, self.branch4)
        return torch.cat([branch(x) for branch in branches], dim=1)


class AuxHead(nn.Module):
    """Auxiliary classifier on an intermediate map: 4x4 pool, 1x1 conv, two linear layers."""

    def __init__(self, in_ch: int, num_classes: int, dropout: float = 0.7) -> None:
        super().__init__()
        # Adaptive rather than the paper's 5x5 stride-3 pool, so that any input size that
        # the trunk accepts also works here (at 224 both give 4x4).
        self.pool = nn.AdaptiveAvgPool2d((4, 4))
        self.conv = ConvBN(in_ch, 128, kernel_size=1)
        self.fc1 = nn.Linear(128 * 4 * 4, 1024)
        self.dropout = nn.Dropout(p=dropout)
        self.fc2 = nn.Linear(1024, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(self.pool(x)).flatten(1)
        return self.fc2(self.dropout(F.relu(self.fc1(x), inplace=True)))


class GoogLeNet(nn.Module):
    """Inception v1 trunk; with ``aux_logits`` two auxiliary heads used only in training.

    In training mode with the auxiliary heads on, ``forward`` returns one tensor,
    ``main + 0.3 * (aux1 + aux2)``, instead of three: every training step of the zoo is
    ``loss(model(x), y)``, and summing logits runs the same layers as the reference's
    three-loss objective and sends gradients to every head, so a step costs the same.
    The sum is a benchmarking device, not the paper's loss. In eval mode only the main
    logits return.
    """

    def __init__(self, num_classes: int = 1000, aux_logits: bool = False) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            ConvBN(3, 64, kernel_size=7, stride=2, padding=3),
            nn.MaxPool2d(3, stride=2, ceil_mode=True),
            ConvBN(64, 64, kernel_size=1),
            ConvBN(64, 192, kernel_size=3, padding=1),
            nn.MaxPool2d(3, stride=2, ceil_mode=True),
        )
        self.stage3 = nn.Sequential(
            Inception(192, 64, 96, 128, 16, 32, 32),
            Inception(256, 128, 128, 192, 32, 96, 64),
            nn.MaxPool2d(3, stride=2, ceil_mode=True),
        )
        # Stage 4 is split where the auxiliary heads tap it: after 4a and after 4d.
        self.inception4a = Inception(480, 192, 96, 208, 16, 48, 64)
        self.stage4_mid = nn.Sequential(
            Inception(512, 160, 112, 224, 24, 64, 64),
            Inception(512, 128, 128, 256, 24, 64, 64),
            Inception(512, 112, 144, 288, 32, 64, 64),
        )
        self.stage4_end = nn.Sequential(
            Inception(528, 256, 160, 320, 32, 128, 128),
            nn.MaxPool2d(2, stride=2, ceil_mode=True),
        )
        self.stage5 = nn.Sequential(
            Inception(832, 256, 160, 320, 32, 128, 128),
            Inception(832, 384, 192, 384, 48, 128, 128),
        )
        self.aux1 = AuxHead(512, num_classes) if aux_logits else None
        self.aux2 = AuxHead(528, num_classes) if aux_logits else None
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=0.2)
        self.fc = nn.Linear(1024, num_classes)
        truncated_normal_init(self, std=0.01)

    def forward(self, x: Tensor) -> Tensor:
        x = self.inception4a(self.stage3(self.stem(x)))
        use_aux = self.training and self.aux1 is not None and self.aux2 is not None
        aux1 = self.aux1(x) if use_aux else None
        x = self.stage4_mid(x)
        aux2 = self.aux2(x) if use_aux else None
        x = self.stage5(self.stage4_end(x))
        logits = self.fc(self.dropout(self.pool(x).flatten(1)))
        if aux1 is not None and aux2 is not None:
            logits = logits + AUX_WEIGHT * (aux1 + aux2)
        return logits


def googlenet(num_classes: int = 1000, aux_logits: bool = False) -> GoogLeNet:
    """GoogLeNet as torchvision builds it (``transform_input=False``)."""
    return GoogLeNet(num_classes=num_classes, aux_logits=aux_logits)


DESCRIPTION = "GoogLeNet / Inception v1 with batch norm, as in torchvision (Szegedy 2014)"
SPECS = [image_classifier("googlenet", googlenet, (NATURAL_SIZE, MIN_SIZE), DESCRIPTION)]
