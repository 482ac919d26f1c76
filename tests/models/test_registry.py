import textwrap

import pytest
import torch

from trainperf import models
from trainperf.models.custom import CustomModelError

ZOO = [
    "cifarnet",
    "alexnet",
    "googlenet",
    "inception_v3",
    "inception_v4",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "vgg16",
    "vgg19",
    "bert-swag",
    "bert-squad",
    "gpt2-small",
    "llama-tiny",
    "llama3.2-1b",
    "llama3-8b",
    "llama3-70b",
]


def test_names_list_the_whole_zoo():
    assert models.names() == ZOO


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(models.UnknownModelError) as info:
        models.get("resnet51")
    assert "unknown model 'resnet51'" in str(info.value)
    for name in ZOO:
        assert name in str(info.value)


@pytest.mark.parametrize(
    "name,size_name,natural",
    [
        ("cifarnet", "image_size", 32),
        ("resnet50", "image_size", 224),
        ("inception_v3", "image_size", 299),
        ("inception_v4", "image_size", 299),
        ("bert-swag", "seq_len", 80),
        ("bert-squad", "seq_len", 384),
        ("gpt2-small", "seq_len", 1024),
    ],
)
def test_natural_sizes(name, size_name, natural):
    spec = models.get(name)
    assert spec.size_name == size_name and spec.natural_size == natural


def test_public_api_one_training_loss():
    spec = models.get("cifarnet")
    net = spec.build()
    inputs, targets = spec.example_batch(4, device="cpu", image_size=16)
    loss = spec.loss(net(inputs), targets)
    assert loss.shape == () and torch.isfinite(loss)


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    (tmp_path / "usernets.py").write_text(
        textwrap.dedent("""
        import torch
        from torch import nn
        from trainperf.models import ModelSpec, ImageClassification

        def tiny():
            return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(4, 7))

        def as_spec():
            return ModelSpec(name="usernets:as_spec", family="custom",
                             task=ImageClassification(5), factory=lambda: nn.Sequential(
                                 nn.Flatten(), nn.LazyLinear(5)), natural_size=8, min_size=2)

        def not_a_model():
            return 42

        def wrong_input():
            return nn.Linear(10, 2)
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_custom_module_is_wrapped_with_its_class_count(user_package):
    spec = models.get("usernets:tiny")
    assert spec.family == "custom" and spec.task.num_classes == 7
    net = spec.build()
    inputs, targets = spec.example_batch(2, image_size=16)
    assert spec.loss(net(inputs), targets).isfinite()


def test_custom_spec_is_used_as_given(user_package):
    spec = models.get("usernets:as_spec")
    assert spec.natural_size == 8 and spec.task.num_classes == 5


@pytest.mark.parametrize(
    "ref,message",
    [
        ("usernets:", "malformed"),
        ("user nets:tiny", "malformed"),
        ("a:b:c", "malformed"),
        ("nosuchmodule_xyz:f", "cannot import module"),
        ("usernets:missing", "has no function"),
        ("usernets:not_a_model", "returned int"),
        ("usernets:wrong_input", "does not take"),
    ],
)
def test_custom_reference_errors(user_package, ref, message):
    with pytest.raises(CustomModelError, match=message):
        models.get(ref)
