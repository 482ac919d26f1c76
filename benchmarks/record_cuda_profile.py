"""Record torch.profiler events of real CUDA training steps, for the profile tests' fixtures.

    python benchmarks/record_cuda_profile.py OUT_DIR [--steps N]

Writes OUT_DIR/cuda_step.json.gz (one GPU: ResNet-18, batch 32, bf16, trainperf's own
training step) and OUT_DIR/cuda_ddp_nccl.json.gz (the same step under DDP on one NCCL rank,
plus an all_gather and a reduce_scatter, so that NCCL's ranges and kernels are in it). Each
file holds every event of the profiled steps with the fields torch's FunctionEvent is built
from (id, name, thread, start/end in us, async, device type/index/stream, the kernels a host
op launched, its parent's id), so a test can rebuild real FunctionEvents from it and run
trainperf.profile's aggregation on what a GPU really produced (tests/profile/data/).
Needs a CUDA GPU; on a machine without one it says so and exits 2.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

from trainperf import models
from trainperf.case.spec import Case
from trainperf.step.training_step import build_training_step


def event_fields(event) -> dict:
    """The constructor fields of one FunctionEvent (see the module docstring)."""
    return {
        "id": event.id,
        "name": event.name,
        "thread": event.thread,
        "start_us": event.time_range.start,
        "end_us": event.time_range.end,
        "is_async": event.is_async,
        "device_type": int(event.device_type.value),
        "device_index": event.device_index,
        "device_resource_id": event.device_resource_id,
        # A range of record_function (ProfilerStep#N, nccl:all_reduce) drawn on the device's
        # timeline too: it spans kernels and is not one (torch's own tables skip it).
        "is_user_annotation": bool(event.is_user_annotation),
        # The CPU op (its id) whose launch this device event is: the link torch uses to
        # attach kernels to ops, kept so a kernel's interval can be filed by its launcher.
        "linked_correlation_id": getattr(event, "linked_correlation_id", None),  # torch 2.13+
        "kernels": [[k.name, k.device, k.duration] for k in event.kernels],
        "parent": event.cpu_parent.id if event.cpu_parent is not None else None,
    }


def profiled(step, steps: int) -> list[dict]:
    plan = schedule(wait=0, warmup=1, active=1, repeat=1)
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=activities, schedule=plan) as prof:
        step()
        torch.cuda.synchronize()
        prof.step()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return [event_fields(e) for e in prof.events()]


def write(path: Path, scenario: str, steps: int, events: list[dict]) -> None:
    document = {
        "scenario": scenario,
        "steps": steps,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "events": events,
    }
    with gzip.open(path, "wt") as handle:
        json.dump(document, handle)
    print(f"{path}: {len(events)} events", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("record_cuda_profile: no CUDA device visible; needs one", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    case = Case(model="resnet18", batch_size=32, precision="bf16", device="cuda")
    training = build_training_step(models.get(case.model), case, torch.device("cuda"))
    for _ in range(3):
        training.step()
    write(
        args.out / "cuda_step.json.gz",
        "resnet18 b32 bf16, one GPU",
        args.steps,
        profiled(training.step, args.steps),
    )
    training.close()

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    ddp_case = case.model_copy(update={"parallel": "ddp"})
    training = build_training_step(models.get(case.model), ddp_case, torch.device("cuda"), rank=0)
    shard = torch.randn(1 << 20, device="cuda")
    gathered = torch.empty_like(shard)

    def step() -> None:
        training.step()
        dist.all_gather_into_tensor(gathered, shard)
        dist.reduce_scatter_tensor(shard, gathered)

    for _ in range(3):
        step()
    write(
        args.out / "cuda_ddp_nccl.json.gz",
        "resnet18 b32 bf16 under DDP on one NCCL rank, plus all_gather and reduce_scatter",
        args.steps,
        profiled(step, args.steps),
    )
    training.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
