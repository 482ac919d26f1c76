"""Building blocks shared by the zoo's Inception-family networks (GoogLeNet, Inception v3
and v4), and their initialisation, as torchvision and timm write them."""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F


class ConvBN(nn.Module):
    """Convolution without bias, batch norm (eps 0.001, TF-slim's value), ReLU."""

    def __init__(self, in_ch: int, out_ch: int, **conv: int | tuple[int, int]) -> None:
        super().__init__()
        # A bias would be cancelled by the batch norm's shift.
        self.conv = nn.Conv2d(in_ch, out_ch, bias=False, **conv)
        self.bn = nn.BatchNorm2d(out_ch, eps=0.001)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv(x)), inplace=True)


def truncated_normal_init(model: nn.Module, std: float) -> None:
    """torchvision's scheme for GoogLeNet and Inception v3: conv and linear weights from a
    normal of ``std`` truncated at ±2 (absolute), batch norm as the identity."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            nn.init.trunc_normal_(m.weight, mean=0.0, std=std, a=-2.0, b=2.0)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
