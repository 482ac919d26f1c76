"""Data-parallel wrapping of a model: DataParallel, DistributedDataParallel with options, or
FSDP2 sharding (trainperf.parallel.fsdp).

Every path that trains under data parallelism (the benchmark's step, the equivalence
check, time-to-accuracy training) wraps its model here, so a DDP option means the same
everywhere. DDP options of a case: gradient bucket size (``bucket_cap_mb``), static graph,
and gradient compression by a communication hook (fp16/bf16 ``compress_hook``: gradients
travel in 16 bits and are decompressed before the optimizer step).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainperf.case.spec import Case


def dp_device_ids(case: Case) -> list[int]:
    """The CUDA devices a DataParallel case runs on (its probes meter all of them)."""
    return list(range(case.devices))


def wrap_parallel(model: nn.Module, case: Case, device: torch.device) -> nn.Module:
    """The model wrapped for the case's parallel mode."""
    if case.mode == "dp":
        return nn.DataParallel(model, device_ids=dp_device_ids(case))
    if case.mode == "fsdp":
        return wrap_fsdp(model, case, device)
    if case.mode != "ddp":
        return model
    options: dict = {"static_graph": case.static_graph}
    if case.bucket_mb:
        options["bucket_cap_mb"] = case.bucket_mb
    ddp = wrap_ddp(model, device, **options)
    if case.grad_compression != "none":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}
        ddp.register_comm_hook(None, hook[case.grad_compression])
    return ddp


def wrap_fsdp(model: nn.Module, case: Case, device: torch.device) -> nn.Module:
    """``model`` sharded with the case's FSDP options. A model built on the meta device
    (one with ``init_weights``, ``build_model(deferred=True)``) is materialised after
    sharding, each rank allocating and initialising its shard only (the case's seed)."""
    from trainperf.parallel.fsdp import shard

    sharded = shard(
        model,
        case.model,
        precision=case.precision,
        reduce=case.fsdp_reduce,
        reshard_after_forward=case.reshard_after_forward,
        device=device,
    )
    if any(param.is_meta for param in sharded.parameters()):
        sharded.to_empty(device=device)
        sharded.init_weights(case.seed)
    return sharded


def wrap_ddp(model: nn.Module, device: torch.device, **options: Any) -> nn.Module:
    """DistributedDataParallel over the process group, on this rank's GPU if it has one."""
    from torch.nn.parallel import DistributedDataParallel

    if device.type == "cuda":
        options["device_ids"] = [device.index]
    return DistributedDataParallel(model, **options)
