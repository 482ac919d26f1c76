"""The probes around a case's measured steps: energy meters and the clock/thermal context.

``CaseProbes.begin()`` runs right after the warm-up and ``end()`` right after the last
measured step (trainperf.measure.timed_steps calls them), so the energy covers exactly the
measured window. Their cost is a few counter reads per case (NVML's total-energy counter,
RAPL's energy_uj files) and, on GPUs, one thread that wakes every ``SAMPLE_INTERVAL_S``
for three NVML reads per GPU (benchmarks/energy_overhead.py measures what all this costs).

In a distributed case every rank meters its own GPU, and only the first process of each
node reads RAPL (the package counter is per socket: several readers would count the same
joules twice). A DataParallel case runs in one process on several GPUs: its probes meter,
read and sample every one of them (``device_indices``), so its energy is the sum over its
GPUs and ``energy_complete`` holds only when each was metered.

GPU clocks, power and clocks-event reasons are sampled during the window by that thread
(trainperf.measure.gpu_context.WindowSampler); their summary is each end context's
``window``, beside the idle values read at the edges. ``probe_metrics`` turns the contexts
into a run's metrics: the window means here (``window_means``), the clock conditions and
slowdowns in trainperf.measure.clock_events (``gpu_conditions``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from trainperf.measure.clock_events import gpu_conditions
from trainperf.measure.energy import (
    RAPL_ROOT,
    SOURCE_NVML,
    SOURCE_RAPL,
    AbsentMeter,
    EnergyMeter,
    Reading,
    summarize,
)
from trainperf.measure.energy_nvml import NvmlEnergy, NvmlUnavailable
from trainperf.measure.energy_rapl import RaplEnergy

# One NVML read of clock, power and reasons per GPU every 100 ms: the energy sampler's
# period, fine enough to see a power-cap episode, a few tens of microseconds per read.
SAMPLE_INTERVAL_S = 0.1


def make_meters(
    device_type: str,
    device_indices: Sequence[int],
    nvml: Any = None,
    rapl_root: str | os.PathLike[str] = RAPL_ROOT,
    interval_s: float = 0.1,
    visible: str | None = None,
) -> list[EnergyMeter]:
    """The meters for a case: NVML for the CUDA devices on ``cuda``, RAPL for the CPU always.

    ``device_indices`` are CUDA indices; ``nvml`` defaults to ``pynvml``; ``visible``: how
    they map to NVML's (trainperf.measure.energy_nvml.nvml_handle: None by torch's device
    UUIDs, a string as ``CUDA_VISIBLE_DEVICES``). Whatever the machine lacks becomes an
    ``AbsentMeter`` saying why.
    """
    meters: list[EnergyMeter] = []
    if device_type == "cuda":
        try:
            meters.append(NvmlEnergy(nvml, device_indices, interval_s, visible=visible))
        except NvmlUnavailable as exc:
            reason = str(exc)
            domains = [f"gpu{i}" for i in device_indices] or ["gpu"]
            meters.extend(AbsentMeter(SOURCE_NVML, d, reason) for d in domains)
    try:
        meters.append(RaplEnergy(rapl_root))
    except Exception as exc:
        meters.append(AbsentMeter(SOURCE_RAPL, "cpu", f"RAPL discovery failed: {exc}"))
    return meters


class CaseProbes:
    """Energy meters, edge contexts and the window sampler of a case's devices.

    ``device_indices``: the CUDA devices the case uses (DataParallel: all its
    ``device_ids``); by default ``device`` alone. ``nvml`` is pynvml (None) or a fake.
    ``torch_cuda``: the case runs on torch's CUDA, whose devices are synchronized at the
    window's edges and matched to NVML's by their UUIDs. False for a framework whose process
    must never initialise torch's CUDA (JAX, trainperf.system.jax_environment): no synchronization
    (the step timer waits for the device itself), and the indices are mapped to NVML's
    through ``CUDA_VISIBLE_DEVICES``, as CUDA numbers them (with MIG, or a batch system that
    hides GPUs without setting it, that mapping cannot see the hiding).
    """

    def __init__(
        self,
        device: torch.device,
        read_cpu_energy: bool = True,
        device_indices: Sequence[int] | None = None,
        nvml: Any = None,
        torch_cuda: bool = True,
    ) -> None:
        from trainperf.measure.gpu_context import WindowSampler

        self.device = device
        self.indices: list[int] = []
        if device.type == "cuda":
            default = [device.index or 0]
            self.indices = list(device_indices) if device_indices is not None else default
        self._nvml = nvml
        self._sync_devices = torch_cuda
        # nvml_handle's mapping: by torch's UUIDs (None), or by this string alone.
        self._visible = None if torch_cuda else os.environ.get("CUDA_VISIBLE_DEVICES", "")
        meters = make_meters(
            device.type, self.indices, nvml, interval_s=SAMPLE_INTERVAL_S, visible=self._visible
        )
        self.meters = [m for m in meters if read_cpu_energy or not isinstance(m, RaplEnergy)]
        self.window = (
            WindowSampler(nvml, self.indices, SAMPLE_INTERVAL_S, self._visible)
            if self.indices
            else None
        )
        self.start_contexts: list[dict[str, Any]] = []
        self.end_contexts: list[dict[str, Any]] = []
        self.readings: list[Reading] = []

    @property
    def start_context(self) -> dict[str, Any]:
        """The first device's start context (one device per rank under ddp)."""
        return self.start_contexts[0] if self.start_contexts else {}

    @property
    def end_context(self) -> dict[str, Any]:
        return self.end_contexts[0] if self.end_contexts else {}

    def _contexts(self) -> list[dict[str, Any]]:
        from trainperf.measure.gpu_context import cpu_context, gpu_context

        if self.device.type == "cuda":
            return [gpu_context(self._nvml, index, self._visible) for index in self.indices]
        return [cpu_context()]

    def _synchronize(self) -> None:
        if not self._sync_devices:
            return
        for index in self.indices:
            torch.cuda.synchronize(index)

    def begin(self) -> None:
        self.start_contexts = self._contexts()
        self._synchronize()
        for meter in self.meters:
            meter.begin()
        if self.window is not None:
            self.window.begin()

    def end(self) -> None:
        self._synchronize()
        self.readings = [reading for meter in self.meters for reading in meter.end()]
        window = self.window.end() if self.window is not None else {}
        self.end_contexts = self._contexts()
        if self.indices:  # GPU contexts, one per index (a CPU case has one cpu_context)
            for index, context in zip(self.indices, self.end_contexts, strict=True):
                context["window"] = window.get(index)
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
    """Energy (W, J/sample, samples/s/W, with sources and absent reasons) and context.

    On GPUs also the window means (``window_means``) and the clock conditions of
    trainperf.measure.clock_events.gpu_conditions: ``power_capped_share``,
    ``clocks_event_shares``, ``violation_shares``, ``sm_clock_cv``, and ``throttled`` with
    ``throttle_reasons`` for thermal and hardware slowdowns only (``seconds`` is the
    window's length, which the violation counters are a share of).
    """
    metrics = summarize(readings, samples, seconds)
    metrics["context_start"], metrics["context_end"] = start_contexts, end_contexts
    if device_type == "cuda":
        metrics |= gpu_conditions(start_contexts, end_contexts, seconds)
        metrics |= window_means(end_contexts)
    return metrics


