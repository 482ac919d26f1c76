"""A tiny CIFAR-10 directory in the binary layout, written by the test suite itself."""

import numpy as np
import pytest

from trainperf.datasets import write_cifar10


@pytest.fixture
def cifar_dir(tmp_path):
    """64 training images (two batch files) and 16 test images, labels 0..9."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(80, 32, 32, 3), dtype=np.uint8)
    labels = np.arange(80) % 10
    write_cifar10(tmp_path / "data_batch_1.bin", images[:40], labels[:40])
    write_cifar10(tmp_path / "data_batch_3.bin", images[40:64], labels[40:64])
    write_cifar10(tmp_path / "test_batch.bin", images[64:], labels[64:])
    return tmp_path
