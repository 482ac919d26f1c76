"""Profiler events recorded on a real GPU, rebuilt as torch's own FunctionEvents.

tests/profile/data/*.json.gz were written by benchmarks/record_cuda_profile.py on an NVIDIA
H200 (torch 2.11, CUDA 13): every event of 2 profiled training steps of ResNet-18 (batch
32, bf16), alone and under DDP on one NCCL rank. ``recorded_events`` rebuilds them with the
constructor torch.profiler uses, their kernels and parents attached, so trainperf.profile
aggregates what a GPU produced, through torch's own self-time arithmetic.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

DATA = Path(__file__).parent / "data"


def recorded(name: str) -> dict[str, Any]:
    """The recorded document ``name`` (its events as stored, and how they were made)."""
    with gzip.open(DATA / f"{name}.json.gz", "rt") as handle:
        return json.load(handle)


def recorded_events(name: str) -> tuple[list[FunctionEvent], int]:
    """(FunctionEvents, profiled steps) of the recording ``name``."""
    document = recorded(name)
    events: dict[int, FunctionEvent] = {}
    ordered = []
    for fields in document["events"]:
        event = FunctionEvent(
            id=fields["id"],
            name=fields["name"],
            thread=fields["thread"],
            start_us=fields["start_us"],
            end_us=fields["end_us"],
            is_async=fields["is_async"],
            device_type=DeviceType(fields["device_type"]),
            device_index=fields["device_index"],
            device_resource_id=fields["device_resource_id"],
            is_user_annotation=fields["is_user_annotation"],
            use_device="cuda",  # a CUDA profile: device times are counted
        )
        for kernel_name, device, duration in fields["kernels"]:
            event.append_kernel(kernel_name, device, duration)
        # Device events share ids with the ops that launched them (correlation ids): only
        # host events are parents.
        if fields["device_type"] == DeviceType.CPU.value:
            events[fields["id"]] = event
        ordered.append((event, fields["parent"]))
    for event, parent_id in ordered:
        if parent_id is not None and parent_id in events:
            parent = events[parent_id]
            event.set_cpu_parent(parent)
            parent.append_cpu_child(event)
    return [event for event, _ in ordered], document["steps"]
