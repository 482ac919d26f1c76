"""Real training data: CIFAR-10, image folders, token files and a generated JPEG sample.

``parse_data`` reads a case's ``data`` string (trainperf.datasets.source lists the forms);
``check_source`` checks it against a model without reading the data; ``make_loaders``
builds the training and eval ``DataLoader``s (trainperf.datasets.loader), the contract of
benchmark cases and of time-to-accuracy training alike.
"""

from trainperf.datasets.cifar import read_cifar10, write_cifar10
from trainperf.datasets.loader import (
    Loaders,
    check_source,
    endless_batches,
    make_loaders,
    sample_size,
)
from trainperf.datasets.sample import ensure_jpeg_sample
from trainperf.datasets.source import DataError, DataSource, cache_dir, parse_data

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
