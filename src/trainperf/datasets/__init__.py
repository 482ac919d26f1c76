"""Real training data: CIFAR-10, image folders, token files and a generated JPEG sample.

``parse_data`` reads a case's ``data`` string (trainperf.datasets.source lists the forms);
``check_source`` checks it against a model without reading the data; ``make_loaders``
builds the training and eval ``DataLoader``s (trainperf.datasets.loader), the contract of
benchmark cases and of time-to-accuracy training alike.
"""

import importlib
from typing import Any

from trainperf.datasets.source import DataError, DataSource, cache_dir, parse_data

# Names of the modules that import torch (readers, loaders), imported on first use
# (PEP 562): a reader of stored cases parses their ``data`` without starting torch.
_TORCH_NAMES = {
    "read_cifar10": "cifar",
    "write_cifar10": "cifar",
    "Loaders": "loader",
    "check_source": "loader",
    "endless_batches": "loader",
    "make_loaders": "loader",
    "sample_size": "loader",
    "ensure_jpeg_sample": "sample",
}


def __getattr__(name: str) -> Any:
    if name not in _TORCH_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_TORCH_NAMES[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "DataError",
    "DataSource",
    "Loaders",
    "cache_dir",
    "check_source",
    "endless_batches",
    "ensure_jpeg_sample",
    "make_loaders",
    "parse_data",
    "read_cifar10",
    "sample_size",
    "write_cifar10",
]
