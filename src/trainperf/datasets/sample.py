"""A generated JPEG image folder, so the input pipeline can be measured with no download.

``ensure_jpeg_sample`` writes ``DIR/train/class_NN/NNNNN.jpg``: random-noise RGB images
stored as JPEG at quality 90. Noise does not compress, so a 400 x 350 image (the mean size
of ImageNet's training images) makes a file of about 120 kB, near ImageNet's average,
and costs what a real photograph costs to decode. It measures the decode + augment
pipeline (file read, JPEG decode, RandomResizedCrop, flip, normalization, collation, the
loader's processes) and nothing about a real data set's accuracy: the labels are
arbitrary and the model learns nothing from them.

The folder is written once and reused: a marker file records the parameters, and a
folder whose marker differs is replaced. It is written into a temporary folder beside
the target and renamed into place, so concurrent writers (the ranks of a distributed
case) never see half a sample; a writer that loses the race keeps the winner's folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

MARKER = "trainperf-jpeg-sample.json"
QUALITY = 90
DEFAULT_IMAGES = 256
DEFAULT_SIZE = (400, 350)  # width, height: the mean of ImageNet's training images
DEFAULT_CLASSES = 10  # within every zoo model's classes (cifarnet has 10)


def ensure_jpeg_sample(
    directory: str | Path,
    images: int = DEFAULT_IMAGES,
    size: int | tuple[int, int] = DEFAULT_SIZE,
    classes: int = DEFAULT_CLASSES,
    seed: int = 0,
) -> Path:
    """The image folder of generated JPEGs at ``directory``, written if not there yet.

    ``size`` is the images' side or (width, height); images are spread evenly over
    ``classes`` classes. Returns ``directory``.
    """
    directory = Path(directory)
    width, height = (size, size) if isinstance(size, int) else size
    if images < 1 or classes < 1 or width < 1 or height < 1:
        raise ValueError("a JPEG sample needs at least one image, one class and 1x1 pixels")
    params = {
        "images": images,
        "width": width,
        "height": height,
        "classes": classes,
        "seed": seed,
        "quality": QUALITY,
    }
    if _marker(directory) == params:
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        _write(staging, params)
        _install(staging, directory, params)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def _marker(directory: Path) -> dict | None:
    try:
        return json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _write(folder: Path, params: dict) -> None:
    rng = np.random.default_rng(params["seed"])
    shape = (params["height"], params["width"], 3)
    digits = len(str(params["classes"] - 1))
    for index in range(params["images"]):
        label = index % params["classes"]
        class_dir = folder / "train" / f"class_{label:0{digits}d}"
        class_dir.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, size=shape, dtype=np.uint8)
        Image.fromarray(pixels).save(class_dir / f"{index:05d}.jpg", quality=QUALITY)
    (folder / MARKER).write_text(json.dumps(params))


def _install(staging: Path, directory: Path, params: dict) -> None:
    """Rename ``staging`` to ``directory``, replacing an outdated sample there."""
    if directory.exists():
        if _marker(directory) == params:
            return  # another process finished first
        retired = Path(tempfile.mkdtemp(prefix=f".{directory.name}-old-", dir=directory.parent))
        with contextlib.suppress(FileNotFoundError):  # another process moved it first
            os.rename(directory, retired / directory.name)
        shutil.rmtree(retired, ignore_errors=True)
    try:
        os.rename(staging, directory)
    except OSError:
        if _marker(directory) != params:  # not a concurrent writer's identical sample
            raise
