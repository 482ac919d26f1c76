"""Token files for causal language models, memory-mapped.

A token file is a flat sequence of token ids: ``.bin`` holds little-endian uint16 values
(nanoGPT's ``train.bin``/``val.bin``, enough for GPT-2's 50,257 ids), ``.npy`` a 1-D
array of integers. Samples are the non-overlapping windows of seq_len + 1 tokens; a
window w gives inputs ids[:-1] and next-token targets ids[1:] (int64). A trailing part
shorter than a window is not used.

Eval split: ``val.bin``/``val.npy`` beside a file named ``train.bin``/``train.npy``;
otherwise the last 5% of the windows (at least one when there are two or more), which
the training split then leaves out.

Ids at or above the model's vocabulary size are a DataError: checked over the whole file
up front when it holds up to EAGER_CHECK_TOKENS tokens, and per window otherwise (a scan
of a multi-GB file would cost more than the benchmark).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from trainperf.datasets.source import DataError
from trainperf.datasets.transforms import split_key

SUFFIXES = (".bin", ".npy")
EVAL_FRACTION = 0.05
EAGER_CHECK_TOKENS = 2**26
CHECK_CHUNK = 2**24


def open_tokens(path: Path) -> np.ndarray:
    """The token ids of ``path``, memory-mapped (1-D, integers)."""
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise DataError(f"{path}: a token file is .bin (uint16) or .npy, not '{path.suffix}'")
    if not path.is_file():
        raise DataError(f"token file {path} does not exist")
    if path.suffix == ".bin":
        if path.stat().st_size % 2:
            raise DataError(f"{path}: an odd number of bytes is not a sequence of uint16 tokens")
        if path.stat().st_size == 0:
            return np.zeros(0, dtype="<u2")
        return np.memmap(path, dtype="<u2", mode="r")
    try:
        tokens = np.load(path, mmap_mode="r")
    except ValueError as exc:
        raise DataError(f"{path}: not a NumPy array file: {exc}") from None
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise DataError(
            f"{path}: token ids must be a 1-D integer array, got {tokens.dtype} {tokens.shape}"
        )
    return tokens


def check_ids(tokens: np.ndarray, vocab_size: int, where: str) -> None:
    """DataError unless every id of ``tokens`` is in 0 .. vocab_size - 1."""
    if tokens.size == 0:
        return
    low, high = int(tokens.min()), int(tokens.max())
    if high >= vocab_size or low < 0:
        bad = high if high >= vocab_size else low
        raise DataError(f"{where}: token id {bad} is outside the vocabulary 0..{vocab_size - 1}")


class TokenWindows(Dataset):
    """Windows ``first`` .. ``first + count - 1`` of a token file (see the module doc).

    The file is opened lazily in each process (a memory map is not sent to the workers).
    """

    def __init__(self, path: Path, seq_len: int, first: int, count: int, vocab_size: int):
        self.path, self.seq_len, self.first, self.count = Path(path), seq_len, first, count
        self.vocab_size = vocab_size
        self._tokens: np.ndarray | None = None

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_tokens": None}

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        _, index = split_key(key)
        if not 0 <= index < self.count:
            raise IndexError(f"window {index} of {self.count}")
        if self._tokens is None:
            self._tokens = open_tokens(self.path)
        span = self.seq_len + 1
        start = (self.first + index) * span
        window = np.array(self._tokens[start : start + span], dtype=np.int64)
        if window.max() >= self.vocab_size or window.min() < 0:
            check_ids(window, self.vocab_size, f"{self.path} (tokens {start}..{start + span - 1})")
        ids = torch.from_numpy(window)
        return ids[:-1], ids[1:]


def token_splits(
    path: Path, seq_len: int, vocab_size: int
) -> tuple[TokenWindows, TokenWindows | None]:
    """(training windows, eval windows or None) of a token file (see the module doc)."""
    path = Path(path)
    tokens = _checked(path, seq_len, vocab_size)
    windows = len(tokens) // (seq_len + 1)
    sibling = eval_sibling(path)
    if sibling is not None:
        eval_windows = len(_checked(sibling, seq_len, vocab_size)) // (seq_len + 1)
        return (
            TokenWindows(path, seq_len, 0, windows, vocab_size),
            TokenWindows(sibling, seq_len, 0, eval_windows, vocab_size),
        )
    held_out = math.ceil(windows * EVAL_FRACTION) if windows >= 2 else 0
    train = TokenWindows(path, seq_len, 0, windows - held_out, vocab_size)
    if not held_out:
        return train, None
    return train, TokenWindows(path, seq_len, windows - held_out, held_out, vocab_size)


def eval_sibling(path: Path) -> Path | None:
    """``val.bin`` or ``val.npy`` beside a ``train.bin``/``train.npy``, if there is one."""
    if path.stem != "train":
        return None
    return next((c for s in SUFFIXES if (c := path.with_name(f"val{s}")).is_file()), None)


def _checked(path: Path, seq_len: int, vocab_size: int) -> np.ndarray:
    tokens = open_tokens(path)
    if len(tokens) < seq_len + 1:
        raise DataError(
            f"{path}: {len(tokens)} tokens, fewer than one window of seq_len + 1 = {seq_len + 1}"
        )
    if len(tokens) <= EAGER_CHECK_TOKENS:
        for start in range(0, len(tokens), CHECK_CHUNK):
            check_ids(tokens[start : start + CHECK_CHUNK], vocab_size, str(path))
    return tokens
