"""ImageNet-style image folders: one subdirectory of images per class, decoded by Pillow.

``ROOT/train/<class>/*.jpg|jpeg|png`` is the training split and ``ROOT/val/<class>/...``
the eval split; a ROOT without ``train/`` is itself the class folders (no eval split).
Classes are the sorted subdirectory names of the training split; label = position.

Training view: RandomResizedCrop to size x size (see trainperf.datasets.transforms) and
a random horizontal flip; eval view: shorter side to round(size * 256/224), centre crop.
Both normalized with the ImageNet mean and standard deviation into float32 CHW tensors.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from trainperf.datasets.source import DataError
from trainperf.datasets.transforms import (
    normalize,
    random_resized_crop,
    resize_center_crop,
    sample_rng,
    split_key,
)

EXTENSIONS = (".jpg", ".jpeg", ".png")
# Per-channel mean and standard deviation of ImageNet-1k training images (pixels / 255).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

Sample = tuple[str, int]


def splits(root: Path) -> tuple[Path, Path | None]:
    """(training folder, eval folder or None) of an image-folder root."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"directory {root} does not exist")
    train = root / "train"
    if not train.is_dir():
        return root, None
    val = root / "val"
    return train, val if val.is_dir() else None


def find_classes(folder: Path) -> list[str]:
    """The sorted names of the class subdirectories of ``folder``."""
    classes = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    if not classes:
        raise DataError(f"{folder} has no class subdirectories (expected {folder}/<class>/*.jpg)")
    return classes


def scan(folder: Path, classes: list[str]) -> list[Sample]:
    """(path, label) of every image under ``folder/<class>/``, sorted by class then name."""
    samples: list[Sample] = []
    for label, name in enumerate(classes):
        directory = folder / name
        if not directory.is_dir():
            continue  # an eval split may lack a class
        files = sorted(
            entry.path
            for entry in os.scandir(directory)
            if entry.is_file() and entry.name.lower().endswith(EXTENSIONS)
        )
        samples += [(path, label) for path in files]
    if not samples:
        raise DataError(f"{folder} holds no {'/'.join(EXTENSIONS)} images in its class folders")
    return samples


class ImageFolderDataset(Dataset):
    """Images decoded from files; the training view augments (see the module doc).

    ``repeat`` makes one epoch visit every file that many times (each visit its own crop):
    the generated JPEG sample uses it so that epochs, where the loader's prefetching
    restarts, are as rare as with a real data set.
    """

    def __init__(
        self, samples: list[Sample], size: int, train: bool, seed: int = 0, repeat: int = 1
    ):
        self.samples, self.size, self.train, self.seed = samples, size, train, seed
        self.repeat = repeat

    def __len__(self) -> int:
        return len(self.samples) * self.repeat

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        epoch, index = split_key(key)
        path, label = self.samples[index % len(self.samples)]
        try:
            with Image.open(path) as file:
                image = file.convert("RGB")
        except OSError as exc:
            raise DataError(f"{path}: cannot decode the image: {exc}") from None
        if self.train:
            rng = sample_rng(self.seed, epoch, index)
            image = random_resized_crop(image, self.size, rng)
            if rng.random() < 0.5:
                image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        else:
            image = resize_center_crop(image, self.size)
        return normalize(np.asarray(image), IMAGENET_MEAN, IMAGENET_STD), label
