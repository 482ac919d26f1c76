"""Does the harness cost anything? trainperf's measured throughput vs a bare hand-written loop.

One model, optimizer and batch are built once (trainperf.step.training_step.build_training_step);
then blocks of N steps alternate, ABBA, between:
- trainperf: as a case measures (trainperf.step.benchmark.run_case): ``measure_steps`` with
  ``fixed:0:N``, the device's step timer (CUDA events or the host clock), each step's loss
  kept by a ``LossWatch`` and checked after the window, the case's probes (energy meters,
  contexts) around it; summarized by ``trainperf.measure.stats`` as a case is (its
  ``samples_per_s_mean``);
- bare: the loop a user writes, ``zero_grad; loss = loss(model(x), y); backward; step``,
  N times between two clock reads with the device synchronized at both ends.

Sharing the model and interleaving short blocks cancels what a shared machine adds
(another tenant, frequency changes), which would otherwise swamp a 1% effect.

Prints per block pair the ratio trainperf / bare of the reported throughput, and of the
wall time of the whole trainperf block (which also holds the harness's work between
windows). The reported ratio must be >= 0.99; exit code 1 if its median is below.

``--ablate`` says which part costs what: every round runs the bare loop plus one harness
part at a time (``PARTS``), and the whole harness, each between two bare blocks, in one
order and then the reverse, and prints each one's wall-clock ratio to the mean of the two
bare blocks around it: median, range, and a 95% interval of the median. It then prints
what each part adds per step to a step that does nothing (``null_step_costs``: microseconds,
and their share of the model's step), which a loaded machine's noise cannot hide.

    python benchmarks/harness_overhead.py [--model cifarnet --batch-size 32 --size 32]
    python benchmarks/harness_overhead.py --ablate --pairs 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch
from scipy import stats as scipy_stats

from common import abba, add_model_arguments, pair_line, warmed_up_step
from trainperf import models
from trainperf.measure.divergence import LossWatch
from trainperf.measure.policy import FixedPolicy
from trainperf.measure.probes import CaseProbes
from trainperf.measure.stats import summarize
from trainperf.measure.timed_steps import measure_steps
from trainperf.measure.timer import make_timer
from trainperf.step.training_step import Step, StepOptions, TrainingStep

THRESHOLD = 0.99


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def hand_step(t: TrainingStep, spec: models.ModelSpec) -> Callable[[], torch.Tensor]:
    """The step a user writes, on trainperf's model, optimizer and batch (fp32)."""
    model, optimizer, inputs, targets, loss_of = (
        t.model,
        t.optimizer,
        t.inputs,
        t.targets,
        spec.loss,
    )

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    return step


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
    """(reported samples/s, wall-clock samples/s) of trainperf measuring N steps as a case."""
    probes = CaseProbes(device)  # built before the case measures, as run_case does
    synchronize(device)
    start = time.perf_counter()
    losses = LossWatch()
    record = measure_steps(
        t.step, FixedPolicy(0, steps), make_timer(device.type), probes=probes, losses=losses
    )
    losses.check()
    synchronize(device)
    wall = t.samples_per_step * steps / (time.perf_counter() - start)
    return summarize(record.step_s, t.samples_per_step).samples_per_s_mean, wall


def part_block(
    t: TrainingStep, spec: models.ModelSpec, device: torch.device, steps: int, part: str
) -> float:
    """Wall-clock samples/s of N steps: the bare loop plus the one harness ``part``."""
    step = t.step if part == "trainperf step" else hand_step(t, spec)
    probes = CaseProbes(device) if part == "probes" else None
    synchronize(device)
    start = time.perf_counter()
    if part == "timer":
        timer = make_timer(device.type)
        for _ in range(steps):
            timer.start()
            step()
            timer.stop()
        timer.durations()
    elif part == "loss watch":
        losses = LossWatch()
        for _ in range(steps):
            losses.add(step())
        losses.end_warmup()
        losses.end_measuring()
        losses.check()
    elif part == "loop":  # measure_steps' loop and policy, with a timer that does nothing
        measure_steps(step, FixedPolicy(0, steps), NullTimer(steps))
    else:  # "trainperf step" or "probes"
        if probes is not None:
            probes.begin()
        for _ in range(steps):
            step()
        if probes is not None:
            probes.end()
    synchronize(device)
    return t.samples_per_step * steps / (time.perf_counter() - start)


