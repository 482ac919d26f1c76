"""Sequential equivalence: K data-parallel steps on N ranks against K steps in one process.

The studies required that a parallel run reaches the same model as the sequential one
(iso-accuracy). Both runs here start from the same weights (seed), see the same global
batches (batch k is drawn on the CPU from seed ``seed + 1000 + k``; rank r trains on the
r-th equal slice) and take the same optimizer steps. Synchronous data parallelism then
computes the same mean gradient, up to the order of floating-point sums, so the largest
parameter difference after K steps and the largest difference of the per-step global loss
(the mean of the ranks' slice losses) must stay below a tolerance suited to the precision.

Dropout is switched off in both runs (``nn.Dropout`` modules and the attention dropout
the zoo's transformers pass to SDPA as ``dropout_p``): its random masks are drawn per
process and cannot match between layouts. BatchNorm normalizes over each rank's slice,
unlike the sequential run over the whole batch: such models are reported as not
equivalent, with that note.

Both parts train with the benchmark's step (``trainperf.step.training_step.build_model`` and
``make_step``): the same precision handling (fp16 with a GradScaler), channels-last,
compile and activation checkpointing; the parallel part wraps the model in plain
DistributedDataParallel, or shards it with FSDP2 (``parallel: fsdp``, the case's FSDP
options): then each rank holds a shard of every weight and of its optimizer state, and the
final weights are gathered whole (``DTensor.full_tensor``) before they are compared. Under
bf16 the sharded run computes with bf16 weights (FSDP's mixed-precision policy), not under
autocast alone, so its tolerance is bf16's.

Flow: the parallel part runs under torchrun and rank 0 saves its final parameters; the
sequential part then runs in one process, loads them and compares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainperf import models
from trainperf.case.modes import device_batch
from trainperf.case.spec import Case

# Largest parameter and loss difference accepted, by precision. fp32 differs only by the
# summation order of the all-reduce (~1e-7 relative per step); the 16-bit formats round.
TOLERANCE = {"fp32": 1e-5, "tf32": 1e-3, "fp16": 1e-2, "bf16": 1e-2}
PARAMS_FILE = "parallel_params.pt"


def check(case: Case, steps: int) -> dict[str, Any]:
    """Run both parts, each in its own child (the parallel one under torchrun).

    ``case`` is the parallel case: ddp over ``devices`` x ``nodes``, ``batch_size`` the
    global batch. Returns the sequential part's result document, whose metrics hold the
    comparison; or the failed part's result. Raises runner.Interrupted on Ctrl-C/SIGTERM.
    """
    from trainperf.launch.runner import ChildJob, StopFlag, job_directory, run_job

    single = case.model_copy(update={"devices": 1, "nodes": 1, "parallel": "none"})
    with job_directory() as workdir, StopFlag().installed() as stop:
        result = run_job(job(case, steps, "parallel"), ChildJob.of_case(case), workdir, stop)
        if result["status"] == "ok":
            sequential = job(case, steps, "sequential")
            result = run_job(sequential, ChildJob.of_case(single), workdir, stop)
    return result


def job(case: Case, steps: int, part: str) -> dict[str, Any]:
    """The worker document of one part: ``parallel`` (torchrun) or ``sequential``."""
    return {"kind": "equivalence", "part": part, "steps": steps, "case": case.model_dump()}


def run_part(document: dict[str, Any], workdir: Path) -> dict[str, Any] | None:
    """Run one part in this process (one rank of it under torchrun)."""
    case, steps = Case.model_validate(document["case"]), int(document["steps"])
    if document["part"] == "parallel":
        from trainperf.parallel.group import RankGroup

        with RankGroup(case.device, case.timeout_s) as job_:
            losses, params = train(case, steps, job_)
            if not job_.is_leader:
                return None
            torch.save({"losses": losses, "params": params}, workdir / PARAMS_FILE)
            return {"device": None, "metrics": {"losses": losses}}
    losses, params = train(case, steps, None)
    parallel = torch.load(workdir / PARAMS_FILE)
    return {"device": None, "metrics": compare(case, losses, params, parallel)}


def train(case: Case, steps: int, job: Any) -> tuple[list[float], torch.Tensor]:
    """K steps on the global batch (this rank's slice of it); losses and final weights."""
    from trainperf.parallel.wrap import wrap_ddp, wrap_fsdp
    from trainperf.step.training_step import StepOptions, build_model, make_step

    spec = models.get(case.model)
    device = job.device if job else torch.device(case.device)
    rank, world = (job.ranks.rank, job.ranks.world_size) if job else (0, 1)
    if case.threads:
        torch.set_num_threads(case.threads)
    size = spec.resolve_size(getattr(case, spec.size_name))
    sharded = job is not None and case.mode == "fsdp"
    model = build_model(spec, device, case.precision, case.seed, rank, deferred=sharded)
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.eval()  # see the module docstring
        if hasattr(module, "dropout_p"):
            module.dropout_p = 0.0  # the zoo's attention dropout inside SDPA
    wrap = None
    if sharded:
        wrap = lambda built: wrap_fsdp(built, case, device)  # noqa: E731
    elif job:
        wrap = lambda built: wrap_ddp(built, device)  # noqa: E731
    # One batch per optimizer step in both parts: the case's grad_accum is not compared.
    step = make_step(spec, model, device, StepOptions.of(case, grad_accum=1), wrap=wrap)
    share = device_batch(case.batch_size, world, "strong")  # the one batch, split
    losses = []
    for k in range(steps):
        torch.manual_seed(case.seed + 1000 + k)
        inputs, targets = spec.task.example_batch(case.batch_size, size, "cpu")
        mine = slice(rank * share, (rank + 1) * share)
        x, y = step.layout(inputs[mine].to(device)), targets[mine].to(device)
        loss = step(lambda: (x, y))  # noqa: B023 (called at once, in this iteration)
        global_loss = loss.detach().float()
        if job:
            torch.distributed.all_reduce(global_loss)
            global_loss /= world
        losses.append(float(global_loss))
    # A sharded parameter (DTensor) is gathered whole, on every rank (a collective).
    whole = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in step.model.parameters()]
    params = torch.cat([p.detach().double().flatten().cpu() for p in whole])
    return losses, params


def compare(
    case: Case, losses: list[float], params: torch.Tensor, parallel: dict[str, Any]
) -> dict[str, Any]:
    """Largest differences between the runs and the verdict against the tolerance."""
    tolerance = TOLERANCE[case.precision]
    param_diff = float((params - parallel["params"]).abs().max())
    loss_diff = max(abs(a - b) for a, b in zip(losses, parallel["losses"], strict=True))
    spec = models.get(case.model)
    has_batchnorm = any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) for m in spec.build().modules()
    )
    metrics: dict[str, Any] = {
        "steps": len(losses),
        "devices": case.devices * case.nodes,
        "global_batch": case.batch_size,
        "max_param_diff": param_diff,
        "max_loss_diff": loss_diff,
        "tolerance": tolerance,
        "equivalent": param_diff <= tolerance and loss_diff <= tolerance,
        "sequential_losses": losses,
        "parallel_losses": parallel["losses"],
        "parameters": int(params.numel()),
        "notes": ["dropout switched off in both runs (random masks differ per process)"],
    }
    if has_batchnorm:
        metrics["notes"].append(
            "the model has BatchNorm: each rank normalizes over its own slice, so the "
            "runs differ by design (SyncBatchNorm would make them match)"
        )
    return metrics
