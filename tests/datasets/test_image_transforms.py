import numpy as np
import pytest
import torch
from PIL import Image

from trainperf.datasets import DataError
from trainperf.datasets.imagefolder import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageFolderDataset,
    find_classes,
    scan,
    splits,
)
from trainperf.datasets.transforms import (
    normalize,
    random_resized_crop,
    random_resized_crop_box,
    resize_center_crop,
    sample_rng,
)


def test_random_resized_crop_has_the_size_and_repeats_with_the_seed():
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (90, 120, 3), np.uint8))
    one = random_resized_crop(image, 32, sample_rng(7, 0, 3))
    assert one.size == (32, 32)
    again = random_resized_crop(image, 32, sample_rng(7, 0, 3))
    assert np.array_equal(np.asarray(one), np.asarray(again))
    other = random_resized_crop(image, 32, sample_rng(7, 1, 3))  # next epoch: another view
    assert not np.array_equal(np.asarray(one), np.asarray(other))


def test_crop_boxes_keep_scale_and_ratio_and_fall_back_to_the_centre():
    rng = np.random.default_rng(1)
    for _ in range(200):
        left, top, w, h = random_resized_crop_box(400, 300, rng)
        assert left >= 0 and left + w <= 400 and top >= 0 and top + h <= 300
        assert 0.08 * 0.9 <= w * h / (400 * 300) <= 1.0
        assert 3 / 4 * 0.9 <= w / h <= 4 / 3 * 1.1
    # a 1000x10 strip: no draw fits, so the centre crop of the widest allowed aspect (4/3)
    assert random_resized_crop_box(1000, 10, np.random.default_rng(0)) == (493, 0, 13, 10)
    assert random_resized_crop_box(10, 1000, np.random.default_rng(0)) == (0, 493, 10, 13)
    assert random_resized_crop_box(50, 40, TooLarge()) == (0, 0, 50, 40)  # aspect in range


class TooLarge:
    """Draws 150% of the image's area every time, so no draw fits: the fallback."""

    def uniform(self, low, high):
        return 1.5 if (low, high) == (0.08, 1.0) else 0.0


def test_eval_view_is_the_centre_of_the_resized_image():
    # left third red, middle third green, right third blue, 3:1 wide
    pixels = np.zeros((100, 300, 3), dtype=np.uint8)
    pixels[:, :100, 0] = pixels[:, 100:200, 1] = pixels[:, 200:, 2] = 255
    out = np.asarray(resize_center_crop(Image.fromarray(pixels), 64))
    assert out.shape == (64, 64, 3)
    assert (out[:, :, 1] == 255).all() and (out[:, :, 0] == 0).all()  # only the green centre
    # as resizing the shorter side to round(64 * 256/224) = 73 (300x100 -> 219x73) and
    # cropping the centre 64x64 (offsets 77.5, 4.5), up to rounding of those offsets
    smooth = np.zeros((100, 300, 3), dtype=np.uint8)
    smooth[:] = np.linspace(0, 255, 300).astype(np.uint8)[None, :, None]
    one = np.asarray(resize_center_crop(Image.fromarray(smooth), 64)).astype(int)
    resized = Image.fromarray(smooth).resize((219, 73), Image.Resampling.BILINEAR)
    two = np.asarray(resized.crop((77, 4, 141, 68))).astype(int)
    assert np.abs(one - two).max() <= 2


def test_normalize_gives_float_chw():
    pixels = np.zeros((2, 3, 3), dtype=np.uint8)
    pixels[..., 0] = 255
    x = normalize(pixels, IMAGENET_MEAN, IMAGENET_STD)
    assert x.shape == (3, 2, 3) and x.dtype == torch.float32 and x.is_contiguous()
    expected = [(1 - 0.485) / 0.229, -0.456 / 0.224, -0.406 / 0.225]
    for c in range(3):
        assert torch.allclose(x[c], torch.tensor(expected[c]), atol=1e-6)


def write_folder(root, classes=("cat", "dog"), per_class=3, size=(48, 40)):
    rng = np.random.default_rng(0)
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
            suffix = ".png" if i % 2 else ".jpg"
            Image.fromarray(pixels).save(root / name / f"{i}{suffix}")
    (root / classes[0] / "notes.txt").write_text("not an image")
    return root


def test_image_folder_classes_splits_and_samples(tmp_path):
    write_folder(tmp_path / "flat")
    assert splits(tmp_path / "flat") == (tmp_path / "flat", None)
    write_folder(tmp_path / "split" / "train")
    write_folder(tmp_path / "split" / "val", per_class=1)
    train, val = splits(tmp_path / "split")
    assert (train, val) == (tmp_path / "split" / "train", tmp_path / "split" / "val")
    classes = find_classes(train)
    assert classes == ["cat", "dog"]
    samples = scan(train, classes)
    assert [label for _, label in samples] == [0, 0, 0, 1, 1, 1]
    data = ImageFolderDataset(samples, 32, train=True, seed=1, repeat=2)
    assert len(data) == 12
    x, label = data[(0, 4)]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and label == 1
    assert torch.equal(x, data[(0, 4)][0]) and not torch.equal(x, data[(0, 10)][0])
    x, _ = ImageFolderDataset(scan(val, classes), 24, train=False)[0]
    assert x.shape == (3, 24, 24)
    with pytest.raises(DataError, match="no class subdirectories"):
        find_classes(tmp_path / "flat" / "cat")
    with pytest.raises(DataError, match=f"directory {tmp_path / 'none'} does not exist"):
        splits(tmp_path / "none")
