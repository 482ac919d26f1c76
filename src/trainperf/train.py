"""The training step as a user's loop writes it: forward, loss, backward, optimizer step.

Precision:
- fp32: IEEE float32 everywhere; on a GPU TF32 is switched off for matmuls and cuDNN
  convolutions (PyTorch allows TF32 in cuDNN convolutions by default);
- tf32: float32 storage, TF32 tensor-core math for matmuls and convolutions;
- fp16: autocast to float16 with dynamic loss scaling (torch.amp.GradScaler);
- bf16: autocast to bfloat16 (same range as float32, no loss scaling needed).

Optimizers follow the literature: SGD with momentum 0.9 for the CNNs, AdamW for the
language models. ``channels_last`` converts the model and its images to NHWC;
``compile`` wraps the model in ``torch.compile`` (compilation lands in the warm-up).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from trainperf.case import Case
from trainperf.models.spec import ModelSpec

AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
SGD_LR, SGD_MOMENTUM = 0.01, 0.9
ADAMW_LR = 1e-4


@dataclass
class TrainingStep:
    """A ready-to-call step and what it works on. ``step()`` returns the loss tensor."""

    step: Callable[[], torch.Tensor]
    model: nn.Module
    optimizer: torch.optim.Optimizer
    inputs: torch.Tensor
    targets: torch.Tensor
    samples_per_step: int
    size: int


def set_fp32_math(device: torch.device, precision: str) -> None:
    """IEEE float32 or TF32 for float32 matmuls and convolutions on a CUDA device."""
    if device.type != "cuda":
        return
    mode = "tf32" if precision == "tf32" else "ieee"
    torch.backends.cuda.matmul.fp32_precision = mode
    torch.backends.cudnn.conv.fp32_precision = mode


def make_optimizer(spec: ModelSpec, model: nn.Module) -> torch.optim.Optimizer:
    if spec.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=ADAMW_LR)
    return torch.optim.SGD(model.parameters(), lr=SGD_LR, momentum=SGD_MOMENTUM)


def build_training_step(spec: ModelSpec, case: Case, device: torch.device) -> TrainingStep:
    """Model, optimizer and one synthetic batch on ``device``, and the step that trains them."""
    torch.manual_seed(case.seed)
    set_fp32_math(device, case.precision)
    size = spec.resolve_size(getattr(case, spec.size_name))
    model = spec.build().to(device).train()
    inputs, targets = spec.task.example_batch(case.batch_size, size, device)
    if case.channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    optimizer = make_optimizer(spec, model)
    forward = torch.compile(model) if case.compile else model

    autocast_dtype = AUTOCAST_DTYPES.get(case.precision)
    if autocast_dtype is None:
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    else:

        def autocast() -> contextlib.AbstractContextManager:
            return torch.autocast(device.type, dtype=autocast_dtype)

    loss_of = spec.loss
    if case.precision == "fp16":
        scaler = torch.amp.GradScaler(device.type)

        def step() -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_of(forward(inputs), targets)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            return loss

    else:

        def step() -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_of(forward(inputs), targets)
            loss.backward()
            optimizer.step()
            return loss

    return TrainingStep(step, model, optimizer, inputs, targets, case.batch_size, size)
