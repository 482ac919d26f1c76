"""What every model of the zoo declares: how to build it, what a batch looks like, its loss.

A ``ModelSpec`` joins a network factory to a ``Task``. The task owns the shape of the data
(synthetic inputs and targets) and the loss, so ``spec.loss(model(inputs), targets)`` is the
training loss of one step for every model, whatever its kind of input.

Sizes: image models take ``image_size`` (square, 3 channels); language models take
``seq_len``. Each spec has a natural size (what the literature measured) and accepts smaller
ones so CPU runs and tests stay small.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

Batch = tuple[torch.Tensor, torch.Tensor]


class SizeError(ValueError):
    """An image size or sequence length outside what a model accepts."""


@contextmanager
def overflow_is_a_size_error(model: str, size: int) -> Iterator[None]:
    """Tracing ``model`` at ``size`` (on the meta device) whose tensors have more elements
    than a 64-bit size holds ("Storage size calculation overflowed", "Overflow when
    unpacking long long"): SizeError, not torch's traceback. Other errors pass through."""
    try:
        yield
    except (RuntimeError, TypeError, OverflowError) as exc:
        if "overflow" not in str(exc).lower():
            raise
        raise SizeError(
            f"{model} at size {size}: its tensors would hold more than 2^63 elements; "
            "give a smaller size"
        ) from exc


@dataclass(frozen=True)
class Task:
    """The data and loss of one kind of training problem. Subclasses fill in the shapes."""

    size_name: str = field(init=False, default="image_size")

    def example_batch(self, batch_size: int, size: int, device: torch.device | str) -> Batch:
        raise NotImplementedError

    def loss(self, outputs: Any, targets: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def tokens_per_sample(self, size: int) -> int | None:
        """Tokens one sample carries (language models); None for images."""
        return None


@dataclass(frozen=True)
class ImageClassification(Task):
    """Float images (B, 3, S, S) -> logits (B, classes); cross-entropy against class ids."""

    num_classes: int = 1000

    def example_batch(self, batch_size: int, size: int, device: torch.device | str) -> Batch:
        images = torch.randn(batch_size, 3, size, size, device=device)
        labels = torch.randint(0, self.num_classes, (batch_size,), device=device)
        return images, labels

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs, targets)


@dataclass(frozen=True)
class MultipleChoice(Task):
    """Token ids (B, choices, L) -> one score per choice (B, choices); cross-entropy (SWAG)."""

    vocab_size: int = 30522
    num_choices: int = 4
    size_name: str = field(init=False, default="seq_len")

    def example_batch(self, batch_size: int, size: int, device: torch.device | str) -> Batch:
        ids = torch.randint(0, self.vocab_size, (batch_size, self.num_choices, size), device=device)
        answer = torch.randint(0, self.num_choices, (batch_size,), device=device)
        return ids, answer

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs, targets)

    def tokens_per_sample(self, size: int) -> int:
        return self.num_choices * size


@dataclass(frozen=True)
class SpanExtraction(Task):
    """Token ids (B, L) -> start/end logits (B, L, 2); mean of the two cross-entropies (SQuAD)."""

    vocab_size: int = 30522
    size_name: str = field(init=False, default="seq_len")

    def example_batch(self, batch_size: int, size: int, device: torch.device | str) -> Batch:
        ids = torch.randint(0, self.vocab_size, (batch_size, size), device=device)
        span = torch.randint(0, size, (batch_size, 2), device=device)
        return ids, span

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        start = F.cross_entropy(outputs[..., 0], targets[:, 0])
        end = F.cross_entropy(outputs[..., 1], targets[:, 1])
        return (start + end) / 2

    def tokens_per_sample(self, size: int) -> int:
        return size


