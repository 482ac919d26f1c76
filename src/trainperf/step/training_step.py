"""The training step as a user's loop writes it: forward, loss, backward, optimizer step.

It is the one step of trainperf: ``build_model`` (seeds, float32 math, the network) and
``make_step`` (channels-last, optimizer, wrapping, compile, autocast, GradScaler, gradient
accumulation) serve the benchmark (``build_training_step``), the equivalence check and the
time-to-accuracy trainer alike, so a precision rule is written here once.

Precision:
- fp32: IEEE float32 everywhere; on a GPU TF32 is switched off for matmuls and cuDNN
  convolutions (PyTorch allows TF32 in cuDNN convolutions by default);
- tf32: float32 storage, TF32 tensor-core math for matmuls and convolutions;
- fp16: autocast to float16 with dynamic loss scaling (torch.amp.GradScaler);
- bf16: autocast to bfloat16 (same range as float32, no loss scaling needed).
What stays float32 in an fp16 or bf16 case runs IEEE, as in fp32 (the rule of
trainperf.case.precision.fp32_math, which the JAX step follows too); ``fp32_math_mode`` reads the
math torch is set to back, for the result's device record (``fp32_matmul``, ``fp32_conv``).

Optimizers follow the literature: SGD with momentum 0.9 for the CNNs, AdamW for the
language models; a training run may ask for another, LARS included (``make_optimizer``).
``channels_last`` converts the model and its images to NHWC; ``compile`` wraps the model
in ``torch.compile`` (compilation lands in the warm-up).

Data parallelism is decided here (the wrapping itself is trainperf.parallel.wrap):
- ``ddp``: DistributedDataParallel over the process group trainperf.parallel.group set up (one
  process per device), with the case's bucket size, static graph and fp16/bf16 gradient
  compression hook; ``grad_accum`` micro-batches per step, all but the last under
  ``no_sync`` so gradients are all-reduced once per optimizer step;
- ``dp``: torch.nn.DataParallel in one process: the batch is scattered over the GPUs and
  the replicas are re-broadcast every step;
- ``none``: the model as it is.
A ddp step can also run with no gradient synchronization at all (``compute_only``): the
difference between the two step times is the communication the backward pass did not hide.

Data: a synthetic case trains on one batch made on the device at build time, so the step
holds no input-pipeline work at all. A case with real data (``data`` not synthetic) takes
each micro-batch from an endless iterator over the training loader of
trainperf.datasets.make_loaders (each rank its own DistributedSampler shard under ddp) and
copies it to the device with ``non_blocking=True``. The time from before ``next()`` to
after the copy is enqueued is the micro-batch's **data wait**, a window of ``data_timer``
(the device's step timer kind): on the CPU the host clock, on a GPU two CUDA events, so it
is the time the device itself waited for the batch and the copy (host waiting that hides
behind earlier queued GPU work is not counted, as it costs the step nothing).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trainperf.case.precision import fp32_math, fp32_math_record
from trainperf.case.spec import Case
from trainperf.case.training import OPTIMIZERS
from trainperf.datasets import Loaders, endless_batches, make_loaders
from trainperf.measure.timer import StepTimer, make_timer
from trainperf.models.spec import Batch, ModelSpec
from trainperf.parallel.fsdp import apply_checkpointing
from trainperf.parallel.wrap import wrap_parallel
from trainperf.step.lars import LARS

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
    # Real data only: the loaders and the windows of each micro-batch's data wait.
    loaders: Loaders | None = None
    data_timer: StepTimer | None = None
    close: Callable[[], None] = lambda: None  # stops the loader's worker processes


def set_fp32_math(device: torch.device, precision: str) -> None:
    """IEEE float32 or TF32 for float32 matmuls and convolutions on a CUDA device, as
    trainperf.case.precision.fp32_math says (the CPU keeps oneDNN's IEEE default)."""
    if device.type != "cuda":
        return
    mode = fp32_math(precision)
    torch.backends.cuda.matmul.fp32_precision = mode
    torch.backends.cudnn.conv.fp32_precision = mode


def fp32_math_mode(device: torch.device) -> dict[str, Any]:
    """``fp32_matmul`` and ``fp32_conv`` (trainperf.case.precision.fp32_math_record) as torch is
    set now: cuBLAS and cuDNN on a GPU, oneDNN on the CPU.

    Read from the flags of torch's fp32_precision API, the operation's own or, where that
    says "none", the level above it (backend, then global; "none" all the way is IEEE), and
    never from the legacy ``allow_tf32`` getters, which raise once both APIs were used.
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes cuBLAS run TF32 whatever the flags say.
    """
    backends = torch.backends
    top = backends.fp32_precision
    if device.type == "cuda":
        matmul = _first_set(backends.cuda.matmul.fp32_precision, top)
        conv = _first_set(backends.cudnn.conv.fp32_precision, backends.cudnn.fp32_precision, top)
        if os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1":
            matmul = "tf32"
    else:
        mkldnn = backends.mkldnn
        matmul = _first_set(mkldnn.matmul.fp32_precision, mkldnn.fp32_precision, top)
        conv = _first_set(mkldnn.conv.fp32_precision, mkldnn.fp32_precision, top)
    return fp32_math_record(matmul, conv, device.type, os.environ)


def _first_set(*levels: str) -> str:
    """The first of an operation's fp32_precision levels that is not "none", else IEEE."""
    return next((level for level in levels if level != "none"), "ieee")


def set_cudnn_benchmark(spec: ModelSpec, case: Case, device: torch.device) -> None:
    """cuDNN autotuning for an image model on a GPU, as the published CNN benchmarks run
    (tf_cnn_benchmarks, MLPerf's reference ResNet): cuDNN times its algorithms for each new
    convolution shape on first use (in the warm-up) and keeps the fastest. Off when the
    case says ``cudnn_benchmark: false`` and for language models, which have no convolutions.
    """
    enabled = case.cudnn_benchmark and device.type == "cuda" and not spec.is_language_model
    torch.backends.cudnn.benchmark = enabled


def make_optimizer(
    spec: ModelSpec,
    model: nn.Module,
    *,
    optimizer: str | None = None,
    lr: float | None = None,
    momentum: float | None = None,
    weight_decay: float | None = None,
) -> torch.optim.Optimizer:
    """``optimizer`` (one of trainperf.case.training.OPTIMIZERS; None: the spec's); None
    hyper-parameters keep the benchmark's defaults (``momentum`` is SGD's and LARS's only).

    LARS (trainperf.step.lars) leaves biases and normalisation weights (the parameters of
    one dimension or none) out of the trust ratio and of weight decay, as MLPerf's
    reference ResNet-50 does. The convergence trainer passes its hyper-parameters and then
    sets the lr every step.
    """
    name = optimizer or spec.optimizer
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer '{name}' is not one of {', '.join(OPTIMIZERS)}")
    if name == "adamw":
        options = {} if weight_decay is None else {"weight_decay": weight_decay}
        return torch.optim.AdamW(model.parameters(), lr=ADAMW_LR if lr is None else lr, **options)
    lr = SGD_LR if lr is None else lr
    momentum = SGD_MOMENTUM if momentum is None else momentum
    if name == "lars":
        params = list(model.parameters())
        groups = [
            {"params": [p for p in params if p.ndim > 1]},
            {"params": [p for p in params if p.ndim <= 1], "adapt": False, "weight_decay": 0.0},
        ]
        return LARS(
            [g for g in groups if g["params"]], lr, momentum, weight_decay=weight_decay or 0.0
        )
    return torch.optim.SGD(
        model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay or 0.0
    )


def build_model(
    spec: ModelSpec,
    device: torch.device,
    precision: str,
    seed: int,
    rank: int = 0,
    *,
    deferred: bool = False,
) -> nn.Module:
    """The spec's network on ``device`` in training mode, float32 math set for ``precision``.

    Every rank builds the same initial weights (seed ``seed``); torch's generator is then
    reseeded ``seed + 1 + rank``, so that what each rank draws next (its batch, its loader's
    shuffle, its dropout masks) is its own, as in data-parallel training over different data.

    ``deferred`` (sharded training): a network that can initialise itself later
    (``init_weights(seed)``, the Llama family) stays on the meta device, so that no rank
    ever holds all of its weights (trainperf.parallel.wrap.wrap_fsdp materialises the shards).
    """
    torch.manual_seed(seed)
    set_fp32_math(device, precision)
    model = None
    if deferred:
        with torch.device("meta"):
            model = spec.build()
        if not hasattr(model, "init_weights"):
            model = None
    if model is None:
        torch.manual_seed(seed)
        model = spec.build().to(device)
    model.train()
    torch.manual_seed(seed + 1 + rank)
    return model


@dataclass(frozen=True)
class StepOptions:
    """How a step trains: precision, memory format, compilation, micro-batches per step."""

    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    grad_accum: int = 1
    activation_checkpointing: str = "none"

    @classmethod
    def of(cls, case: Case, grad_accum: int | None = None) -> StepOptions:
        """The case's options; ``grad_accum`` overrides the case's micro-batches per step."""
        accum = case.grad_accum if grad_accum is None else grad_accum
        return cls(
            case.precision, case.channels_last, case.compile, accum, case.activation_checkpointing
        )


@dataclass
class Step:
    """One optimizer step over ``grad_accum`` micro-batches, precision applied.

    ``model`` is the network as built (its parameters, train/eval mode, evaluation);
    ``forward`` the one trained: wrapped for data parallelism and compiled. fp16/bf16 run
    the forward and loss under autocast; fp16 scales the loss (dynamic loss scaling,
    ``scaler``) so small gradients do not underflow, and the scaler skips a step whose
    gradients overflowed.
    """

    model: nn.Module
    wrapped: nn.Module  # the model as wrapped for data parallelism (``no_sync`` under ddp)
    forward: nn.Module
    optimizer: torch.optim.Optimizer
    loss: Callable[[Any, torch.Tensor], torch.Tensor]
    device: torch.device
    options: StepOptions
    scaler: torch.amp.GradScaler | None
    # Looked up once, not every step: DistributedDataParallel's ``no_sync``, FSDP2's
    # ``set_requires_gradient_sync`` (None when the wrapper has none), and whether a step
    # is the user's plain loop (one micro-batch, no autocast, no loss scaling).
    _no_sync: Callable[[], Any] | None = field(init=False, repr=False)
    _set_sync: Callable[[bool], None] | None = field(init=False, repr=False)
    _plain: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._no_sync = getattr(self.wrapped, "no_sync", None)
        self._set_sync = getattr(self.wrapped, "set_requires_gradient_sync", None)
        self._plain = (
            self.options.grad_accum == 1 and self.scaler is None and self.autocast_dtype is None
        )

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype autocast computes in (fp16, bf16), or None: no autocast."""
        return AUTOCAST_DTYPES.get(self.options.precision)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision's autocast region (nothing for fp32/tf32)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def layout(self, inputs: torch.Tensor) -> torch.Tensor:
        """``inputs`` in the memory format the model was converted to."""
        if self.options.channels_last:
            return inputs.contiguous(memory_format=torch.channels_last)
        return inputs

    def __call__(self, next_batch: Callable[[], Batch], sync: bool = True) -> torch.Tensor:
        """Zero the gradients, train on ``grad_accum`` batches of ``next_batch()``, step the
        optimizer; the last micro-batch's loss. ``sync=False``: no gradient all-reduce.

        A plain step (one micro-batch, no autocast, no loss scaling, gradients synced) is
        the loop a user writes, with no context managers or look-ups around it, so the
        harness adds no Python work to the step it measures (benchmarks/harness_overhead.py).
        """
        no_sync, set_sync = self._no_sync, self._set_sync
        if self._plain and (sync or no_sync is None):
            self.optimizer.zero_grad(set_to_none=True)
            x, y = next_batch()
            loss = self.loss(self.forward(x), y)
            loss.backward()
            self.optimizer.step()
            return loss
        self.optimizer.zero_grad(set_to_none=True)
        accum = self.options.grad_accum
        for index in range(accum):
            # Gradients are all-reduced (reduce-scattered) in the last micro-batch only.
            synced = sync and index == accum - 1
            if set_sync and accum > 1:
                set_sync(synced)
            with no_sync() if no_sync and not synced else contextlib.nullcontext():
                x, y = next_batch()
                with self.autocast():
                    loss = self.loss(self.forward(x), y)
                scaled = loss / accum if accum > 1 else loss
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        return loss


def make_step(
    spec: ModelSpec,
    model: nn.Module,
    device: torch.device,
    options: StepOptions,
    *,
    wrap: Callable[[nn.Module], nn.Module] | None = None,
    hyper: dict[str, Any] | None = None,
) -> Step:
    """The step that trains ``model`` (from ``build_model``): converted to channels-last,
    its blocks checkpointed, wrapped by ``wrap`` (data parallelism), the optimizer
    (``hyper``: make_optimizer's optimizer, lr, momentum and weight_decay) over the
    parameters as wrapped (FSDP replaces them by their shards), compiled, with the
    precision's autocast and GradScaler."""
    if options.channels_last:
        model = model.to(memory_format=torch.channels_last)
    apply_checkpointing(model, options.activation_checkpointing, spec.name)
    wrapped = wrap(model) if wrap else model
    optimizer = make_optimizer(spec, model, **(hyper or {}))
    forward = torch.compile(wrapped) if options.compile else wrapped
    scaler = torch.amp.GradScaler(device.type) if options.precision == "fp16" else None
    return Step(model, wrapped, forward, optimizer, spec.loss, device, options, scaler)


def build_training_step(
    spec: ModelSpec, case: Case, device: torch.device, rank: int = 0
) -> TrainingStep:
    """Model, optimizer and data on ``device``, and the step that trains them.

    Every rank builds the same initial weights (seed ``case.seed``) and its own batch
    (seed ``case.seed + 1 + rank``), as data-parallel training over different data does;
    with real data, its own shard of the loader's samples (module doc).
    """
    set_cudnn_benchmark(spec, case, device)
    size = spec.resolve_size(getattr(case, spec.size_name))
    deferred = case.mode == "fsdp"
    model = build_model(spec, device, case.precision, case.seed, rank, deferred=deferred)
    # DataParallel scatters one process's batch over its devices.
    batch = case.device_batch * (case.devices if case.mode == "dp" else 1)
    feed = None
    if case.data == "synthetic":
        inputs, targets = spec.task.example_batch(batch, size, device)
    else:
        feed = DataFeed(spec, case, device, batch, rank)
        inputs, targets, size = *feed.first, feed.loaders.size
    wrap = functools.partial(wrap_parallel, case=case, device=device)
    step = make_step(spec, model, device, StepOptions.of(case), wrap=wrap)
    inputs = step.layout(inputs)
    # Synthetic data: the same batch every micro-batch, nothing done to get it.
    next_batch = feed.next if feed else lambda: (inputs, targets)
    compute_only = (lambda: step(next_batch, sync=False)) if case.mode == "ddp" else None
    training = TrainingStep(
        lambda: step(next_batch),
        step.model,
        step.optimizer,
        inputs,
        targets,
        case.global_batch,
        size,
        compute_only,
    )
    if feed:
        training.loaders, training.data_timer, training.close = feed.loaders, feed.timer, feed.close
    return training


class DataFeed:
    """Batches of a real data set for the step, each fetch a window of ``timer``."""

    def __init__(
        self, spec: ModelSpec, case: Case, device: torch.device, batch: int, rank: int
    ) -> None:
        self.loaders = make_loaders(
            case.data,
            spec,
            getattr(case, spec.size_name),
            batch,
            case.workers,
            device,
            case.seed,
            rank=rank if case.launch == "torchrun" else 0,
            world=case.processes,
        )
        self.device, self.channels_last = device, case.channels_last
        self.batches = endless_batches(self.loaders.train)
        self.timer = make_timer(device.type)
        # Starts the workers and surfaces data errors while building, not while measuring.
        self.first = self._to_device(next(self.batches))

    def next(self) -> Batch:
        self.timer.start()
        batch = self._to_device(next(self.batches))
        self.timer.stop()
        if self.channels_last:
            return batch[0].contiguous(memory_format=torch.channels_last), batch[1]
        return batch

    def _to_device(self, batch: Batch) -> Batch:
        inputs, targets = batch
        return (
            inputs.to(self.device, non_blocking=True),
            targets.to(self.device, non_blocking=True),
        )

    def close(self) -> None:
        self.batches.close()
