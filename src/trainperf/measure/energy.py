"""Energy of a measured window: GPU energy from NVML, CPU package and DRAM energy from RAPL.

A meter opens a window with ``begin()`` and closes it with ``end()``, which returns one
immutable ``Reading`` per source and domain. The caller synchronizes the device before
both edges, as for the step timers, so the window covers the work and nothing else.

Sources and units:

- ``nvml_total_energy``: ``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the
  driver loaded (Volta and newer). Read at ``begin`` and ``end``; the difference is the
  window's energy. The counter updates every few tens of milliseconds, so windows much
  shorter than that are coarse.
- ``nvml_power_sampling``: the fallback for a GPU without the counter. A background
  thread reads ``nvmlDeviceGetPowerUsage`` (milliwatts) every ``interval_s`` and the
  energy is the trapezoidal integral over the sample times (``time.monotonic``),
  including a sample taken at each edge: E = sum (t[i+1] - t[i]) * (P[i] + P[i+1]) / 2.
- ``rapl``: ``/sys/class/powercap/intel-rapl:N/energy_uj`` (microjoules) for each CPU
  package and its ``dram`` subzone, read at both edges. The counter wraps at
  ``max_energy_range_uj``; when ``end < begin`` it wrapped once and the energy is
  ``end + max_energy_range_uj - begin``. A window longer than one full wrap (hundreds of
  kJ: tens of minutes at a few hundred watts) cannot be told from a shorter one. The
  ``core``/``uncore`` subzones lie inside the package, so they are left out: summing them
  would count the same joules twice. AMD CPUs expose the same files under these names.

All energies are joules, powers watts, times seconds.

A reading the hardware cannot give (no NVML, no counter, RAPL files readable only by
root) has ``energy_j=None`` and an ``absent_reason``, never 0: a zero would be averaged,
summed and compared as if it were measured.

Layout: this module holds the readings, the meter protocol and ``summarize``; the meters
live in ``energy_nvml`` (NvmlEnergy, NvmlPowerSampler) and ``energy_rapl`` (RaplEnergy),
and trainperf.measure.probes chooses them for a case (``make_meters``).

Cost: counters are two reads per window per domain, outside the measured steps. The
sampling thread exists only for GPUs without the counter; it sleeps on an ``Event`` between
samples, so it takes no CPU time while the steps run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

RAPL_ROOT = "/sys/class/powercap"

SOURCE_NVML_COUNTER = "nvml_total_energy"
SOURCE_NVML_SAMPLING = "nvml_power_sampling"
SOURCE_NVML = "nvml"
SOURCE_RAPL = "rapl"

# Which side of the machine a source measures, for the separate GPU and CPU totals.
_SIDE = {
    SOURCE_NVML_COUNTER: "gpu",
    SOURCE_NVML_SAMPLING: "gpu",
    SOURCE_NVML: "gpu",
    SOURCE_RAPL: "cpu",
}


@dataclass(frozen=True)
class Reading:
    """One source and domain over one window. ``energy_j`` is None exactly when absent."""

    source: str
    domain: str
    energy_j: float | None
    duration_s: float
    average_power_w: float | None = None
    absent_reason: str | None = None
    samples: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def measured(source: str, domain: str, energy_j: float, duration_s: float, **kw: Any) -> Reading:
    """A reading with a value; its average power is energy over duration."""
    power = energy_j / duration_s if duration_s > 0 else None
    return Reading(source, domain, energy_j, duration_s, average_power_w=power, **kw)


def absent(source: str, domain: str, reason: str, duration_s: float = 0.0) -> Reading:
    """A reading the hardware could not give, with the reason."""
    return Reading(source, domain, None, duration_s, absent_reason=reason)


class EnergyMeter(Protocol):
    def begin(self) -> None:
        """Open the window (after the device is synchronized)."""
        ...

    def end(self) -> list[Reading]:
        """Close the window and return one reading per domain."""
        ...

    def describe(self) -> list[dict[str, Any]]:
        """What each domain will measure, or why it cannot; usable before ``begin``."""
        ...

    def close(self) -> None: ...


class MeterBase:
    """Context-manager plumbing: ``with meter:`` closes it on the way out."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def domain_description(
    source: str, domain: str, method: str | None = None, reason: str | None = None
) -> dict[str, Any]:
    """What one domain of a meter measures (``method``), or why it cannot (``reason``)."""
    return {
        "source": source,
        "domain": domain,
        "available": reason is None,
        "method": method,
        "absent_reason": reason,
    }