@dataclass(frozen=True)
class CausalLM(Task):
    """Token ids (B, L) -> next-token logits (B, L, vocab); cross-entropy over every position."""

    vocab_size: int = 50257
    size_name: str = field(init=False, default="seq_len")

    def example_batch(self, batch_size: int, size: int, device: torch.device | str) -> Batch:
        ids = torch.randint(0, self.vocab_size, (batch_size, size), device=device)
        # Synthetic data: the next-token targets need not be the shifted inputs for timing,
        # but they are, so a loss curve on synthetic data still means something.
        targets = torch.roll(ids, shifts=-1, dims=1)
        return ids, targets

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))

    def tokens_per_sample(self, size: int) -> int:
        return size


@dataclass(frozen=True)
class ModelSpec:
    """A named network of the zoo (or a user's), ready to build and to feed.

    ``factory(**options)`` returns the ``nn.Module``; ``natural_size`` is the image size or
    sequence length of the reference setting; ``min_size``/``max_size`` bound the sizes the
    network accepts (``max_size`` None: no upper bound). ``optimizer`` names the optimizer
    the literature trains it with ("sgd": SGD with momentum, "adamw").
    """

    name: str
    family: str
    task: Task
    factory: Callable[..., nn.Module]
    natural_size: int
    min_size: int
    max_size: int | None = None
    optimizer: str = "sgd"
    description: str = ""

    @property
    def size_name(self) -> str:
        return self.task.size_name

    @property
    def is_language_model(self) -> bool:
        return self.task.size_name == "seq_len"

    def build(self, **options: Any) -> nn.Module:
        """A freshly initialised network; ``options`` go to the family's factory."""
        return self.factory(**options)

    def build_on_meta(self) -> nn.Module:
        """The network on the meta device (shapes and dtypes, no storage), in training
        mode: what the FLOP counter and the predictor trace without allocating it."""
        with torch.device("meta"):
            net = self.build()
        return net.train()

    def resolve_size(self, size: int | None) -> int:
        """The size to use: the natural one when None, else ``size`` if the model accepts it."""
        if size is None:
            return self.natural_size
        upper = "" if self.max_size is None else f"..{self.max_size}"
        if size < self.min_size or (self.max_size is not None and size > self.max_size):
            raise SizeError(
                f"{self.size_name} {size} is not accepted by {self.name}: "
                f"allowed {self.min_size}{upper or ' or more'} (natural {self.natural_size})"
            )
        return size

    def example_batch(
        self,
        batch_size: int,
        device: torch.device | str = "cpu",
        *,
        image_size: int | None = None,
        seq_len: int | None = None,
    ) -> Batch:
        """Synthetic ``(inputs, targets)`` of ``batch_size`` samples, made on ``device``."""
        sizes = {"image_size": image_size, "seq_len": seq_len}
        given = sizes.pop(self.size_name)
        ((wrong, other),) = sizes.items()
        if other is not None:
            raise SizeError(f"{self.name} takes {self.size_name}, not {wrong}")
        return self.task.example_batch(batch_size, self.resolve_size(given), device)

    def loss(self, outputs: Any, targets: torch.Tensor) -> torch.Tensor:
        """The training loss of one step: ``spec.loss(model(inputs), targets)``."""
        return self.task.loss(outputs, targets)

    def tokens_per_sample(self, size: int | None = None) -> int | None:
        return self.task.tokens_per_sample(self.resolve_size(size))


def image_classifier(
    name: str,
    factory: Callable[..., nn.Module],
    sizes: tuple[int, int],
    description: str,
    *,
    family: str | None = None,
    num_classes: int = 1000,
) -> ModelSpec:
    """The spec of a CNN classifier of the zoo: ``sizes`` is (natural, smallest) image size;
    trained with SGD with momentum, as its paper did; family the name unless given."""
    natural, smallest = sizes
    return ModelSpec(
        name=name,
        family=family or name,
        task=ImageClassification(num_classes=num_classes),
        factory=factory,
        natural_size=natural,
        min_size=smallest,
        optimizer="sgd",
        description=description,
    )
