"""CIFAR-10 in its binary version (cifar-10-batches-bin), read into memory.

Layout (Krizhevsky 2009, https://www.cs.toronto.edu/~kriz/cifar.html): the training set
is ``data_batch_1.bin`` .. ``data_batch_5.bin`` (10,000 images each), the test set
``test_batch.bin``. A file is a sequence of 3,073-byte records: one label byte (0..9),
then 3,072 pixel bytes, the 1,024 red values, the 1,024 green, the 1,024 blue, each
plane a row-major 32x32 image. ``batches.meta.txt`` lists the class names, one per line.

Training view: random 32x32 crop of the image zero-padded by 4 pixels, random horizontal
flip (He et al. 2015, section 4.2), then per-channel normalization with the training
set's mean and standard deviation. Eval view: normalization only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from trainperf.datasets.source import DataError
from trainperf.datasets.transforms import normalize, sample_rng, split_key

SIDE = 32
PIXELS = 3 * SIDE * SIDE
RECORD_BYTES = 1 + PIXELS
CLASSES = 10
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILE = "test_batch.bin"
META_FILE = "batches.meta.txt"
PAD = 4
# Per-channel mean and standard deviation of the 50,000 training images (pixels / 255).
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def train_files(directory: Path) -> list[Path]:
    """The training batch files present in ``directory``; DataError when there are none."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"directory {directory} does not exist")
    present = [directory / name for name in TRAIN_FILES if (directory / name).is_file()]
    if not present:
        raise DataError(
            f"{directory} holds no CIFAR-10 training batch: missing {', '.join(TRAIN_FILES)} "
            "(the binary version, cifar-10-batches-bin)"
        )
    return present


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images N x 32 x 32 x 3 uint8 HWC, labels int64) of one binary batch file."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size == 0 or raw.size % RECORD_BYTES:
        raise DataError(
            f"{path}: {raw.size} bytes is not a whole number of {RECORD_BYTES}-byte "
            "CIFAR-10 records"
        )
    records = raw.reshape(-1, RECORD_BYTES)
    labels = records[:, 0].astype(np.int64)
    if (bad := np.flatnonzero(labels >= CLASSES)).size:
        raise DataError(
            f"{path}: record {bad[0]} has label {labels[bad[0]]}, not a CIFAR-10 class 0..9"
        )
    planes = records[:, 1:].reshape(-1, 3, SIDE, SIDE)
    return np.ascontiguousarray(planes.transpose(0, 2, 3, 1)), labels


def read_cifar10(directory: str | Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """The training (any of the 5 batch files present) or test set of a CIFAR-10 directory.

    Returns images as an N x 32 x 32 x 3 uint8 array (HWC, RGB) and labels as int64.
    """
    directory = Path(directory)
    if train:
        files = train_files(directory)
    else:
        files = [directory / TEST_FILE]
        if not files[0].is_file():
            raise DataError(f"{directory} holds no CIFAR-10 test batch: missing {TEST_FILE}")
    parts = [read_batch(path) for path in files]
    return (
        np.concatenate([images for images, _ in parts]),
        np.concatenate([labels for _, labels in parts]),
    )


def write_cifar10(path: str | Path, images: np.ndarray, labels: np.ndarray) -> None:
    """Write images (N x 32 x 32 x 3 uint8) and labels (0..9) as one binary batch file."""
    images, labels = np.asarray(images), np.asarray(labels)
    if images.shape[1:] != (SIDE, SIDE, 3) or images.dtype != np.uint8:
        raise ValueError(f"images must be N x 32 x 32 x 3 uint8, got {images.shape} {images.dtype}")
    if labels.shape != (len(images),) or labels.min(initial=0) < 0 or labels.max(initial=0) > 9:
        raise ValueError("labels must be one class 0..9 per image")
    records = np.empty((len(images), RECORD_BYTES), dtype=np.uint8)
    records[:, 0] = labels
    records[:, 1:] = images.transpose(0, 3, 1, 2).reshape(len(images), PIXELS)
    records.tofile(path)


def read_label_names(directory: str | Path) -> tuple[str, ...] | None:
    """The class names of ``batches.meta.txt``, or None without that file."""
    meta = Path(directory) / META_FILE
    if not meta.is_file():
        return None
    names = tuple(line.strip() for line in meta.read_text().splitlines() if line.strip())
    return names or None


class CifarDataset(Dataset):
    """CIFAR-10 images in memory; the training view augments (see the module doc)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, train: bool, seed: int = 0):
        self.images, self.labels, self.train, self.seed = images, labels, train, seed

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        epoch, index = split_key(key)
        image = self.images[index]
        if self.train:
            rng = sample_rng(self.seed, epoch, index)
            top, left = rng.integers(0, 2 * PAD + 1, size=2)
            padded = np.zeros((SIDE + 2 * PAD, SIDE + 2 * PAD, 3), dtype=np.uint8)
            padded[PAD : PAD + SIDE, PAD : PAD + SIDE] = image
            image = padded[top : top + SIDE, left : left + SIDE]
            if rng.random() < 0.5:
                image = image[:, ::-1]
        return normalize(image, MEAN, STD), int(self.labels[index])
