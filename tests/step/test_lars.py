"""LARS (trainperf.step.lars) against its formula worked by hand, and how make_optimizer
builds it: weights adapted and decayed, biases and norm weights plain SGD with momentum."""

import math

import pytest
import torch
from torch import nn

from trainperf import models
from trainperf.step.lars import LARS
from trainperf.step.training_step import make_optimizer

LR, MOMENTUM, WD, ETA = 2.0, 0.9, 0.1, 0.001


def tiny() -> nn.Linear:
    """A 2 -> 1 linear layer: weight [[3, 4]] (norm 5), bias [1]."""
    layer = nn.Linear(2, 1)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[3.0, 4.0]]))
        layer.bias.copy_(torch.tensor([1.0]))
    return layer


def set_grads(layer: nn.Linear) -> None:
    layer.weight.grad = torch.tensor([[0.6, 0.8]])  # norm 1
    layer.bias.grad = torch.tensor([0.5])


def test_one_step_is_the_formula_by_hand():
    layer = tiny()
    optimizer = make_optimizer(
        models.get("cifarnet"), layer, optimizer="lars", lr=LR, momentum=MOMENTUM, weight_decay=WD
    )
    assert isinstance(optimizer, LARS)
    set_grads(layer)
    optimizer.step()
    # trust = eta ||w|| / (||g|| + wd ||w||) = 0.001 * 5 / (1 + 0.1 * 5) = 1/300
    # v = lr * trust * (g + wd w) = 2/300 * [0.6 + 0.3, 0.8 + 0.4] = [0.006, 0.008]
    assert layer.weight.detach()[0].tolist() == pytest.approx([3 - 0.006, 4 - 0.008], abs=1e-6)
    # the bias is left out of the trust ratio and of weight decay: v = lr g = 1
    assert layer.bias.item() == pytest.approx(0.0, abs=1e-6)


def test_the_second_step_carries_the_momentum():
    layer = tiny()
    optimizer = make_optimizer(
        models.get("cifarnet"), layer, optimizer="lars", lr=LR, momentum=MOMENTUM, weight_decay=WD
    )
    for _ in range(2):
        set_grads(layer)
        optimizer.step()
    w1 = [3 - 0.006, 4 - 0.008]
    norm = math.hypot(*w1)
    trust = ETA * norm / (1 + WD * norm)
    v2 = [
        MOMENTUM * v + LR * trust * (g + WD * w)
        for v, g, w in zip([0.006, 0.008], [0.6, 0.8], w1, strict=True)
    ]
    expected = [w - v for w, v in zip(w1, v2, strict=True)]
    assert layer.weight.detach()[0].tolist() == pytest.approx(expected, abs=1e-6)
    assert layer.bias.item() == pytest.approx(0.0 - (MOMENTUM * 1.0 + LR * 0.5), abs=1e-6)


def test_a_zero_gradient_or_weight_takes_a_trust_ratio_of_one():
    weight = nn.Parameter(torch.zeros(2, 2))
    weight.grad = torch.ones(2, 2)
    LARS([weight], lr=0.5, momentum=0.0, weight_decay=0.1).step()
    assert weight.detach().tolist() == [[-0.5, -0.5], [-0.5, -0.5]]  # lr * (g + wd * 0)


def test_sgd_and_adamw_keep_their_settings():
    spec = models.get("cifarnet")
    sgd = make_optimizer(spec, tiny(), lr=0.1, momentum=0.5, weight_decay=0.01)
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.defaults["momentum"] == 0.5 and sgd.defaults["weight_decay"] == 0.01
    adamw = make_optimizer(spec, tiny(), optimizer="adamw", lr=0.1, weight_decay=0.01)
    assert isinstance(adamw, torch.optim.AdamW) and adamw.defaults["weight_decay"] == 0.01
    with pytest.raises(ValueError, match="not one of sgd, adamw, lars"):
        make_optimizer(spec, tiny(), optimizer="adam")
