"""One evaluation pass: mean loss and top-1/top-5 accuracy over the evaluation data.

Outputs shaped like classification logits, ``(..., classes)`` against integer targets
``(...)``, are scored per position: per image for image classification, per token for
causal language models (token-level accuracy), per question for multiple choice. The loss
is ``spec.loss`` (a batch mean) weighted by the positions it averaged, so the mean is over
all positions of the evaluation set whatever the batch sizes. Top-5 needs at least five
classes; outputs of any other shape (span extraction) get the loss only.

Across ranks the counts and sums are all-reduced, so every rank computes the global
numbers; each rank scores its own shard of the evaluation data.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from trainperf.case.training import HIGHER_IS_BETTER
from trainperf.models.spec import ModelSpec
from trainperf.parallel.peers import Peers


def reached(evaluation: dict[str, Any], metric: str, target: float) -> bool:
    """Whether ``evaluation`` meets the target (top-k at or above, loss at or below)."""
    value = evaluation.get(metric)
    if value is None:
        return False
    return value >= target if HIGHER_IS_BETTER[metric] else value <= target


def _as_classification(
    outputs: Any, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(positions, classes) logits and (positions,) labels, or None if not classification."""
    if not isinstance(outputs, torch.Tensor) or targets.is_floating_point():
        return None
    if outputs.dim() != targets.dim() + 1 or outputs.shape[:-1] != targets.shape:
        return None
    return outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Any,
    spec: ModelSpec,
    device: torch.device,
    autocast_dtype: torch.dtype | None,
    peers: Peers,
) -> dict[str, Any]:
    """``eval_loss``, ``top1``, ``top5`` (None where not defined) and ``eval_samples_seen``."""
    was_training = model.training
    model.eval()
    # loss sum, scored positions, top-1 hits, top-5 hits, samples,
    # batches not shaped as classification, batches with fewer than 5 classes
    totals = torch.zeros(7, dtype=torch.float64, device=device)
    for inputs, targets in loader:
        inputs = inputs.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        autocast = (
            torch.autocast(device.type, dtype=autocast_dtype)
            if autocast_dtype
            else contextlib.nullcontext()
        )
        with autocast:
            outputs = model(inputs)
            loss = spec.loss(outputs, targets).float()
        scored = _as_classification(outputs, targets)
        positions = scored[1].numel() if scored else targets.shape[0]
        totals[0] += loss.double() * positions
        totals[1] += positions
        totals[4] += inputs.shape[0]
        if scored is None:
            totals[5] += 1
            continue
        logits, labels = scored
        top = logits.float().topk(min(5, logits.shape[-1]), dim=-1).indices
        hits = top == labels[:, None]
        totals[2] += hits[:, 0].sum()
        totals[3] += hits.any(dim=-1).sum()
        totals[6] += logits.shape[-1] < 5
    model.train(was_training)
    loss_sum, positions, top1, top5, samples, unscored, few_classes = peers.sum_(totals).tolist()
    if positions == 0:
        raise ValueError("the evaluation data is empty: nothing to score")
    return {
        "eval_loss": loss_sum / positions,
        "top1": None if unscored else top1 / positions,
        "top5": None if unscored or few_classes else top5 / positions,
        "eval_samples_seen": int(samples),
    }
