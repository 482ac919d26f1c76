"""LARS: layer-wise adaptive rate scaling on SGD with momentum (You, Gitman and Ginsburg,
"Large Batch Training of Convolutional Networks", 2017), as MLPerf's reference ResNet-50
trains with it. No installed library gives it for torch (optax has one for JAX only).

For each adapted parameter ``w`` with gradient ``g``, at learning rate ``lr``, momentum
``m``, weight decay ``wd`` and trust coefficient ``eta``::

    trust = eta * ||w|| / (||g|| + wd * ||w||)     (1 when ||w|| or ||g|| is 0)
    v     = m * v + lr * trust * (g + wd * w)
    w     = w - v

The learning rate sits inside the momentum buffer, as in the MLPerf reference
(TensorFlow's LARSOptimizer). Parameters of a group with ``adapt=False`` (biases and
normalisation weights, which ``make_optimizer`` puts there) take neither the trust ratio
nor weight decay: ``v = m * v + lr * g``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

# The trust coefficient of the paper and of the MLPerf reference.
LARS_ETA = 0.001


class LARS(torch.optim.Optimizer):
    """SGD with momentum and a per-layer trust ratio (module doc for the formula)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        eta: float = LARS_ETA,
    ) -> None:
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "eta": eta,
            "adapt": True,
        }
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            wd, eta = group["weight_decay"], group["eta"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                update = p.grad
                if group["adapt"]:
                    w_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
                    ratio = eta * w_norm / (g_norm + wd * w_norm)
                    trust = torch.where((w_norm > 0) & (g_norm > 0), ratio, torch.ones_like(ratio))
                    update = (update + wd * p) * (lr * trust)
                else:
                    update = update * lr
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = update.clone()
                else:
                    state["momentum_buffer"].mul_(momentum).add_(update)
                p.sub_(state["momentum_buffer"])
        return loss
