import numpy as np
import pytest
import torch

from trainperf.datasets import DataError, read_cifar10, write_cifar10
from trainperf.datasets.cifar import MEAN, STD, CifarDataset, read_label_names


def test_the_binary_layout_reads_back_exactly(cifar_dir):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(80, 32, 32, 3), dtype=np.uint8)
    train_images, train_labels = read_cifar10(cifar_dir, train=True)
    assert train_images.shape == (64, 32, 32, 3) and train_images.dtype == np.uint8
    assert np.array_equal(train_images, images[:64])
    assert train_labels.dtype == np.int64 and list(train_labels) == [i % 10 for i in range(64)]
    test_images, test_labels = read_cifar10(cifar_dir, train=False)
    assert np.array_equal(test_images, images[64:]) and list(test_labels) == [
        4,
        5,
        6,
        7,
        8,
        9,
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
    ]


def test_records_are_label_then_red_green_blue_planes(tmp_path):
    image = np.zeros((1, 32, 32, 3), dtype=np.uint8)
    image[0, 0, 1] = (10, 20, 30)  # row 0, column 1
    write_cifar10(tmp_path / "b.bin", image, np.array([7]))
    raw = np.fromfile(tmp_path / "b.bin", dtype=np.uint8)
    assert raw.size == 3073 and raw[0] == 7
    assert (raw[1 + 1], raw[1 + 1024 + 1], raw[1 + 2048 + 1]) == (10, 20, 30)


def test_corrupt_files_name_the_file(cifar_dir):
    bad = cifar_dir / "data_batch_1.bin"
    bad.write_bytes(bad.read_bytes()[:-5])
    with pytest.raises(DataError, match=r"data_batch_1.bin: 122915 bytes is not a whole number"):
        read_cifar10(cifar_dir, train=True)
    record = bytearray(3073)
    record[0] = 12
    bad.write_bytes(bytes(record))
    with pytest.raises(DataError, match=r"data_batch_1.bin: record 0 has label 12, not a CIFAR"):
        read_cifar10(cifar_dir, train=True)
    assert issubclass(DataError, ValueError)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(DataError, match=f"directory {tmp_path / 'x'} does not exist"):
        read_cifar10(tmp_path / "x", train=True)
    with pytest.raises(DataError, match="missing data_batch_1.bin, data_batch_2.bin.*data_batch_5"):
        read_cifar10(tmp_path, train=True)
    with pytest.raises(DataError, match="missing test_batch.bin"):
        read_cifar10(tmp_path, train=False)


def test_label_names_are_optional(cifar_dir):
    assert read_label_names(cifar_dir) is None
    (cifar_dir / "batches.meta.txt").write_text("airplane\nautomobile\n\n")
    assert read_label_names(cifar_dir) == ("airplane", "automobile")


def test_eval_view_normalizes_and_train_view_crops_and_flips():
    image = np.full((1, 32, 32, 3), 128, dtype=np.uint8)
    evaluate = CifarDataset(image, np.array([3]), train=False)
    x, label = evaluate[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and label == 3
    for c in range(3):
        assert torch.allclose(x[c], torch.tensor((128 / 255 - MEAN[c]) / STD[c]))
    train = CifarDataset(image, np.array([3]), train=True, seed=5)
    crops = [train[(epoch, 0)][0] for epoch in range(20)]
    zero = torch.tensor([(0 - MEAN[c]) / STD[c] for c in range(3)])
    padded = [torch.isclose(x, zero[:, None, None], atol=1e-5).all(0).sum().item() for x in crops]
    assert all(n <= 32 * 32 - 28 * 28 for n in padded) and any(padded)  # shifted by <= 4
    assert torch.equal(train[(3, 0)][0], crops[3])  # the same (epoch, index): the same view
