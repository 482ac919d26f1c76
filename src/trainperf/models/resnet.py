"""ResNet (He et al. 2015, "Deep Residual Learning for Image Recognition") as in torchvision.

The deeper variants are "v1.5": the bottleneck downsamples in its 3x3 convolution rather
than in its first 1x1, as the paper had it. Same parameter count, about 5% more compute,
and it is what torchvision and MLPerf train. 18 and 34 layers use basic blocks (two 3x3
convolutions), 50, 101 and 152 bottlenecks (1x1 -> 3x3 -> 1x1, 4x expansion).
"""

from __future__ import annotations

from functools import partial

from torch import Tensor, nn

from trainperf.models.spec import image_classifier

NATURAL_SIZE = 224
# Every convolution and the stem's max pool are padded, so even a 1x1 input leaves a 1x1
# map for the adaptive pool (measured on the meta device). Training with one image per
# batch still needs more than 1x1 in the last stage (inputs of 33 or more) for batch norm.
MIN_SIZE = 1


def _conv3x3(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions around an identity (or 1x1 projection) shortcut."""

    expansion = 1

    def __init__(self, in_ch: int, width: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_ch, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = _shortcut(in_ch, width * self.expansion, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided here: v1.5), 1x1 expand by 4, plus the shortcut."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = _conv1x1(in_ch, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, out_ch)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = _shortcut(in_ch, out_ch, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.shortcut(x))


def _shortcut(in_ch: int, out_ch: int, stride: int) -> nn.Module:
    # Projection (option B of the paper) only where the shape changes; identity elsewhere.
    if stride == 1 and in_ch == out_ch:
        return nn.Identity()
    return nn.Sequential(_conv1x1(in_ch, out_ch, stride), nn.BatchNorm2d(out_ch))


Block = type[BasicBlock] | type[Bottleneck]


class ResNet(nn.Module):
    """Stem (7x7/2 conv, 3x3/2 max pool), four stages of blocks, global pool, linear."""

    def __init__(self, block: Block, depths: tuple[int, int, int, int], num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        stages = []
        in_ch = 64
        for i, depth in enumerate(depths):
            width = 64 * 2**i
            # The first stage follows the max pool and keeps the resolution.
            stride = 1 if i == 0 else 2
            blocks = []
            for j in range(depth):
                blocks.append(block(in_ch, width, stride if j == 0 else 1))
                in_ch = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_ch, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        # torchvision's scheme: He initialisation scaled by fan-out for the ReLU that
        # follows each convolution, batch norm as the identity; linear keeps its default.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stages(self.stem(x))
        return self.fc(self.pool(x).flatten(1))


# name -> (block, blocks per stage), Table 1 of the paper.
VARIANTS: dict[str, tuple[Block, tuple[int, int, int, int]]] = {
    "resnet18": (BasicBlock, (2, 2, 2, 2)),
    "resnet34": (BasicBlock, (3, 4, 6, 3)),
    "resnet50": (Bottleneck, (3, 4, 6, 3)),
    "resnet101": (Bottleneck, (3, 4, 23, 3)),
    "resnet152": (Bottleneck, (3, 8, 36, 3)),
}


def resnet(variant: str, num_classes: int = 1000) -> ResNet:
    """The ResNet named ``variant`` (a key of ``VARIANTS``)."""
    block, depths = VARIANTS[variant]
    return ResNet(block, depths, num_classes)


def _description(name: str, block: type[nn.Module]) -> str:
    version = " v1.5" if block is Bottleneck else ""
    return f"ResNet-{name.removeprefix('resnet')}{version} as in torchvision (He 2015)"


SIZES = (NATURAL_SIZE, MIN_SIZE)
SPECS = [
    image_classifier(name, partial(resnet, name), SIZES, _description(name, block), family="resnet")
    for name, (block, _) in VARIANTS.items()
]
