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

Cost: counters are two reads per window per domain, outside the measured steps. The
sampling thread exists only for GPUs without the counter; it sleeps on an ``Event`` between
samples, so it takes no CPU time while the steps run.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
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


class _Meter:
    """Context-manager plumbing: ``with meter:`` closes it on the way out."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _description(
    source: str, domain: str, method: str | None = None, reason: str | None = None
) -> dict[str, Any]:
    return {
        "source": source,
        "domain": domain,
        "available": reason is None,
        "method": method,
        "absent_reason": reason,
    }


class AbsentMeter(_Meter):
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
        return [_description(self.source, self.domain, reason=self.reason)]


# ---------------------------------------------------------------------------- NVML


def integrate(samples: Sequence[tuple[float, float]]) -> float:
    """Trapezoidal integral of (time s, power W) samples, in joules (0 for under 2)."""
    return sum(
        (t1 - t0) * (p0 + p1) / 2.0
        for (t0, p0), (t1, p1) in zip(samples, samples[1:], strict=False)
    )


def nvml_handle(nvml: Any, cuda_index: int, visible: str | None = None) -> Any:
    """The NVML handle of CUDA device ``cuda_index``.

    NVML numbers all GPUs of the machine; CUDA numbers those in ``CUDA_VISIBLE_DEVICES``
    (indices or UUIDs), so ``cuda:0`` under ``CUDA_VISIBLE_DEVICES=3`` is NVML device 3.
    Both number in PCI order when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; on machines with
    identical GPUs the default order agrees with it too.
    """
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in visible.split(",")] if visible else []
    if not entries:
        return nvml.nvmlDeviceGetHandleByIndex(cuda_index)
    if cuda_index >= len(entries):
        raise IndexError(f"cuda:{cuda_index} is not visible (CUDA_VISIBLE_DEVICES={visible!r})")
    entry = entries[cuda_index]
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    return nvml.nvmlDeviceGetHandleByUUID(entry)


class NvmlPowerSampler(_Meter):
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
        return [_description(SOURCE_NVML_SAMPLING, self.domain, method)]

    def close(self) -> None:
        self._halt()


class NvmlEnergy(_Meter):
    """GPU energy from NVML for the CUDA devices ``device_indices`` (domains ``gpu<i>``).

    Each GPU uses its total-energy counter; one whose counter fails (NotSupported before
    Volta) falls back to an ``NvmlPowerSampler``; one with neither gives absent readings.
    ``nvmlInit`` runs here and may raise (the factory turns that into an ``AbsentMeter``);
    ``close()`` calls ``nvmlShutdown``. NVML counts init/shutdown pairs, so several meters
    can coexist.
    """

    def __init__(
        self,
        nvml: Any,
        device_indices: Sequence[int],
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        visible: str | None = None,
    ) -> None:
        nvml.nvmlInit()
        self._nvml = nvml
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
            _description(
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
        out += [_description(SOURCE_NVML, d, reason=r) for d, r in self._absent.items()]
        return sorted(out, key=lambda d: _gpu_order(d["domain"]))

    def close(self) -> None:
        for sampler in self._samplers.values():
            sampler.close()
        if not self._closed:
            self._closed = True
            self._nvml.nvmlShutdown()


def _gpu_order(domain: str) -> int:
    return int(domain[3:]) if domain[3:].isdigit() else -1


# ---------------------------------------------------------------------------- RAPL


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


@dataclass(frozen=True)
class _RaplZone:
    domain: str  # "package-0", "dram-0"
    path: Path  # the zone's directory


class RaplEnergy(_Meter):
    """CPU energy from the Linux powercap RAPL files under ``root``.

    ``reader(path) -> str`` reads one file; it is a parameter so tests can simulate a
    permission error even when run as root (who reads everything regardless of mode).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] = RAPL_ROOT,
        reader: Callable[[str], str] = _read_text,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = Path(root)
        self._read = reader
        self._clock = clock
        self.zones, self.missing_reason = self._discover()
        self._begin: dict[str, int | str] = {}
        self._t0: float | None = None

    def _discover(self) -> tuple[list[_RaplZone], str | None]:
        try:
            names = sorted(os.listdir(self.root))
        except OSError:
            names = []
        packages = sorted(
            (int(m.group(1)), n) for n in names if (m := re.fullmatch(r"intel-rapl:(\d+)", n))
        )
        if not packages:
            return [], f"no RAPL powercap interface ({self.root / 'intel-rapl'} absent)"
        zones: list[_RaplZone] = []
        for number, name in packages:
            path = self.root / name
            try:
                zone_name = self._read(str(path / "name")).strip()
            except OSError:
                continue
            # psys (whole platform on some laptops) overlaps the packages: left out.
            if not zone_name.startswith("package"):
                continue
            zones.append(_RaplZone(zone_name, path))
            suffix = zone_name.rpartition("-")[2]
            socket = suffix if suffix.isdigit() else str(number)
            for sub in self._subzones(number, path, names):
                try:
                    sub_name = self._read(str(sub / "name")).strip()
                except OSError:
                    continue
                if sub_name == "dram":
                    zones.append(_RaplZone(f"dram-{socket}", sub))
        if not zones:
            return [], f"no RAPL package zone under {self.root}"
        return zones, None

    def _subzones(self, number: int, package: Path, root_names: list[str]) -> list[Path]:
        """Subzones appear in the package's directory and, in sysfs, also as root links."""
        pattern = re.compile(rf"intel-rapl:{number}:\d+")
        found: dict[str, Path] = {}
        try:
            inner = sorted(os.listdir(package))
        except OSError:
            inner = []
        for name in inner:
            if pattern.fullmatch(name):
                found.setdefault(name, package / name)
        for name in root_names:
            if pattern.fullmatch(name):
                found.setdefault(name, self.root / name)
        return [found[n] for n in sorted(found)]

    def _read_uj(self, path: Path) -> int | str:
        """Microjoules, or the reason they cannot be read."""
        try:
            return int(self._read(str(path)).strip())
        except PermissionError:
            return f"RAPL energy files not readable by this user ({path})"
        except (OSError, ValueError) as exc:
            return f"RAPL read failed ({path}): {exc}"

    def begin(self) -> None:
        self._begin = {z.domain: self._read_uj(z.path / "energy_uj") for z in self.zones}
        self._t0 = self._clock()

    def end(self) -> list[Reading]:
        if self._t0 is None:
            raise RuntimeError("RaplEnergy.end() without begin()")
        ends = {z.domain: self._read_uj(z.path / "energy_uj") for z in self.zones}
        duration = self._clock() - self._t0
        self._t0 = None
        if self.missing_reason is not None:
            return [absent(SOURCE_RAPL, "cpu", self.missing_reason, duration)]
        return [
            self._reading(z, self._begin[z.domain], ends[z.domain], duration) for z in self.zones
        ]

    def _reading(
        self, zone: _RaplZone, begin: int | str, end: int | str, duration: float
    ) -> Reading:
        for value in (begin, end):
            if isinstance(value, str):
                return absent(SOURCE_RAPL, zone.domain, value, duration)
        delta = end - begin
        if delta < 0:
            max_range = self._read_uj(zone.path / "max_energy_range_uj")
            if isinstance(max_range, str):
                reason = f"counter wrapped and its range is unknown: {max_range}"
                return absent(SOURCE_RAPL, zone.domain, reason, duration)
            delta += max_range
        return measured(SOURCE_RAPL, zone.domain, delta / 1e6, duration)

    def describe(self) -> list[dict[str, Any]]:
        if self.missing_reason is not None:
            return [_description(SOURCE_RAPL, "cpu", reason=self.missing_reason)]
        out = []
        for zone in self.zones:
            probe = self._read_uj(zone.path / "energy_uj")
            reason = probe if isinstance(probe, str) else None
            method = f"{zone.path / 'energy_uj'} (uJ) read at both edges, wrap-corrected"
            out.append(_description(SOURCE_RAPL, zone.domain, method, reason))
        return out


# ---------------------------------------------------------------------------- factory


def make_meters(
    device_type: str,
    device_indices: Sequence[int],
    nvml: Any = None,
    rapl_root: str | os.PathLike[str] = RAPL_ROOT,
    interval_s: float = 0.1,
) -> list[EnergyMeter]:
    """The meters for a case: NVML for the CUDA devices on ``cuda``, RAPL for the CPU always.

    ``device_indices`` are CUDA (torch) indices; ``nvml`` defaults to ``pynvml``. Whatever
    the machine lacks becomes an ``AbsentMeter`` saying why.
    """
    meters: list[EnergyMeter] = []
    if device_type == "cuda":
        try:
            if nvml is None:
                import pynvml as nvml
            meters.append(NvmlEnergy(nvml, device_indices, interval_s))
        except Exception as exc:
            reason = f"NVML not available: {exc}"
            domains = [f"gpu{i}" for i in device_indices] or ["gpu"]
            meters.extend(AbsentMeter(SOURCE_NVML, d, reason) for d in domains)
    try:
        meters.append(RaplEnergy(rapl_root))
    except Exception as exc:
        meters.append(AbsentMeter(SOURCE_RAPL, "cpu", f"RAPL discovery failed: {exc}"))
    return meters


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
