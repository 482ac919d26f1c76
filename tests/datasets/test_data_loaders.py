import json
from pathlib import Path

import pytest
import torch

from trainperf import models
from trainperf.datasets import (
    DataError,
    Loaders,
    check_source,
    endless_batches,
    ensure_jpeg_sample,
    make_loaders,
    parse_data,
)

CIFARNET = models.get("cifarnet")


def test_data_strings_parse_or_name_the_allowed_forms(tmp_path, monkeypatch):
    assert parse_data("synthetic").is_synthetic
    source = parse_data(f"cifar10:{tmp_path}")
    assert (source.kind, source.path, str(source)) == ("cifar10", tmp_path, f"cifar10:{tmp_path}")
    assert parse_data("tokens:~/t.bin").path == Path.home() / "t.bin"
    monkeypatch.setenv("TRAINPERF_CACHE", str(tmp_path))
    assert parse_data("jpeg-sample").path == tmp_path / "jpeg-sample"
    for bad in ("imagenet:/x", "cifar10:", "cifar10", ""):
        with pytest.raises(ValueError, match="synthetic|names no DIR"):
            parse_data(bad)
    with pytest.raises(ValueError, match="allowed synthetic, cifar10:DIR, imagefolder:DIR, tokens"):
        parse_data("imagenet:/x")


def test_check_source_catches_what_it_can_without_reading(tmp_path, cifar_dir):
    with pytest.raises(DataError, match=f"directory {tmp_path / 'x'} does not exist"):
        check_source(parse_data(f"cifar10:{tmp_path / 'x'}"), CIFARNET, None)
    with pytest.raises(DataError, match="CIFAR-10 images are 32x32: give image_size 32, not 64"):
        check_source(parse_data(f"cifar10:{cifar_dir}"), CIFARNET, 64)
    with pytest.raises(DataError, match="image classification models; gpt2-small is not one"):
        check_source(parse_data(f"cifar10:{cifar_dir}"), models.get("gpt2-small"), None)
    for n in range(11):
        (tmp_path / "many" / f"c{n}").mkdir(parents=True)
    with pytest.raises(DataError, match="has 11 classes but cifarnet predicts 10"):
        check_source(parse_data(f"imagefolder:{tmp_path / 'many'}"), CIFARNET, 32)
    check_source(parse_data("jpeg-sample"), models.get("resnet50"), 64)  # nothing written


def epoch_of(loaders: Loaders) -> list[tuple[float, int]]:
    """(pixel sum, label) of every sample of one epoch, in order."""
    return [
        (round(float(x.sum()), 3), int(y))
        for inputs, targets in loaders.train
        for x, y in zip(inputs, targets, strict=True)
    ]


def test_workers_do_not_change_the_samples(cifar_dir):
    source = f"cifar10:{cifar_dir}"
    inline = make_loaders(source, CIFARNET, None, 8, 0, "cpu", seed=3)
    assert (inline.train_samples, inline.eval_samples, inline.num_classes) == (64, 16, 10)
    assert inline.size == 32 and len(inline.train) == 8
    spread = make_loaders(source, CIFARNET, None, 8, 2, "cpu", seed=3)
    assert spread.train.num_workers == 2 and spread.train.persistent_workers
    assert spread.train.prefetch_factor == 4 and not spread.train.pin_memory
    first = epoch_of(inline)
    assert len(first) == 64 and sorted(y for _, y in first) == sorted(
        list(range(10)) * 6 + [0, 1, 2, 3]
    )
    # seeded augmentation per (epoch, sample): any worker count gives the same batches
    assert epoch_of(spread) == first
    second = epoch_of(inline)
    assert sorted(y for _, y in second) == sorted(y for _, y in first) and second != first
    assert epoch_of(make_loaders(source, CIFARNET, None, 8, 0, "cpu", seed=4)) != first
    eval_batches = list(inline.eval)
    assert [len(y) for _, y in eval_batches] == [8, 8]
    assert torch.cat([y for _, y in eval_batches]).tolist() == [i % 10 for i in range(64, 80)]


def test_distributed_shards_are_disjoint_and_cover_the_epoch(cifar_dir):
    def indices(rank: int, epoch: int) -> list[int]:
        loaders = make_loaders(f"cifar10:{cifar_dir}", CIFARNET, 32, 4, 0, "cpu", 1, rank, 2)
        loaders.train.sampler.set_epoch(epoch)
        return [index for _, index in loaders.train.sampler]

    for epoch in (0, 1):
        zero, one = indices(0, epoch), indices(1, epoch)
        assert len(zero) == len(one) == 32
        assert set(zero).isdisjoint(one) and set(zero) | set(one) == set(range(64))
    assert indices(0, 0) != indices(0, 1)
    two = make_loaders(f"cifar10:{cifar_dir}", CIFARNET, 32, 4, 0, "cpu", 1, rank=1, world=2)
    assert len(two.train) == 8 and two.train_samples == 64
    assert sum(len(y) for _, y in two.eval) == 8  # samples 1, 3, 5, ... of the test set


def test_endless_batches_run_through_epochs(cifar_dir):
    loaders = make_loaders(f"cifar10:{cifar_dir}", CIFARNET, None, 16, 0, "cpu", seed=0)
    batches = endless_batches(loaders.train)
    labels = [next(batches)[1] for _ in range(9)]  # 4 batches an epoch
    assert all(len(y) == 16 for y in labels) and loaders.train.sampler.epoch == 3
    batches.close()
    with pytest.raises(DataError, match="smaller than one batch"):
        next(
            endless_batches(
                make_loaders(f"cifar10:{cifar_dir}", CIFARNET, None, 65, 0, "cpu", 0).train
            )
        )


def test_the_jpeg_sample_is_written_once_and_reused(tmp_path):
    root = ensure_jpeg_sample(tmp_path / "s", images=6, size=(40, 30), classes=3)
    files = sorted(root.glob("train/*/*.jpg"))
    assert len(files) == 6 and {f.parent.name for f in files} == {"class_0", "class_1", "class_2"}
    assert json.loads((root / "trainperf-jpeg-sample.json").read_text())["images"] == 6
    stamp = files[0].stat().st_mtime_ns
    ensure_jpeg_sample(tmp_path / "s", images=6, size=(40, 30), classes=3)
    assert files[0].stat().st_mtime_ns == stamp  # reused
    ensure_jpeg_sample(tmp_path / "s", images=4, size=8, classes=2)  # other parameters
    assert len(list(root.glob("train/*/*.jpg"))) == 4
    assert [p.name for p in tmp_path.iterdir()] == ["s"]  # no temporary folders left


def test_jpeg_sample_loaders_give_the_case_size(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE", str(tmp_path))
    monkeypatch.setattr("trainperf.datasets.sample.DEFAULT_IMAGES", 4)
    monkeypatch.setattr("trainperf.datasets.sample.DEFAULT_SIZE", (40, 30))
    loaders = make_loaders("jpeg-sample", CIFARNET, 24, 4, 0, "cpu", seed=0)
    assert loaders.eval is None and loaders.num_classes == 10
    inputs, targets = next(iter(loaders.train))
    assert inputs.shape == (4, 3, 24, 24) and targets.dtype == torch.int64
