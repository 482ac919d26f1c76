"""Where a case's training data comes from: the ``data`` string of a case, parsed.

Forms (``parse_data``):

``synthetic``
    random tensors made once on the device (the default; no input pipeline at all);
``cifar10:DIR``
    the CIFAR-10 binary version (``data_batch_1.bin`` .. ``data_batch_5.bin``,
    ``test_batch.bin``), see trainperf.datasets.cifar;
``imagefolder:DIR``
    ImageNet-style class folders, ``DIR/train/<class>/*.jpg`` (and ``DIR/val/...``), or
    ``DIR/<class>/*.jpg`` with no eval split, see trainperf.datasets.imagefolder;
``tokens:FILE``
    a flat file of token ids for causal language models (``.bin`` of little-endian
    uint16, nanoGPT's layout, or a 1-D ``.npy``), see trainperf.datasets.tokens;
``jpeg-sample``
    generated random-noise JPEGs in an image folder under the cache directory
    (``$TRAINPERF_CACHE`` or ``~/.cache/trainperf``): the decode + augment pipeline of an
    ImageNet-like set without downloading one, see trainperf.datasets.sample.

Nothing is read here; paths are only expanded (``~``). Existence and compatibility with a
model are checked by ``trainperf.datasets.check_source`` when a case is checked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SYNTHETIC = "synthetic"
JPEG_SAMPLE = "jpeg-sample"
# Kinds that take a path after the colon, and what the path names.
PATH_KINDS = {"cifar10": "DIR", "imagefolder": "DIR", "tokens": "FILE"}
IMAGE_KINDS = ("cifar10", "imagefolder", JPEG_SAMPLE)
FORMS = (SYNTHETIC, "cifar10:DIR", "imagefolder:DIR", "tokens:FILE", JPEG_SAMPLE)


class DataError(ValueError):
    """A data set that cannot be used as given; the message is one line naming the file."""


@dataclass(frozen=True)
class DataSource:
    """A parsed ``data`` string: its kind and, for the kinds that have one, its path."""

    kind: str  # synthetic, cifar10, imagefolder, tokens or jpeg-sample
    path: Path | None = None
    text: str = SYNTHETIC  # as given, for messages and labels

    @property
    def is_synthetic(self) -> bool:
        return self.kind == SYNTHETIC

    @property
    def is_image(self) -> bool:
        return self.kind in IMAGE_KINDS

    @property
    def short_name(self) -> str:
        """The kind and the last part of the path: 'cifar10:cifar-10-batches-bin'."""
        if self.kind in PATH_KINDS and self.path is not None:
            return f"{self.kind}:{self.path.name or self.path}"
        return self.kind

    def __str__(self) -> str:
        return self.text


def cache_dir() -> Path:
    """Where trainperf keeps generated data: ``$TRAINPERF_CACHE`` or ``~/.cache/trainperf``."""
    configured = os.environ.get("TRAINPERF_CACHE")
    if configured:
        return expand(configured, f"TRAINPERF_CACHE={configured!r}")
    return expand("~", "the cache directory ~/.cache/trainperf") / ".cache" / "trainperf"


def expand(path: str, given: str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; DataError naming ``given`` (the
    variable or the data string) when that home is unknown (``Path.expanduser`` raises
    RuntimeError)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        home = path.split("/", 1)[0]
        raise DataError(
            f"{given}: cannot expand {home}: no such user, or no home directory known"
        ) from None


def parse_data(text: str) -> DataSource:
    """The data source a ``data`` string names; ``ValueError`` listing the forms otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"data must be a string: allowed {', '.join(FORMS)}")
    if text == SYNTHETIC:
        return DataSource(SYNTHETIC, None, text)
    if text == JPEG_SAMPLE:
        return DataSource(JPEG_SAMPLE, cache_dir() / JPEG_SAMPLE, text)
    kind, sep, path = text.partition(":")
    if sep and kind in PATH_KINDS and path.strip():
        return DataSource(kind, expand(path.strip(), f"data {text!r}"), text)
    if sep and kind in PATH_KINDS:
        raise ValueError(
            f"data {text!r} names no {PATH_KINDS[kind]}: give {kind}:{PATH_KINDS[kind]}"
        )
    raise ValueError(f"data {text!r} is not a data source: allowed {', '.join(FORMS)}")
