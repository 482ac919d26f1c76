"""The predictor's inputs (``Workload``, ``Placement``, ``Measured``) from one flat set of
keyword arguments, so that a test varies any one of them by its name."""

from dataclasses import dataclass, fields
from typing import Any

from trainperf import models
from trainperf.predict.fsdp import predict_fsdp
from trainperf.predict.inputs import Measured, Placement, Workload
from trainperf.predict.model import predict


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


@dataclass(frozen=True)
class FakeDevice:
    """A catalog device reduced to what the predictor reads: one peak and one fraction."""

    id: str = "gpu-x"
    kind: str = "gpu"
    memory_bytes: float = 80e9
    peak: float = 15e12
    fraction: float = 0.5

    def peak_flops(self, precision: str) -> float:
        return self.peak

    def efficiency(self, precision: str) -> float:
        return self.fraction


def stored_result(
    batch: int,
    samples_per_s: float,
    devices: int = 1,
    device: str = "cuda",
    flops: float | None = None,
) -> dict[str, Any]:
    """An ok cifarnet result document as a sweep stores it (fp32, image size 32)."""
    metrics = {
        "samples_per_s_median": samples_per_s,
        "step_s_median": batch * devices / samples_per_s,
        "image_size": 32,
    }
    if flops is not None:
        metrics["achieved_tflops"] = flops * samples_per_s / 1e12
    name = "GPU X" if device == "cuda" else "cpu"
    return {
        "status": "ok",
        "result_schema": 1,
        "case": {
            "model": "cifarnet",
            "batch_size": batch,
            "devices": devices,
            "nodes": 1,
            "precision": "fp32",
            "device": device,
            "scaling": "weak",
            "bucket_mb": None,
        },
        "device": {"name": name, "type": device, "memory_bytes": 80 * 2**30},
        "metrics": metrics,
    }
