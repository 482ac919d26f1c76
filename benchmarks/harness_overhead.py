"""Does the harness cost anything? trainperf's measured throughput vs a bare hand-written loop.

One model, optimizer and batch are built once (trainperf.training_step.build_training_step); then
blocks of N steps alternate, ABBA, between:
- trainperf: ``trainperf.measure.timed_steps.measure_steps`` with ``fixed:0:N`` and the device's
  step timer (CUDA events or the host clock), summarized by ``trainperf.measure.stats``
  exactly as a case is: its ``samples_per_s_mean``;
- bare: the loop a user writes, ``zero_grad; loss = loss(model(x), y); backward; step``,
  N times between two clock reads with the device synchronized at both ends.

Sharing the model and interleaving short blocks cancels what a shared machine adds
(another tenant, frequency changes), which would otherwise swamp a 1% effect.

Prints per block pair the ratio trainperf / bare of the reported throughput, and of the
wall time of the whole trainperf block (which also holds the harness's work between
windows). The reported ratio must be >= 0.99; exit code 1 if its median is below.

    python benchmarks/harness_overhead.py [--model cifarnet --batch-size 32 --size 32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from common import add_model_arguments, warmed_up_step
from trainperf import models
from trainperf.measure.divergence import LossWatch
from trainperf.measure.policy import FixedPolicy
from trainperf.measure.stats import summarize
from trainperf.measure.timed_steps import measure_steps
from trainperf.measure.timer import make_timer
from trainperf.training_step import TrainingStep

THRESHOLD = 0.99


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_block(t: TrainingStep, spec: models.ModelSpec, device: torch.device, steps: int) -> float:
    """Samples/s of N hand-written fp32 steps on trainperf's model, optimizer and batch."""
    model, optimizer, inputs, targets = t.model, t.optimizer, t.inputs, t.targets
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = spec.loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
    synchronize(device)
    return t.samples_per_step * steps / (time.perf_counter() - start)


def harness_block(t: TrainingStep, device: torch.device, steps: int) -> tuple[float, float]:
    """(reported samples/s, wall-clock samples/s) of trainperf measuring N steps."""
    synchronize(device)
    start = time.perf_counter()
    # As a case measures: each step's loss kept for the divergence check after the window.
    losses = LossWatch()
    record = measure_steps(t.step, FixedPolicy(0, steps), make_timer(device.type), losses=losses)
    losses.check()
    synchronize(device)
    wall = t.samples_per_step * steps / (time.perf_counter() - start)
    return summarize(record.step_s, t.samples_per_step).samples_per_s_mean, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(parser)
    parser.add_argument("--threads", type=int, help="torch intra-op threads (CPU)")
    parser.add_argument("--steps", type=int, default=50, help="steps per block")
    parser.add_argument("--pairs", type=int, default=30, help="block pairs (ABBA order)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    spec, device, training = warmed_up_step(args)

    reported, wall = [], []
    for pair in range(args.pairs):
        if pair % 2 == 0:
            bare = bare_block(training, spec, device, args.steps)
            harness, harness_wall = harness_block(training, device, args.steps)
        else:
            harness, harness_wall = harness_block(training, device, args.steps)
            bare = bare_block(training, spec, device, args.steps)
        reported.append(harness / bare)
        wall.append(harness_wall / bare)
        print(
            f"pair {pair + 1:2d}: bare {bare:8.1f}  trainperf {harness:8.1f} samples/s"
            f"  reported/bare {harness / bare:.4f}  wall/bare {harness_wall / bare:.4f}",
            flush=True,
        )
    median = statistics.median(reported)
    print(
        f"{args.model} b{args.batch_size} @{args.size} on {args.device}, "
        f"{args.pairs} pairs of {args.steps}-step blocks:"
    )
    print(
        f"  trainperf reported / bare = {median:.4f} (median; range "
        f"{min(reported):.4f}..{max(reported):.4f}); required >= {THRESHOLD}"
    )
    print(f"  trainperf wall clock / bare = {statistics.median(wall):.4f} (median)")
    return 0 if median >= THRESHOLD else 1


if __name__ == "__main__":
    sys.exit(main())