class NullTimer:
    """A step timer that reads no clock (its windows all zero), to time the loop alone."""

    def __init__(self, steps: int) -> None:
        self._steps, self._count = steps, 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self._count += 1

    def durations(self) -> list[float]:
        return [0.0] * self._count

    def reset(self) -> None:
        self._count = 0


# One harness part at a time, on top of the bare loop.
PARTS = ("trainperf step", "timer", "loss watch", "loop", "probes")

NULL_STEPS = 20_000  # iterations of each null-step loop


class _Null:
    """The optimizer, loss and model of a step that does nothing (its Python calls only)."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass

    def step(self) -> None:
        pass

    def backward(self) -> None:
        pass

    def __call__(self, *args: object) -> _Null:
        return self


def null_step_costs(repeats: int = 7) -> dict[str, float]:
    """Microseconds per step that each harness part adds to a step that does nothing: what
    the part itself costs, resolvable where the ratios of whole blocks are not (a loaded
    machine's noise is percents of a block). Each: the median of ``repeats`` loops of
    ``NULL_STEPS`` iterations, less the bare loop's. "timer" and "trainperf step" are
    inside the timed windows (they count in the reported throughput); "loss watch" (the
    loss's ``detach`` between windows), "loss check" (after the window) and "loop" (all of
    measure_steps with its timer and loss watch) count in the wall clock only."""
    null = _Null()
    plain = Step(None, null, null, null, null, torch.device("cpu"), StepOptions(), None)
    batch = (torch.zeros(()), torch.zeros(()))
    trainperf_step = lambda: plain(lambda: batch)  # noqa: E731 (as build_training_step)
    loss = torch.zeros((), requires_grad=True) * 1.0

    def hand() -> torch.Tensor:  # the same calls, written in the loop, and a real 0-d loss
        null.zero_grad(set_to_none=True)
        out = null(null(batch[0]), batch[1])
        out.backward()
        null.step()
        return loss

    def loop(part: str) -> float:
        clock, n = time.perf_counter, NULL_STEPS
        start = clock()
        if part == "bare":
            for _ in range(n):
                hand()
        elif part == "trainperf step":
            for _ in range(n):
                trainperf_step()
        elif part == "timer":
            timer = make_timer("cpu")
            for _ in range(n):
                timer.start()
                hand()
                timer.stop()
            timer.durations()
        elif part in ("loss watch", "loss check"):
            losses = LossWatch()
            for _ in range(n):
                losses.add(hand())
            if part == "loss check":
                start = clock()
                losses.check()
        else:  # "loop": measure_steps, its timer and loss watch, as a case runs them
            measure_steps(hand, FixedPolicy(0, n), make_timer("cpu"), losses=LossWatch())
        return (clock() - start) / n * 1e6

    parts = ("bare", "trainperf step", "timer", "loss watch", "loop")
    times = {part: statistics.median(loop(part) for _ in range(repeats)) for part in parts}
    bare = times.pop("bare")
    costs = {part: t - bare for part, t in times.items()}
    costs["loss check"] = statistics.median(loop("loss check") for _ in range(repeats))
    return costs


def round_order(names: Sequence[str], index: int) -> list[str]:
    """The blocks of round ``index``: ``names`` in order, then reversed (ABBA over several
    blocks), with a bare block before the first and after each, so that every block is
    compared with the bare blocks on either side of it, never two bare blocks in a row."""
    ordered = list(names) if index % 2 == 0 else list(reversed(names))
    return ["bare"] + [block for name in ordered for block in (name, "bare")]


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval of the median: the order statistics (k, n-k+1) with
    k the largest such that P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2 (n = 30: the
    10th and 21st). With too few values for that, the whole range."""
    ordered, alpha = sorted(values), (1 - confidence) / 2
    n, k = len(ordered), 0
    while k < n // 2 and scipy_stats.binom.cdf(k, n, 0.5) <= alpha:
        k += 1
    if k < 1:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


def describe(name: str, ratios: Sequence[float]) -> str:
    low, high = median_interval(ratios)
    return (
        f"  {name:<24s} {statistics.median(ratios):.4f}  95% CI of the median "
        f"{low:.4f}..{high:.4f}  range {min(ratios):.4f}..{max(ratios):.4f}"
    )


def ablate(args: argparse.Namespace, spec: models.ModelSpec, device, training) -> int:
    names = [*PARTS, "trainperf (wall)"]
    ratios: dict[str, list[float]] = {name: [] for name in names}
    reported: list[float] = []
    bare_speeds: list[float] = []
    for index in range(args.pairs):
        order, speeds = round_order(names, index), []
        harness = 0.0
        for name in order:
            if name == "bare":
                speeds.append(bare_block(training, spec, device, args.steps))
            elif name == "trainperf (wall)":
                harness, wall = harness_block(training, device, args.steps)
                speeds.append(wall)
            else:
                speeds.append(part_block(training, spec, device, args.steps, name))
        for i in range(1, len(order), 2):  # each part / the mean of the bare blocks around it
            bare = (speeds[i - 1] + speeds[i + 1]) / 2
            ratios[order[i]].append(speeds[i] / bare)
            if order[i] == "trainperf (wall)":
                reported.append(harness / bare)
        bare_speeds += speeds[::2]
        print(
            f"round {index + 1:2d}: bare {statistics.median(speeds[::2]):8.1f} samples/s  "
            + "  ".join(f"{name} {ratios[name][-1]:.3f}" for name in ratios),
            flush=True,
        )
    print(
        f"{args.model} b{args.batch_size} @{args.size} on {args.device}, {args.pairs} rounds "
        f"of {args.steps}-step blocks, each block / the bare blocks on either side:"
    )
    for name, values in ratios.items():
        print(describe(name, values))
    print(describe("trainperf (reported)", reported))
    step_us = training.samples_per_step / statistics.median(bare_speeds) * 1e6
    print(
        f"what each part adds per step to a step that does nothing (the model's: {step_us:.0f} us):"
    )
    for name, cost in null_step_costs().items():
        where = "per loss, after the window" if name == "loss check" else "per step"
        print(f"  {name:<24s} {cost:7.3f} us {where}  ({cost / step_us:.4%} of the model's step)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(parser)
    parser.add_argument("--threads", type=int, help="torch intra-op threads (CPU)")
    parser.add_argument("--steps", type=int, default=50, help="steps per block")
    parser.add_argument("--pairs", type=int, default=30, help="block pairs (ABBA order)")
    parser.add_argument("--ablate", action="store_true", help="each harness part's cost")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    spec, device, training = warmed_up_step(args)
    if args.ablate:
        return ablate(args, spec, device, training)

    reported, wall = [], []
    blocks = abba(
        args.pairs,
        lambda: bare_block(training, spec, device, args.steps),
        lambda: harness_block(training, device, args.steps),
    )
    for pair, bare, (harness, harness_wall) in blocks:
        reported.append(harness / bare)
        wall.append(harness_wall / bare)
        ratios = {"reported/bare": harness / bare, "wall/bare": harness_wall / bare}
        print(pair_line(pair, bare, harness, ratios), flush=True)
    median = statistics.median(reported)
    print(
        f"{args.model} b{args.batch_size} @{args.size} on {args.device}, "
        f"{args.pairs} pairs of {args.steps}-step blocks:"
    )
    print(describe("trainperf reported / bare", reported) + f"; required >= {THRESHOLD}")
    print(describe("trainperf wall clock / bare", wall))
    return 0 if median >= THRESHOLD else 1


if __name__ == "__main__":
    sys.exit(main())
