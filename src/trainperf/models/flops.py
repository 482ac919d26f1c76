"""Model analytics: parameters, FLOPs per sample, gradient bytes, counted on the meta device.

FLOPs are what ``torch.utils.flop_counter.FlopCounterMode`` counts: matrix multiplies,
convolutions and attention, 2 FLOPs per multiply-accumulate; element-wise work,
normalization and the optimizer are not counted (the convention of MFU in PaLM and of
torchtitan). Counting runs on the meta device, so no weights are allocated and the whole
zoo is analysed in seconds.

- forward FLOPs per sample: one forward pass, divided by the batch;
- training FLOPs per sample: forward + loss + backward, counted as run (about 3x the
  forward: the backward computes gradients of both weights and activations, except for the
  input of the first layer, which needs none);
- gradient bytes: what data-parallel training all-reduces per step, one value per
  trainable parameter (4 bytes in fp32, 2 in bf16/fp16);
- FLOPs per parameter: training FLOPs per sample / parameters, the ratio of compute per
  sample to the all-reduce volume per step: low values (AlexNet, VGG) scale out poorly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from trainperf.models.spec import ModelSpec

# Batch used for counting: FLOPs are linear in the batch; 2 keeps batch norm well defined.
_COUNT_BATCH = 2


@dataclass(frozen=True)
class FlopCount:
    fwd_flops_per_sample: float
    train_flops_per_sample: float


@dataclass(frozen=True)
class ModelAnalytics:
    name: str
    family: str
    size_name: str
    size: int
    params: int
    trainable_params: int
    fwd_flops_per_sample: float
    train_flops_per_sample: float
    grad_bytes_fp32: int
    grad_bytes_bf16: int
    flops_per_param: float
    tokens_per_sample: int | None

    def as_dict(self) -> dict:
        return asdict(self)


def count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """(all, trainable) parameters; a tied weight (GPT-2's head) counts once."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


def count_flops(spec: ModelSpec, size: int | None = None) -> FlopCount:
    """Forward and training FLOPs per sample of ``spec`` at ``size`` (its natural size)."""
    size = spec.resolve_size(size)
    model = spec.build_on_meta()
    inputs, targets = spec.task.example_batch(_COUNT_BATCH, size, "meta")
    with FlopCounterMode(display=False) as forward:
        model(inputs)
    with FlopCounterMode(display=False) as training:
        spec.loss(model(inputs), targets).backward()
    return FlopCount(
        fwd_flops_per_sample=forward.get_total_flops() / _COUNT_BATCH,
        train_flops_per_sample=training.get_total_flops() / _COUNT_BATCH,
    )


def analyse(spec: ModelSpec, size: int | None = None) -> ModelAnalytics:
    """Parameters, FLOPs and gradient bytes of ``spec`` at ``size`` (its natural size)."""
    size = spec.resolve_size(size)
    params, trainable = count_parameters(spec.build_on_meta())
    flops = count_flops(spec, size)
    return ModelAnalytics(
        name=spec.name,
        family=spec.family,
        size_name=spec.size_name,
        size=size,
        params=params,
        trainable_params=trainable,
        fwd_flops_per_sample=flops.fwd_flops_per_sample,
        train_flops_per_sample=flops.train_flops_per_sample,
        grad_bytes_fp32=4 * trainable,
        grad_bytes_bf16=2 * trainable,
        flops_per_param=flops.train_flops_per_sample / params if params else 0.0,
        tokens_per_sample=spec.tokens_per_sample(size),
    )
