"""CifarNet: the small CIFAR-10 network of Caffe's ``cifar10_full`` example.

Three 5x5 convolutions (32, 32, 64 channels), each followed by a 3x3 stride-2 pooling
in ceil mode (32 -> 16 -> 8 -> 4), two local response normalisations, one linear layer
1024 -> 10. 89,578 parameters.
"""

from __future__ import annotations

from torch import Tensor, nn

from trainperf.models.spec import image_classifier

NATURAL_SIZE = 32
# Smallest square input that survives the three ceil-mode poolings (measured; below it
# the third pooling gets a 1x1 map and would produce an empty one).
MIN_SIZE = 8


def _lrn() -> nn.LocalResponseNorm:
    # Caffe's cifar10_full normalises over 3 neighbouring positions of one channel
    # (WITHIN_CHANNEL); torch only offers the across-channel variant. Both have no
    # parameters and cost about the same, which is what a benchmark needs.
    return nn.LocalResponseNorm(3, alpha=5e-5, beta=0.75)


class CifarNet(nn.Module):
    """Caffe ``cifar10_full`` with an adaptive pool before the classifier."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        # Caffe's order (pool before ReLU in the first stage, max then average pooling)
        # is kept so that the per-layer costs match the reference network.
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=5, padding=2),
            nn.MaxPool2d(3, stride=2, ceil_mode=True),
            nn.ReLU(inplace=True),
            _lrn(),
            nn.Conv2d(32, 32, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.AvgPool2d(3, stride=2, ceil_mode=True),
            _lrn(),
            nn.Conv2d(32, 64, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.AvgPool2d(3, stride=2, ceil_mode=True),
        )
        # The identity at 32x32; lets inputs smaller than the natural size reach the
        # classifier with the 4x4 map it was sized for.
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.classifier = nn.Linear(64 * 4 * 4, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.features(x))
        return self.classifier(x.flatten(1))


def cifarnet(num_classes: int = 10) -> CifarNet:
    """CifarNet for ``num_classes`` classes (10 for CIFAR-10)."""
    return CifarNet(num_classes=num_classes)


DESCRIPTION = "CifarNet, Caffe cifar10_full (3 conv 5x5 + LRN, linear 1024->10)"
SIZES = (NATURAL_SIZE, MIN_SIZE)
SPECS = [image_classifier("cifarnet", cifarnet, SIZES, DESCRIPTION, num_classes=10)]