class AbsentMeter(MeterBase):
    """The empty fallback: every window gives one absent reading with the reason."""

    def __init__(
        self, source: str, domain: str, reason: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.source, self.domain, self.reason = source, domain, reason
        self._clock = clock
        self._t0: float | None = None

    def begin(self) -> None:
        self._t0 = self._clock()

    def end(self) -> list[Reading]:
        duration = self._clock() - self._t0 if self._t0 is not None else 0.0
        return [absent(self.source, self.domain, self.reason, duration)]

    def describe(self) -> list[dict[str, Any]]:
        return [domain_description(self.source, self.domain, reason=self.reason)]


# ---------------------------------------------------------------------------- NVML


def integrate(samples: Sequence[tuple[float, float]]) -> float:
    """Trapezoidal integral of (time s, power W) samples, in joules (0 for under 2)."""
    return sum(
        (t1 - t0) * (p0 + p1) / 2.0
        for (t0, p0), (t1, p1) in zip(samples, samples[1:], strict=False)
    )


# ---------------------------------------------------------------------------- metrics


def _side_total(readings: Sequence[Reading], side: str) -> tuple[float | None, str | None]:
    """Sum of one side's measured readings, and the reasons of its absent ones (if any)."""
    mine = [r for r in readings if _SIDE.get(r.source) == side]
    present = [r.energy_j for r in mine if r.energy_j is not None]
    reasons = [f"{r.source}:{r.domain}: {r.absent_reason}" for r in mine if r.energy_j is None]
    if not mine:
        reasons = [f"no {side.upper()} energy meter for this case"]
    total = sum(present) if present else None
    return total, "; ".join(reasons) or None


def summarize(readings: Sequence[Reading], samples: int, seconds: float) -> dict[str, Any]:
    """Energy metrics of a case from its readings, ``samples`` trained in ``seconds``.

    ``energy_j_total`` sums the readings that have a value (GPU and CPU), named in
    ``energy_sources``; absent ones are listed in ``energy_absent``. ``average_power_w`` is
    total / seconds, ``energy_per_sample_j`` total / samples and ``samples_per_s_per_w``
    samples / seconds / average power (equal to samples per joule). With no measured
    reading these are None and ``energy_absent_reason`` says why. ``gpu_energy_j`` and
    ``cpu_energy_j`` are the per-side sums; their ``*_absent_reason`` is set when any
    reading of that side is absent (so a partial sum is never silent).
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds!r}")
    if samples <= 0:
        raise ValueError(f"samples must be positive, got {samples!r}")
    present = [r for r in readings if r.energy_j is not None]
    missing = [r for r in readings if r.energy_j is None]
    gpu_j, gpu_reason = _side_total(readings, "gpu")
    cpu_j, cpu_reason = _side_total(readings, "cpu")
    out: dict[str, Any] = {
        "energy_j_total": None,
        "average_power_w": None,
        "energy_per_sample_j": None,
        "samples_per_s_per_w": None,
        "energy_sources": [f"{r.source}:{r.domain}" for r in present],
        "energy_absent": [
            {"source": r.source, "domain": r.domain, "reason": r.absent_reason} for r in missing
        ],
        "energy_complete": bool(readings) and not missing,
        "energy_absent_reason": None,
        "gpu_energy_j": gpu_j,
        "gpu_energy_absent_reason": gpu_reason,
        "cpu_energy_j": cpu_j,
        "cpu_energy_absent_reason": cpu_reason,
        "energy_readings": [r.as_dict() for r in readings],
    }
    if not present:
        reasons = [f"{r.source}:{r.domain}: {r.absent_reason}" for r in missing]
        out["energy_absent_reason"] = "; ".join(reasons) or "no energy meter for this case"
        return out
    total = sum(r.energy_j for r in present)
    power = total / seconds
    out["energy_j_total"] = total
    out["average_power_w"] = power
    out["energy_per_sample_j"] = total / samples
    out["samples_per_s_per_w"] = samples / seconds / power if power > 0 else None
    return out