def window_means(end_contexts: list[dict[str, Any]]) -> dict[str, Any]:
    """SM clock and power of the GPUs over the window: ``sm_clock_mhz_mean`` (mean over the
    GPUs of each one's mean), ``gpu_power_w_mean`` (sum over the GPUs of each one's mean)
    with ``gpu_power_source`` (what the power readings are: trainperf.measure.gpu_power;
    the sources joined by "; " if the GPUs differ); None, with ``window_absent_reason``,
    unless every GPU gave samples."""
    windows = [c.get("window") or {} for c in end_contexts]
    clocks = [w.get("sm_clock_mhz_mean") for w in windows]
    powers = [w.get("power_w_mean") for w in windows]
    out: dict[str, Any] = {"sm_clock_mhz_mean": None, "gpu_power_w_mean": None}
    if windows and None not in clocks:
        out["sm_clock_mhz_mean"] = sum(clocks) / len(clocks)
    if windows and None not in powers:
        out["gpu_power_w_mean"] = sum(powers)
        out["gpu_power_source"] = "; ".join(sorted({w["power_source"] for w in windows}))
    if None in out.values():
        missing = [
            f"gpu{c.get('index')}: {w.get('absent', 'no clock or power sample')}"
            for c, w in zip(end_contexts, windows, strict=True)
            if w.get("sm_clock_mhz_mean") is None or w.get("power_w_mean") is None
        ]
        out["window_absent_reason"] = "; ".join(missing) or "no GPU context"
    return out
