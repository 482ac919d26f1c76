"""The activation estimate of ``predict.memory`` beside what a CPU really holds for backward.

Measured: the bytes allocated during one forward pass + loss that are still held at its end
(allocations minus frees, the weights built before), in fp32 on the CPU, as
``torch.profiler`` records them with ``profile_memory=True``: every allocation and free of
the CPU allocator is attributed to the operator that made it ("[memory]" events for those
outside any operator), so the sum of the events' self memory is the net growth over the
window. What is held then is what autograd saved for the backward pass plus the batch the
loop holds (inputs and targets, made inside the window) and the loss.

Predicted: ``memory_breakdown(...).activations_bytes`` at the same batch, fp32, CPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from torch.profiler import ProfilerActivity, profile

from trainperf.models.attention import AttentionPlan
from trainperf.models.spec import ModelSpec
from trainperf.predict.memory import memory_breakdown, shape_counts


@dataclass(frozen=True)
class ActivationCheck:
    model: str
    size: int
    batch: int
    measured_bytes: float
    predicted_bytes: float

    @property
    def ratio(self) -> float:
        """measured / predicted: 1 is a perfect estimate, above 1 an underestimate."""
        return self.measured_bytes / self.predicted_bytes

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}


def held_after_forward(spec: ModelSpec, batch: int, size: int) -> float:
    """Bytes the CPU allocator still holds after forward + loss of the model ``spec`` in fp32."""
    net = spec.build().train()  # before the window: the weights are not counted
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        inputs, targets = spec.task.example_batch(batch, size, "cpu")
        loss = spec.loss(net(inputs), targets)
    # The loss keeps the graph, and so the saved tensors, alive until the window closed.
    del inputs, targets, loss
    return float(sum(event.self_cpu_memory_usage for event in prof.events()))


def check_activations(spec: ModelSpec, batch: int = 2, size: int | None = None) -> ActivationCheck:
    """Measured vs predicted activation bytes of the model ``spec`` on the CPU in fp32."""
    size = spec.resolve_size(size)
    counts = shape_counts(spec, size, AttentionPlan("cpu"))
    predicted = memory_breakdown(counts, batch, "fp32", None)
    return ActivationCheck(
        model=spec.name,
        size=size,
        batch=batch,
        measured_bytes=held_after_forward(spec, batch, size),
        predicted_bytes=predicted.activations_bytes,
    )
