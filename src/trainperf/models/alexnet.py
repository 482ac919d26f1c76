"""AlexNet, the single-tower variant that torchvision ships.

Krizhevsky et al. 2012 split the network over two GPUs; the one-tower form of
"One weird trick for parallelizing convolutional neural networks" (Krizhevsky 2014), with
64-192-384-256-256 convolution channels, is the one benchmarks measure. 61,100,840
parameters for 1000 classes.
"""

from __future__ import annotations

from torch import Tensor, nn

from trainperf.models.spec import image_classifier

NATURAL_SIZE = 224
# Smallest square input for which the three 3x3 stride-2 max poolings still see a window
# (measured on the meta device).
MIN_SIZE = 63


class AlexNet(nn.Module):
    """Five convolutions, three max poolings, a 6x6 adaptive pool, three linear layers."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        # 6x6 is what 224x224 gives; the adaptive pool keeps the classifier's input
        # (and its 37.7M-weight first layer) fixed for other sizes.
        self.pool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.features(x))
        return self.classifier(x.flatten(1))


def alexnet(num_classes: int = 1000, dropout: float = 0.5) -> AlexNet:
    """Single-tower AlexNet with PyTorch's default initialisation (as torchvision)."""
    return AlexNet(num_classes=num_classes, dropout=dropout)


DESCRIPTION = "AlexNet, single tower as in torchvision (Krizhevsky 2014)"
SPECS = [image_classifier("alexnet", alexnet, (NATURAL_SIZE, MIN_SIZE), DESCRIPTION)]
