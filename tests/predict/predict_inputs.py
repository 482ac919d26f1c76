"""The predictor's inputs (``Workload``, ``Placement``, ``Measured``) from one flat set of
keyword arguments, so that a test varies any one of them by its name."""

from dataclasses import fields
from typing import Any

from trainperf import models
from trainperf.predict.fsdp import predict_fsdp
from trainperf.predict.model import Measured, Placement, Workload, predict


def split(arguments: dict[str, Any]) -> tuple[Workload, Placement, Measured, dict[str, Any]]:
    """The three inputs, and the arguments none of them takes (the mode's own options).
    ``model`` may be a zoo name or a ModelSpec."""
    given = dict(arguments)
    model = given.pop("model")
    given["spec"] = models.get(model) if isinstance(model, str) else model
    made = []
    for kind in (Workload, Placement, Measured):
        names = {f.name for f in fields(kind)}
        made.append(kind(**{k: given.pop(k) for k in list(given) if k in names}))
    return (*made, given)


def predict_ddp(**arguments: Any) -> dict[str, Any]:
    workload, placement, measured, options = split(arguments)
    return predict(workload, placement, measured, **options)


def predict_sharded(**arguments: Any) -> dict[str, Any]:
    workload, placement, measured, options = split(arguments)
    return predict_fsdp(workload, placement, measured, **options)
