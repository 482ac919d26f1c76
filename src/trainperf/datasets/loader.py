"""Data loaders for a data source and a model: the one place that turns data into batches.

``make_loaders`` is what benchmark cases (trainperf.step.training_step) and time-to-accuracy
training call. Its loaders:
- train: shuffled every epoch, reproducibly given ``seed``: with ``world`` > 1 a
  ``DistributedSampler(num_replicas=world, rank=rank, shuffle=True, seed=seed)`` gives
  each rank its own shard, else a ``RandomSampler`` drawing from a ``torch.Generator``
  seeded with seed + epoch. Either way the loader's sampler has ``set_epoch(epoch)``
  (called before each epoch; without it the epochs simply count up) and hands the data set
  ``(epoch, index)`` keys, which seed each sample's augmentation (trainperf.datasets.transforms);
- eval: in order, no shuffling, last batch kept; with ``world`` > 1 rank r gets samples
  r, r + world, ... (no padding: summing correct counts over ranks is exact).
Both use ``workers`` loader processes (``prefetch_factor`` 4, persistent between epochs),
and pinned host memory when the device is a CUDA GPU, so ``.to(device, non_blocking=True)``
overlaps the copy with compute.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler, Sampler

from trainperf.datasets import cifar, imagefolder, sample, tokens
from trainperf.datasets.source import DataError, DataSource, parse_data
from trainperf.models.spec import CausalLM, ImageClassification, ModelSpec

PREFETCH_FACTOR = 4
# One epoch of the JPEG sample visits its files this often in all: a few hundred steps per
# epoch, as with a real data set, so the prefetch restart at each epoch weighs little.
JPEG_SAMPLE_EPOCH = 12_800


@dataclass(frozen=True)
class Loaders:
    """The loaders of one data source for one model (see ``make_loaders``).

    ``train_samples``/``eval_samples`` count the whole split (all ranks); ``num_classes``
    is the data set's class count for image data (None for tokens); ``size`` is the image
    side or sequence length of the samples.
    """

    train: DataLoader
    eval: DataLoader | None
    num_classes: int | None
    train_samples: int
    eval_samples: int
    size: int
    class_names: tuple[str, ...] | None = None


class EpochSampler(Sampler):
    """Yields ``(epoch, index)`` keys in the order of a shuffled sampler for that epoch."""

    def __init__(self, order: DistributedSampler | RandomSampler, seed: int):
        self.order, self.seed, self.epoch = order, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        if isinstance(self.order, DistributedSampler):
            self.order.set_epoch(epoch)
        else:
            self.order.generator.manual_seed(self.seed + epoch)
        return ((epoch, index) for index in self.order)


def endless_batches(loader: DataLoader) -> Iterator[Any]:
    """The batches of ``loader``, epoch after epoch, telling its sampler each epoch."""
    if len(loader) == 0:
        raise DataError("the training split is smaller than one batch")
    for epoch in count():
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        yield from loader


def sample_size(source: DataSource, spec: ModelSpec, size: int | None) -> int:
    """The image side or sequence length of the samples: ``size``, else CIFAR-10's 32 for
    CIFAR-10, else the model's natural size (SizeError if the model cannot take it)."""
    if size is None and source.kind == "cifar10":
        size = cifar.SIDE
    return spec.resolve_size(size)


def check_source(source: DataSource, spec: ModelSpec, size: int | None) -> None:
    """What can be checked without reading the data: paths exist, data suits the model.

    ``size`` is the case's image size or sequence length (None: see ``sample_size``).
    Raises DataError.
    """
    if source.is_synthetic:
        return
    _check_kind(source, spec)
    size = sample_size(source, spec, size)
    if source.kind == "cifar10":
        cifar.train_files(source.path)
        if size != cifar.SIDE:
            raise DataError(f"CIFAR-10 images are 32x32: give image_size 32, not {size}")
    elif source.kind == "imagefolder":
        train, _ = imagefolder.splits(source.path)
        _check_classes(len(imagefolder.find_classes(train)), spec, source)
    elif source.kind == "tokens":
        tokens.open_tokens(source.path)
    elif source.kind == "jpeg-sample":
        _check_classes(sample.DEFAULT_CLASSES, spec, source)


