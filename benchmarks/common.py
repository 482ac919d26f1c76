"""What the benchmark scripts share: the model flags and one warmed-up training step.

The scripts run as ``python benchmarks/NAME.py``, which puts this directory on sys.path.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

from trainperf import models
from trainperf.case.spec import make_case
from trainperf.step.training_step import TrainingStep, build_training_step

A = TypeVar("A")
B = TypeVar("B")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --batch-size, --size, --device, --warmup; short steps by default on a CPU
    (a fixed per-step cost weighs most against them), ResNet-50 on a GPU."""
    cuda = torch.cuda.is_available()
    parser.add_argument("--model", default="resnet50" if cuda else "cifarnet")
    parser.add_argument("--batch-size", type=int, default=128 if cuda else 32)
    parser.add_argument(
        "--size", type=int, default=224 if cuda else 32, help="image size or sequence length"
    )
    parser.add_argument("--device", default="cuda" if cuda else "cpu")
    parser.add_argument("--warmup", type=int, default=10)


def overhead_parser(doc: str, steps: int, pairs: int) -> argparse.ArgumentParser:
    """The flags of a benchmark that times blocks in ABBA pairs (with and without what it
    measures the cost of): the model's, --steps per block and --pairs, with these defaults."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_model_arguments(parser)
    parser.add_argument("--steps", type=int, default=steps, help="steps per block")
    parser.add_argument("--pairs", type=int, default=pairs, help="block pairs (ABBA order)")
    return parser


def warmed_up_step(args: argparse.Namespace) -> tuple[models.ModelSpec, torch.device, TrainingStep]:
    """The model, optimizer and batch of ``args``, built once and run ``--warmup`` steps."""
    spec = models.get(args.model)
    case = make_case(
        model=args.model,
        batch_size=args.batch_size,
        device=args.device,
        **{spec.size_name: args.size},
    )
    device = torch.device(args.device)
    training = build_training_step(spec, case, device)
    for _ in range(args.warmup):
        training.step()
    return spec, device, training


def abba(pairs: int, first: Callable[[], A], second: Callable[[], B]) -> Iterator[tuple[int, A, B]]:
    """``pairs`` pairs of blocks, ``first`` then ``second`` in even pairs and the reverse in
    odd ones (ABBA): a drift of the machine between two blocks (another tenant, the clock)
    favours each side as often. Yields (pair, what first gave, what second gave)."""
    for pair in range(pairs):
        if pair % 2 == 0:
            a = first()
            b = second()
        else:
            b = second()
            a = first()
        yield pair, a, b


def pair_line(pair: int, bare: float, trainperf: float, ratios: dict[str, float]) -> str:
    """One pair's line of an overhead benchmark: both throughputs and the named ratios."""
    shown = "".join(f"  {name} {value:.4f}" for name, value in ratios.items())
    return f"pair {pair + 1:2d}: bare {bare:8.1f}  trainperf {trainperf:8.1f} samples/s{shown}"
