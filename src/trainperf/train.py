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

Data parallelism lives here and nowhere else:
- ``ddp``: DistributedDataParallel over the process group trainperf.dist set up (one
  process per device), with the case's bucket size, static graph and fp16/bf16 gradient
  compression hook; ``grad_accum`` micro-batches per step, all but the last under
  ``no_sync`` so gradients are all-reduced once per optimizer step;
- ``dp``: torch.nn.DataParallel in one process: the batch is scattered over the GPUs and
  the replicas are re-broadcast every step;
- ``none``: the model as it is.
A ddp step can also run with no gradient synchronization at all (``compute_only``): the
difference between the two step times is the communication the backward pass did not hide.
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
    samples_per_step: int  # over all devices and micro-batches
    size: int
    # The step without gradient synchronization (ddp only), to measure exposed communication.
    compute_only: Callable[[], torch.Tensor] | None = None


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


def wrap_parallel(model: nn.Module, case: Case, device: torch.device) -> nn.Module:
    """The model wrapped for the case's parallel mode."""
    if case.mode == "dp":
        return nn.DataParallel(model, device_ids=list(range(case.devices)))
    if case.mode != "ddp":
        return model
    from torch.nn.parallel import DistributedDataParallel

    options: dict = {"static_graph": case.static_graph}
    if case.bucket_mb:
        options["bucket_cap_mb"] = case.bucket_mb
    if device.type == "cuda":
        options["device_ids"] = [device.index]
    ddp = DistributedDataParallel(model, **options)
    if case.grad_compression != "none":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
        ddp.register_comm_hook(None, hook[case.grad_compression])
    return ddp


def build_training_step(
    spec: ModelSpec, case: Case, device: torch.device, rank: int = 0
) -> TrainingStep:
    """Model, optimizer and one synthetic batch on ``device``, and the step that trains them.

    Every rank builds the same initial weights (seed ``case.seed``) and its own batch
    (seed ``case.seed + 1 + rank``), as data-parallel training over different data does.
    """
    torch.manual_seed(case.seed)
    set_fp32_math(device, case.precision)
    size = spec.resolve_size(getattr(case, spec.size_name))
    model = spec.build().to(device).train()
    torch.manual_seed(case.seed + 1 + rank)
    # DataParallel scatters one process's batch over its devices.
    batch = case.device_batch * (case.devices if case.mode == "dp" else 1)
    inputs, targets = spec.task.example_batch(batch, size, device)
    if case.channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    optimizer = make_optimizer(spec, model)
    wrapped = wrap_parallel(model, case, device)
    forward = torch.compile(wrapped) if case.compile else wrapped

    autocast_dtype = AUTOCAST_DTYPES.get(case.precision)
    scaler = torch.amp.GradScaler(device.type) if case.precision == "fp16" else None
    loss_of, accum = spec.loss, case.grad_accum

    def micro_batch() -> torch.Tensor:
        autocast = (
            torch.autocast(device.type, dtype=autocast_dtype)
            if autocast_dtype
            else contextlib.nullcontext()
        )
        with autocast:
            loss = loss_of(forward(inputs), targets)
        scaled = loss / accum if accum > 1 else loss
        (scaler.scale(scaled) if scaler else scaled).backward()
        return loss

    def train_step(sync: bool = True) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        for index in range(accum):
            # Gradients are all-reduced in the backward of the last micro-batch only.
            synced = sync and index == accum - 1
            no_sync = wrapped.no_sync() if case.mode == "ddp" and not synced else None
            with no_sync or contextlib.nullcontext():
                loss = micro_batch()
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        return loss

    compute_only = (lambda: train_step(sync=False)) if case.mode == "ddp" else None
    return TrainingStep(
        train_step, model, optimizer, inputs, targets, case.global_batch, size, compute_only
    )
