"""GPU energy from NVML: the total-energy counter, or power sampled and integrated.

See trainperf.measure.energy for the readings and how absent ones look.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from trainperf.core.limits import ascii_digits
from trainperf.measure.energy import (
    SOURCE_NVML,
    SOURCE_NVML_COUNTER,
    SOURCE_NVML_SAMPLING,
    MeterBase,
    Reading,
    absent,
    domain_description,
    integrate,
    measured,
)


class NvmlUnavailable(Exception):
    """pynvml or the NVIDIA driver is missing; ``str()`` is the absent reason to record."""


def open_nvml(nvml: Any = None) -> Any:
    """Initialize NVML and return the module to call: ``nvml`` (a fake) or pynvml.

    The one place NVML is opened: energy meters, the window sampler, the GPU context and
    the system inventory all start here and end with ``close_nvml``. NVML counts the
    init/shutdown pairs, so these sessions may overlap. Raises ``NvmlUnavailable``
    ("NVML not available: <why>") when pynvml cannot be imported or ``nvmlInit`` fails.
    """
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception as exc:  # no library, no driver: a CPU-only machine
        raise NvmlUnavailable(f"NVML not available: {exc}") from exc
    return nvml


def close_nvml(nvml: Any) -> None:
    """End a session that ``open_nvml`` began."""
    nvml.nvmlShutdown()


def normal_uuid(uuid: Any) -> str:
    """A GPU UUID as NVML spells it without its prefix: lower-case hex, dashed 8-4-4-4-12.

    NVML returns "GPU-<uuid>" (or "MIG-<uuid>" for a MIG instance), CUDA the bare UUID;
    torch's ``_CUuuid`` prints it with or without dashes depending on the version.
    """
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    text = text.strip().lower()
    for prefix in ("gpu-", "mig-"):
        text = text.removeprefix(prefix)
    bare = text.replace("-", "")
    if len(bare) != 32:
        return text
    return "-".join(bare[a:b] for a, b in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32)))


def cuda_uuids(cuda: Any = None) -> list[str] | None:
    """UUIDs of the devices CUDA can use, in CUDA's order; None when torch has no CUDA.

    ``torch.cuda.device_count`` and ``get_device_properties(i).uuid`` see what CUDA sees:
    ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs), a batch system's cgroup binding (Slurm)
    and MIG instances, none of which ``nvmlDeviceGetCount`` knows about. Reading the
    properties initializes CUDA's runtime in this process but creates no context on a GPU.
    ``cuda`` is ``torch.cuda`` or a fake of it.
    """
    if cuda is None:
        import torch

        cuda = torch.cuda
    if not cuda.is_available():
        return None
    return [normal_uuid(cuda.get_device_properties(i).uuid) for i in range(cuda.device_count())]


def handle_by_uuid(nvml: Any, uuid: str) -> Any:
    """The NVML handle of a full GPU ("GPU-" UUID) or, failing that, a MIG instance."""
    try:
        return nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
    except Exception as gpu_exc:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(f"MIG-{uuid}")
        except Exception:
            raise gpu_exc from None


def nvml_handle(
    nvml: Any, cuda_index: int, visible: str | None = None, uuids: list[str] | None = None
) -> Any:
    """The NVML handle of CUDA device ``cuda_index``.

    By UUID when CUDA's device UUIDs are known (``uuids``, by default ``cuda_uuids()``
    when ``visible`` is not given): right under every way of hiding devices. Otherwise
    from ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs): NVML numbers all GPUs of the
    machine, CUDA those listed, so ``cuda:0`` under ``CUDA_VISIBLE_DEVICES=3`` is NVML
    device 3. Both number in PCI order when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; on machines
    with identical GPUs the default order agrees with it too. A ``visible`` string, even
    empty (the variable unset: NVML's order), never asks torch, whose CUDA it would
    initialise (the JAX worker's probes rely on that).
    """
    if uuids is None and visible is None:
        uuids = cuda_uuids()
    if uuids is not None:
        if cuda_index >= len(uuids):
            raise IndexError(f"cuda:{cuda_index} is not visible: CUDA sees {len(uuids)} devices")
        return handle_by_uuid(nvml, uuids[cuda_index])
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in visible.split(",")] if visible else []
    if not entries:
        return nvml.nvmlDeviceGetHandleByIndex(cuda_index)
    if cuda_index >= len(entries):
        raise IndexError(f"cuda:{cuda_index} is not visible (CUDA_VISIBLE_DEVICES={visible!r})")
    entry = entries[cuda_index]
    if ascii_digits(entry):
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    return nvml.nvmlDeviceGetHandleByUUID(entry)


class NvmlPowerSampler(MeterBase):
    """Energy of one GPU by sampling its power draw on a background thread.

    ``clock`` (seconds) is injectable so tests control the sample times. Samples are taken
    at ``begin``, every ``interval_s`` in between, and at ``end``.
    """

    def __init__(
        self,
        nvml: Any,
        handle: Any,
        domain: str,
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self._nvml, self._handle, self.domain = nvml, handle, domain
        self.interval_s = interval_s
        self._clock = clock
        self._samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None

    def _sample(self) -> None:
        t = self._clock()
        try:
            milliwatts = self._nvml.nvmlDeviceGetPowerUsage(self._handle)
        except Exception as exc:  # a probe records the failure, never crashes the case
            self._error = f"nvmlDeviceGetPowerUsage failed: {exc}"
            return
        self._samples.append((t, milliwatts / 1000.0))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def begin(self) -> None:
        self._halt()
        self._samples, self._error = [], None
        self._stop.clear()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="nvml-power", daemon=True)
        self._thread.start()

    def _halt(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def end(self) -> list[Reading]:
        if self._thread is None:
            raise RuntimeError("NvmlPowerSampler.end() without begin()")
        self._halt()
        self._sample()
        samples = self._samples
        duration = samples[-1][0] - samples[0][0] if samples else 0.0
        if self._error is not None:
            return [absent(SOURCE_NVML_SAMPLING, self.domain, self._error, duration)]
        return [
            measured(
                SOURCE_NVML_SAMPLING,
                self.domain,
                integrate(samples),
                duration,
                samples=len(samples),
            )
        ]

    def describe(self) -> list[dict[str, Any]]:
        method = (
            f"nvmlDeviceGetPowerUsage (mW) sampled every {self.interval_s} s, "
            "trapezoidal integral including both edges"
        )
        return [domain_description(SOURCE_NVML_SAMPLING, self.domain, method)]

    def close(self) -> None:
        self._halt()


class NvmlEnergy(MeterBase):
    """GPU energy from NVML for the CUDA devices ``device_indices`` (domains ``gpu<i>``).

    Each GPU uses its total-energy counter; one whose counter fails (NotSupported before
    Volta) falls back to an ``NvmlPowerSampler``; one with neither gives absent readings.
    NVML is opened here (``open_nvml``, ``nvml`` None imports pynvml) and may raise
    ``NvmlUnavailable`` (the factory turns that into an ``AbsentMeter``); ``close()``
    closes it. NVML counts init/shutdown pairs, so several meters can coexist.
    """

    def __init__(
        self,
        nvml: Any,
        device_indices: Sequence[int],
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        visible: str | None = None,
    ) -> None:
        self._nvml = open_nvml(nvml)
        self._closed = False
        self._clock = clock
        self._counters: dict[str, Any] = {}  # domain -> handle
        self._samplers: dict[str, NvmlPowerSampler] = {}
        self._absent: dict[str, str] = {}  # domain -> reason
        self._counter_reasons: dict[str, str] = {}  # why a domain is sampled instead
        self._begin: dict[str, int] = {}
        self._begin_errors: dict[str, str] = {}
        self._t0: float | None = None
        for index in device_indices:
            self._probe(f"gpu{index}", index, interval_s, visible)

    def _probe(self, domain: str, index: int, interval_s: float, visible: str | None) -> None:
        try:
            handle = nvml_handle(self._nvml, index, visible)
        except Exception as exc:
            self._absent[domain] = f"no NVML handle for cuda:{index}: {exc}"
            return
        try:
            self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            self._counters[domain] = handle
            return
        except Exception as exc:
            counter_reason = f"nvmlDeviceGetTotalEnergyConsumption failed: {exc}"
        try:
            self._nvml.nvmlDeviceGetPowerUsage(handle)
        except Exception as exc:
            self._absent[domain] = f"{counter_reason}; nvmlDeviceGetPowerUsage failed: {exc}"
            return
        self._counter_reasons[domain] = counter_reason
        self._samplers[domain] = NvmlPowerSampler(
            self._nvml, handle, domain, interval_s, self._clock
        )

    def begin(self) -> None:
        self._begin, self._begin_errors = {}, {}
        for domain, handle in self._counters.items():
            try:
                self._begin[domain] = self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except Exception as exc:
                self._begin_errors[domain] = f"nvmlDeviceGetTotalEnergyConsumption failed: {exc}"
        self._t0 = self._clock()
        for sampler in self._samplers.values():
            sampler.begin()

    def end(self) -> list[Reading]:
        if self._t0 is None:
            raise RuntimeError("NvmlEnergy.end() without begin()")
        ends: dict[str, int | str] = {}
        for domain, handle in self._counters.items():
            try:
                ends[domain] = self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except Exception as exc:
                ends[domain] = f"nvmlDeviceGetTotalEnergyConsumption failed: {exc}"
        duration = self._clock() - self._t0
        readings: list[Reading] = []
        for domain, end in ends.items():
            if domain in self._begin_errors:
                reason = self._begin_errors[domain]
                readings.append(absent(SOURCE_NVML_COUNTER, domain, reason, duration))
            elif isinstance(end, str):
                readings.append(absent(SOURCE_NVML_COUNTER, domain, end, duration))
            else:
                joules = (end - self._begin[domain]) / 1000.0  # millijoules
                readings.append(measured(SOURCE_NVML_COUNTER, domain, joules, duration))
        for sampler in self._samplers.values():
            readings.extend(sampler.end())
        for domain, reason in self._absent.items():
            readings.append(absent(SOURCE_NVML, domain, reason, duration))
        self._t0 = None
        return sorted(readings, key=lambda r: _gpu_order(r.domain))

    def describe(self) -> list[dict[str, Any]]:
        out = [
            domain_description(
                SOURCE_NVML_COUNTER,
                domain,
                "nvmlDeviceGetTotalEnergyConsumption (mJ since driver load), read at both edges",
            )
            for domain in self._counters
        ]
        for domain, sampler in self._samplers.items():
            (entry,) = sampler.describe()
            entry["method"] += f" (counter unavailable: {self._counter_reasons[domain]})"
            out.append(entry)
        out += [domain_description(SOURCE_NVML, d, reason=r) for d, r in self._absent.items()]
        return sorted(out, key=lambda d: _gpu_order(d["domain"]))

    def close(self) -> None:
        for sampler in self._samplers.values():
            sampler.close()
        if not self._closed:
            self._closed = True
            close_nvml(self._nvml)


def _gpu_order(domain: str) -> int:
    return int(domain[3:]) if ascii_digits(domain[3:]) else -1


# ---------------------------------------------------------------------------- RAPL
