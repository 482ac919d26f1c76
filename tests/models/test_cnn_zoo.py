"""The image classifiers of the zoo: exact sizes, declared minimum inputs, one training step."""

from __future__ import annotations

import pytest
import torch

from trainperf import models
from trainperf.models import SizeError
from trainperf.models.inception_v3 import AUX_MIN_SIZE

# Parameter counts of the reference implementations (shared/reference/models.md).
EXPECTED_PARAMS = {
    "cifarnet": 89_578,
    "alexnet": 61_100_840,
    "googlenet": 6_624_904,
    "inception_v3": 23_834_568,
    "inception_v4": 42_679_816,
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
}
EXPECTED_AUX_PARAMS = {"googlenet": 13_004_888, "inception_v3": 27_161_264}

CNN_NAMES = list(EXPECTED_PARAMS)


def _count_on_meta(name: str, **options: object) -> int:
    # The meta device gives shapes without memory, so the 143M-parameter VGG19 is free.
    with torch.device("meta"):
        net = models.get(name).build(**options)
    return sum(p.numel() for p in net.parameters())


def _train_step(name: str, image_size: int, **options: object) -> None:
    """One forward and backward pass on CPU; checks shape, loss and gradients."""
    torch.manual_seed(0)
    spec = models.get(name)
    net = spec.build(**options).train()
    inputs, targets = spec.example_batch(2, image_size=image_size)
    logits = net(inputs)
    assert logits.shape == (2, spec.task.num_classes)
    loss = spec.loss(logits, targets)
    assert torch.isfinite(loss)
    loss.backward()
    missing = [n for n, p in net.named_parameters() if p.grad is None]
    assert not missing, f"{name}: parameters without gradient: {missing[:5]}"


@pytest.mark.parametrize("name", CNN_NAMES)
def test_parameter_count_matches_reference(name: str) -> None:
    assert _count_on_meta(name) == EXPECTED_PARAMS[name]


@pytest.mark.parametrize("name", list(EXPECTED_AUX_PARAMS))
def test_parameter_count_with_aux_classifiers(name: str) -> None:
    assert _count_on_meta(name, aux_logits=True) == EXPECTED_AUX_PARAMS[name]


@pytest.mark.parametrize("name", CNN_NAMES)
def test_spec_is_an_image_classifier(name: str) -> None:
    spec = models.get(name)
    assert spec.name == name
    assert spec.size_name == "image_size"
    assert 1 <= spec.min_size <= spec.natural_size
    assert spec.optimizer == "sgd"


@pytest.mark.parametrize("name", CNN_NAMES)
def test_min_size_is_the_smallest_input_that_works(name: str) -> None:
    spec = models.get(name)
    with torch.device("meta"):
        net = spec.build().eval()
        assert net(torch.empty(2, 3, spec.min_size, spec.min_size)).shape[0] == 2
        with pytest.raises(RuntimeError):
            net(torch.empty(2, 3, spec.min_size - 1, spec.min_size - 1))


@pytest.mark.parametrize("name", CNN_NAMES)
def test_train_step_at_min_size(name: str) -> None:
    _train_step(name, models.get(name).min_size)


def test_googlenet_aux_train_step_returns_one_tensor() -> None:
    _train_step("googlenet", models.get("googlenet").min_size, aux_logits=True)


def test_inception_v3_aux_train_step_returns_one_tensor() -> None:
    _train_step("inception_v3", AUX_MIN_SIZE, aux_logits=True)


def test_inception_v3_aux_rejects_small_inputs() -> None:
    with torch.device("meta"):
        net = models.get("inception_v3").build(aux_logits=True).train()
        with pytest.raises(SizeError, match="auxiliary"):
            net(torch.empty(2, 3, AUX_MIN_SIZE - 1, AUX_MIN_SIZE - 1))


def test_eval_with_aux_returns_main_logits_only() -> None:
    with torch.device("meta"):
        net = models.get("googlenet").build(aux_logits=True, num_classes=7).eval()
        assert net(torch.empty(2, 3, 64, 64)).shape == (2, 7)


@pytest.mark.parametrize("name", CNN_NAMES)
def test_sizes_below_min_size_are_refused(name: str) -> None:
    spec = models.get(name)
    with pytest.raises(SizeError):
        spec.example_batch(2, image_size=spec.min_size - 1)


@pytest.mark.parametrize("name", ["cifarnet", "resnet18", "googlenet"])
def test_num_classes_option(name: str) -> None:
    with torch.device("meta"):
        net = models.get(name).build(num_classes=7).eval()
        assert net(torch.empty(2, 3, 64, 64)).shape == (2, 7)