def make_loaders(
    source: DataSource | str,
    spec: ModelSpec,
    size: int | None,
    batch_size: int,
    workers: int,
    device: torch.device | str,
    seed: int,
    rank: int = 0,
    world: int = 1,
    drop_last: bool = True,
) -> Loaders:
    """Training and eval loaders of ``source`` for ``spec`` (see the module doc).

    ``size``: image side (imagefolder, jpeg-sample; CIFAR-10 is always 32) or sequence
    length (tokens); None takes the model's natural size (32 for CIFAR-10). ``batch_size``
    is per rank. Raises DataError for unusable data (missing files, corrupt records,
    labels or ids the model cannot take).
    """
    if isinstance(source, str):
        source = parse_data(source)
    if source.is_synthetic:
        raise DataError("synthetic data has no loader: its batches are made on the device")
    device = torch.device(device)
    check_source(source, spec, size)
    size = sample_size(source, spec, size)
    train, evaluate, num_classes, names = _datasets(source, spec, size, seed)
    options: dict[str, Any] = {"num_workers": workers, "pin_memory": device.type == "cuda"}
    if workers > 0:
        options |= {"prefetch_factor": PREFETCH_FACTOR, "persistent_workers": True}
    generator = torch.Generator().manual_seed(seed)  # seeds the worker processes
    if world > 1:
        order: Any = DistributedSampler(
            train, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=drop_last
        )
    else:
        order = RandomSampler(train, generator=torch.Generator().manual_seed(seed))
    train_loader = DataLoader(
        train,
        batch_size=batch_size,
        sampler=EpochSampler(order, seed),
        drop_last=drop_last,
        generator=generator,
        **options,
    )
    eval_loader = None
    if evaluate is not None:
        shard = range(rank, len(evaluate), world)
        eval_loader = DataLoader(evaluate, batch_size=batch_size, sampler=shard, **options)
    return Loaders(
        train=train_loader,
        eval=eval_loader,
        num_classes=num_classes,
        train_samples=len(train),
        eval_samples=len(evaluate) if evaluate is not None else 0,
        size=size,
        class_names=names,
    )


def _datasets(
    source: DataSource, spec: ModelSpec, size: int, seed: int
) -> tuple[Dataset, Dataset | None, int | None, tuple[str, ...] | None]:
    """(train, eval or None, class count, class names) of a source."""
    if source.kind == "cifar10":
        images, labels = cifar.read_cifar10(source.path, train=True)
        train = cifar.CifarDataset(images, labels, train=True, seed=seed)
        evaluate = None
        if (source.path / cifar.TEST_FILE).is_file():
            test_images, test_labels = cifar.read_cifar10(source.path, train=False)
            evaluate = cifar.CifarDataset(test_images, test_labels, train=False)
        return train, evaluate, cifar.CLASSES, cifar.read_label_names(source.path)
    if source.kind == "tokens":
        vocab = spec.task.vocab_size  # a CausalLM: _check_kind made sure
        train_windows, eval_windows = tokens.token_splits(source.path, size, vocab)
        return train_windows, eval_windows, None, None
    repeat = 1
    root = source.path
    if source.kind == "jpeg-sample":
        root = sample.ensure_jpeg_sample(root)
        repeat = math.ceil(JPEG_SAMPLE_EPOCH / sample.DEFAULT_IMAGES)
    train_dir, val_dir = imagefolder.splits(root)
    classes = imagefolder.find_classes(train_dir)
    _check_classes(len(classes), spec, source)
    train = imagefolder.ImageFolderDataset(
        imagefolder.scan(train_dir, classes), size, train=True, seed=seed, repeat=repeat
    )
    evaluate = None
    if val_dir is not None:
        evaluate = imagefolder.ImageFolderDataset(
            imagefolder.scan(val_dir, classes), size, train=False
        )
    return train, evaluate, len(classes), tuple(classes)


def _check_kind(source: DataSource, spec: ModelSpec) -> None:
    if source.is_image and not isinstance(spec.task, ImageClassification):
        raise DataError(
            f"{source.kind} data feeds image classification models; {spec.name} is not one"
        )
    if source.kind == "tokens" and not isinstance(spec.task, CausalLM):
        raise DataError(
            f"token files feed causal language models (gpt2-*) only; {spec.name} is not one"
        )


def _check_classes(classes: int, spec: ModelSpec, source: DataSource) -> None:
    predicted = spec.task.num_classes
    if classes > predicted:
        raise DataError(
            f"{source} has {classes} classes but {spec.name} predicts {predicted}: "
            "labels must be below the model's class count"
        )
