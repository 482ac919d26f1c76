"""What the image data sets share: per-sample random numbers, crops, normalization.

Random augmentation draws from a NumPy generator seeded with (seed, epoch, sample index),
not from a per-worker stream: a sample gets the same crop and flip whichever worker loads
it and however many workers there are, so a run is reproducible given its seed and the
number of workers does not change what the model sees. The sampler hands the epoch to the
data set with each index (``(epoch, index)`` keys, see trainperf.datasets.loader).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

# RandomResizedCrop's defaults (Szegedy et al. 2015, "Going deeper with convolutions", as
# torchvision implements them): 8% to 100% of the area, aspect ratio 3/4 to 4/3.
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)
CROP_ATTEMPTS = 10
# Eval: resize the shorter side to size * 256/224, then take the centre (ResNet practice).
EVAL_RESIZE_RATIO = 256 / 224


def split_key(key: int | tuple[int, int]) -> tuple[int, int]:
    """(epoch, index) of a data-set key: ``(epoch, index)`` from our samplers, or an index."""
    if isinstance(key, tuple):
        epoch, index = key
        return int(epoch), int(index)
    return 0, int(key)


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The random numbers of one sample in one epoch (independent of the loading worker)."""
    return np.random.default_rng((seed % 2**64, epoch, index))


def normalize(image: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 HWC RGB -> float32 CHW tensor of (x / 255 - mean) / std per channel."""
    scaled = image.astype(np.float32) * np.float32(1 / 255)
    scaled -= np.asarray(mean, dtype=np.float32)
    scaled /= np.asarray(std, dtype=np.float32)
    return torch.from_numpy(np.ascontiguousarray(scaled.transpose(2, 0, 1)))


def random_resized_crop_box(
    width: int, height: int, rng: np.random.Generator
) -> tuple[int, int, int, int]:
    """(left, top, w, h) of a RandomResizedCrop region of a ``width`` x ``height`` image.

    Area uniform in CROP_SCALE of the image, aspect ratio log-uniform in CROP_RATIO; after
    CROP_ATTEMPTS draws that do not fit, the centre crop of the largest allowed aspect.
    """
    area = width * height
    log_low, log_high = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    for _ in range(CROP_ATTEMPTS):
        target = area * rng.uniform(*CROP_SCALE)
        aspect = math.exp(rng.uniform(log_low, log_high))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return left, top, w, h
    aspect = width / height
    if aspect < CROP_RATIO[0]:
        w, h = width, round(width / CROP_RATIO[0])
    elif aspect > CROP_RATIO[1]:
        w, h = round(height * CROP_RATIO[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def random_resized_crop(image: Image.Image, size: int, rng: np.random.Generator) -> Image.Image:
    """A random region of ``image`` (see ``random_resized_crop_box``) resized to size x size."""
    left, top, w, h = random_resized_crop_box(image.width, image.height, rng)
    return image.resize((size, size), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))


def resize_center_crop(image: Image.Image, size: int) -> Image.Image:
    """The eval view: shorter side resized to round(size * 256/224), the centre size x size.

    Done as one resampling of the region that survives the crop (the same pixels as
    resizing the whole image and then cropping, without resizing what is thrown away).
    """
    shorter = round(size * EVAL_RESIZE_RATIO)
    scale = shorter / min(image.width, image.height)
    new_w, new_h = round(image.width * scale), round(image.height * scale)
    left, top = (new_w - size) / 2, (new_h - size) / 2
    box = (left / scale, top / scale, (left + size) / scale, (top + size) / scale)
    return image.resize((size, size), Image.Resampling.BILINEAR, box=box)
