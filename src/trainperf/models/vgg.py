"""VGG (Simonyan & Zisserman 2014, "Very Deep Convolutional Networks") as in torchvision.

Configurations D (VGG16) and E (VGG19) of the paper's Table 1, without batch norm: stacks
of 3x3 convolutions separated by five 2x2 max poolings, a 7x7 adaptive pool, and three
linear layers (4096-4096-classes) with dropout. The first linear layer alone holds 103M of
the 138M (VGG16) parameters.
"""

from __future__ import annotations

from functools import partial

from torch import Tensor, nn

from trainperf.models.spec import image_classifier

NATURAL_SIZE = 224
# Five 2x2 stride-2 poolings need at least 2**5 pixels (measured on the meta device).
MIN_SIZE = 32

# Output channels of each 3x3 convolution, "M" for a 2x2 max pool.
CONFIGS: dict[str, list[int | str]] = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M"]
    + [512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M"]
    + [512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


def _features(config: list[int | str]) -> nn.Sequential:
    layers: list[nn.Module] = []
    in_ch = 3
    for item in config:
        if item == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            out_ch = int(item)
            layers += [nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
            in_ch = out_ch
    return nn.Sequential(*layers)


class VGG(nn.Module):
    """Convolution stacks, a 7x7 adaptive pool, a 4096-4096 classifier with dropout."""

    def __init__(
        self, config: list[int | str], num_classes: int = 1000, dropout: float = 0.5
    ) -> None:
        super().__init__()
        self.features = _features(config)
        # 7x7 is what 224x224 gives; the adaptive pool keeps the classifier's input fixed
        # for other sizes (it replicates the map when the input is smaller than 224).
        self.pool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, num_classes),
        )
        self._init_weights()

    def _init_weights(self) -> None:
        # torchvision's scheme: He initialisation by fan-out for the ReLU convolutions,
        # small normals (std 0.01) for the linear layers, zero biases.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.features(x))
        return self.classifier(x.flatten(1))


def vgg(variant: str, num_classes: int = 1000, dropout: float = 0.5) -> VGG:
    """The VGG named ``variant`` ("vgg16" or "vgg19"), without batch norm."""
    return VGG(CONFIGS[variant], num_classes=num_classes, dropout=dropout)


def _description(name: str) -> str:
    number = name.removeprefix("vgg")
    return f"VGG-{number} without batch norm as in torchvision (Simonyan & Zisserman 2014)"


SIZES = (NATURAL_SIZE, MIN_SIZE)
SPECS = [
    image_classifier(name, partial(vgg, name), SIZES, _description(name), family="vgg")
    for name in CONFIGS
]
