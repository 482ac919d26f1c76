"""A user's own network, named ``package.module:function``.

The function either returns a ``ModelSpec`` (any kind of input: the spec says how to make
a batch and compute the loss) or an ``nn.Module`` that takes a float image batch
(B, 3, S, S) and returns class logits (B, classes). For the latter the number of classes is
read from one forward pass on the meta device, which allocates no memory.

The user's code (their module, their function, that forward pass) runs only where the case
runs, in its worker process (trainperf.launch.runner): a function that hangs, exits the process,
raises or fills the memory then ends its case as ``timeout``, ``crashed``, ``error`` or
``oom``, and trainperf goes on. Before a sweep, ``check_reference`` only finds the module,
as the import system would, without running any of its code.

Where the module is looked for: the Python path (``PYTHONPATH`` included), then the current
directory, in the sweep's process as in the worker (``_path_with_current_directory``). The
``trainperf`` console script has its own folder on its path, not the current directory as
``python -m`` has, so without this a module beside the user would be found in the worker
but refused before the sweep.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec, PathFinder

import torch
from torch import nn

from trainperf.models.spec import ImageClassification, ModelSpec

# A dotted module path, a colon, a function name: "mypkg.nets:build_net".
_REFERENCE = re.compile(
    r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*"
)  # fullmatch: "$" lets "\n" by
_PROBE_IMAGE_SIZE = 224
# Smallest image a user network is assumed to accept; their function knows better, and a
# size it cannot take fails the case with the network's own error.
_CUSTOM_MIN_IMAGE = 8


class CustomModelError(ValueError):
    """A ``module:function`` reference that is malformed or cannot be loaded."""


def is_custom_reference(name: str) -> bool:
    """Whether ``name`` is meant as ``module:function`` (it has a colon)."""
    return ":" in name


def check_reference(reference: str) -> None:
    """Check ``package.module:function`` without running any of the user's code: the form,
    and that the module exists where ``import`` would look (``sys.meta_path``, the same
    finders as ``importlib.util.find_spec``, but no package ``__init__`` is run). Whether
    the function exists and what it builds is seen in the case's worker."""
    module_name, _ = _split(reference)
    if not _module_exists(module_name):
        raise CustomModelError(
            f"cannot import module '{module_name}' of model '{reference}': no such module "
            "in the current directory or on the Python path (set PYTHONPATH to the folder "
            "that holds it)"
        )


def is_well_formed(reference: str) -> bool:
    """Whether ``reference`` has the form ``package.module:function`` (nothing is looked up:
    a stored result's network ran where it was measured, not necessarily here)."""
    return bool(_REFERENCE.fullmatch(reference))


def _split(reference: str) -> tuple[str, str]:
    """(module, function) of a well-formed reference; CustomModelError otherwise."""
    if not _REFERENCE.fullmatch(reference):
        raise CustomModelError(
            f"malformed model reference {reference!r}: expected package.module:function, "
            "e.g. mynets.small:build"
        )
    module_name, function_name = reference.split(":")
    return module_name, function_name


def _module_exists(module_name: str) -> bool:
    """Whether the import system finds ``module_name``, walking its dotted path package by
    package with the finders of ``sys.meta_path`` (which read the file system, not run
    code); packages imported already are taken from ``sys.modules``."""
    search_path = None
    parts = module_name.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        loaded = sys.modules.get(name)
        if loaded is not None:
            search_path = getattr(loaded, "__path__", None)
        elif (spec := _find_spec(name, search_path)) is not None:
            search_path = spec.submodule_search_locations
        else:
            return False
        if search_path is None and depth < len(parts):
            return False  # a module, not a package: it has no submodules
    return True


def _find_spec(name: str, search_path: object) -> ModuleSpec | None:
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is not None and (spec := find_spec(name, search_path)) is not None:
            return spec
    if search_path is None:  # a top-level name: the current directory too (module doc)
        return PathFinder.find_spec(name, [os.getcwd()])
    return None


def _path_with_current_directory() -> None:
    """Put the current directory at the end of ``sys.path`` when it is not on it (a worker
    started under ``PYTHONSAFEPATH``; ``python -m`` puts it first otherwise)."""
    here = os.getcwd()
    if not any(os.path.abspath(entry or os.curdir) == here for entry in sys.path):
        sys.path.append(here)


def load_custom(reference: str, image_size: int | None = None) -> ModelSpec:
    """Resolve ``package.module:function`` to a spec, calling the function once; a network's
    classes are counted from one image of ``image_size`` (the case's; 224 when not known).

    This runs the user's code: call it in the case's worker, not in the sweep's process."""
    module_name, function_name = _split(reference)
    _path_with_current_directory()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the user's module raises on import
        raise CustomModelError(
            f"cannot import module '{module_name}' of model '{reference}': {exc}"
        ) from exc
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise CustomModelError(f"module '{module_name}' has no function '{function_name}'")
    built = factory()
    if isinstance(built, ModelSpec):
        return built
    if isinstance(built, nn.Module):
        return ModelSpec(
            name=reference,
            family="custom",
            task=ImageClassification(
                num_classes=_count_classes(built, reference, image_size or _PROBE_IMAGE_SIZE)
            ),
            factory=_ignoring_options(factory),
            natural_size=_PROBE_IMAGE_SIZE,
            min_size=_CUSTOM_MIN_IMAGE,
            description=f"user network {reference}",
        )
    raise CustomModelError(
        f"'{reference}' returned {type(built).__name__}: expected a torch.nn.Module "
        "(image batch -> logits) or a trainperf ModelSpec"
    )


def _ignoring_options(factory: Callable[[], nn.Module]) -> Callable[..., nn.Module]:
    def build(**_options: object) -> nn.Module:
        return factory()

    return build


def _count_classes(module: nn.Module, reference: str, side: int) -> int:
    """Classes = width of the logits of one ``side`` x ``side`` image, from a forward pass
    on the meta device."""
    meta = module.to("meta")
    try:
        images = torch.empty(1, 3, side, side, device="meta")
        with torch.no_grad():
            logits = meta(images)
    except Exception as exc:
        raise CustomModelError(
            f"'{reference}' does not take a float image batch (1, 3, {side}, {side}): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise CustomModelError(
            f"'{reference}' must return logits of shape (batch, classes), got {shape}; "
            "return a ModelSpec for other outputs"
        )
    return int(logits.shape[1])
