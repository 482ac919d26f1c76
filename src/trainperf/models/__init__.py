"""The model zoo: an explicit registry of the networks trainperf benchmarks.

>>> from trainperf import models
>>> spec = models.get("resnet50")
>>> net = spec.build()
>>> inputs, targets = spec.example_batch(8, image_size=64)
>>> loss = spec.loss(net(inputs), targets)

Each family lives in its own module and exposes ``SPECS``; this file lists them by hand
(no folder scanning). A name of the form ``package.module:function`` loads a user's network
instead (see ``trainperf.models.custom``).
"""

from __future__ import annotations

from trainperf.models import (
    alexnet,
    bert,
    cifarnet,
    googlenet,
    gpt2,
    inception_v3,
    inception_v4,
    llama,
    resnet,
    vgg,
)
from trainperf.models.custom import check_reference, is_custom_reference, load_custom
from trainperf.models.spec import (
    CausalLM,
    ImageClassification,
    ModelSpec,
    MultipleChoice,
    SizeError,
    SpanExtraction,
    Task,
)

__all__ = [
    "CausalLM",
    "ImageClassification",
    "ModelSpec",
    "MultipleChoice",
    "SizeError",
    "SpanExtraction",
    "Task",
    "UnknownModelError",
    "get",
    "is_custom_reference",
    "look_up",
    "names",
]

_FAMILIES = (
    cifarnet,
    alexnet,
    googlenet,
    inception_v3,
    inception_v4,
    resnet,
    vgg,
    bert,
    gpt2,
    llama,
)
_REGISTRY: dict[str, ModelSpec] = {spec.name: spec for family in _FAMILIES for spec in family.SPECS}


class UnknownModelError(ValueError):
    """A model name that is neither in the zoo nor a loadable ``module:function``."""


def names() -> list[str]:
    """Names of the zoo's models, in the order of the registry."""
    return list(_REGISTRY)


def get(name: str, image_size: int | None = None) -> ModelSpec:
    """The spec of a zoo model, or of a user's network given as ``package.module:function``
    (which runs the user's code: ``look_up`` checks a name without doing so), its classes
    counted on an image of ``image_size`` where the caller knows it."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if is_custom_reference(name):
        return load_custom(name, image_size)
    raise _unknown(name)


def look_up(name: str) -> ModelSpec | None:
    """Check a model name without running a user's code: the spec of a zoo model, or None
    for a user's network whose module exists (its function runs only in the case's worker,
    see ``trainperf.models.custom``). Raises UnknownModelError or CustomModelError."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if is_custom_reference(name):
        check_reference(name)
        return None
    raise _unknown(name)


def _unknown(name: str) -> UnknownModelError:
    return UnknownModelError(
        f"unknown model '{name}': valid models are {', '.join(_REGISTRY)}, "
        "or a network of your own as package.module:function"
    )
