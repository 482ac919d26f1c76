"""The probes around a case's measured steps: energy meters and the clock/thermal context.

``CaseProbes.begin()`` runs right after the warm-up and ``end()`` right after the last
measured step (trainperf.measure.loop calls them), so the energy covers exactly the
measured window. Their cost is a few counter reads per case (NVML's total-energy counter,
RAPL's energy_uj files); only a GPU without an energy counter falls back to a sampling
thread (benchmarks/energy_overhead.py measures what all this costs).

In a distributed case every rank meters its own GPU, and only the first process of each
node reads RAPL (the package counter is per socket: several readers would count the same
joules twice).
"""

from __future__ import annotations

from typing import Any

import torch

from trainperf.measure.energy import Reading, make_meters, summarize
from trainperf.measure.energy_rapl import RaplEnergy


class CaseProbes:
    def __init__(self, device: torch.device, read_cpu_energy: bool = True) -> None:
        self.device = device
        indices = [device.index or 0] if device.type == "cuda" else []
        self.meters = [
            m
            for m in make_meters(device.type, indices)
            if read_cpu_energy or not isinstance(m, RaplEnergy)
        ]
        self.start_context: dict[str, Any] = {}
        self.readings: list[Reading] = []

    def _context(self) -> dict[str, Any]:
        from trainperf.measure.gpu_context import cpu_context, gpu_context

        if self.device.type == "cuda":
            return gpu_context(None, self.device.index or 0)
        return cpu_context()

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def begin(self) -> None:
        self.start_context = self._context()
        self._synchronize()
        for meter in self.meters:
            meter.begin()

    def end(self) -> None:
        self._synchronize()
        self.readings = [reading for meter in self.meters for reading in meter.end()]
        self.end_context = self._context()
        for meter in self.meters:
            meter.close()


def probe_metrics(
    readings: list[Reading],
    samples: int,
    seconds: float,
    start_contexts: list[dict[str, Any]],
    end_contexts: list[dict[str, Any]],
    device_type: str,
) -> dict[str, Any]:
    """Energy (W, J/sample, samples/s/W, with sources and absent reasons) and context."""
    metrics = summarize(readings, samples, seconds)
    metrics["context_start"], metrics["context_end"] = start_contexts, end_contexts
    if device_type == "cuda":
        from trainperf.measure.gpu_context import throttled

        reasons = sorted(
            {r for s, e in zip(start_contexts, end_contexts, strict=True) for r in throttled(s, e)}
        )
        metrics["throttled"], metrics["throttle_reasons"] = bool(reasons), reasons
    return metrics
