"""Conditions a case ran under: clocks, temperature, power and clocks-event reasons.

``gpu_context`` and ``cpu_context`` return plain dicts (stored with the result), read at
the edges of the measured window. A value the machine cannot give is None, with the
reason under ``absent[<key>]``. Units are in the keys: ``_mhz``, ``_c`` (degrees
Celsius), ``_w``. Power is read as trainperf.measure.gpu_power says (the instantaneous
field where the driver has it), and ``power_source`` says which reading it is.

The edges come right after a synchronize, when the GPU idles, so what happens between
them is read two ways: NVML's cumulative violation counters (``violation_ns``, read at
both edges) and a ``WindowSampler`` thread that reads the SM clock, the power draw and
the clocks-event reasons while the steps run (its summary goes to ``end["window"]``: the
clock and power of the window, not of the idle edges, each reason's share of the samples
and how much the SM clock varied). Which of these make a case unstable, and which are
only conditions it ran under (a power cap), is decided in trainperf.measure.clock_events.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from trainperf.measure.clock_events import IDLE, clock_cv, decode_throttle_reasons, reason_shares
from trainperf.measure.energy_nvml import NvmlUnavailable, close_nvml, nvml_handle, open_nvml
from trainperf.measure.gpu_power import PowerProbe, power_probe

# nvmlPerfPolicyType_t (nvml.h): our reason name, the pynvml constant, its nvml.h value.
# nvmlDeviceGetViolationStatus gives, per policy, the nanoseconds the clocks were held
# below what was asked since the driver loaded; read at both edges of the measured window,
# a growth is time held down during the window, however short and wherever it fell
# (trainperf.measure.clock_events says which policies are slowdowns). LOW_UTILIZATION
# (idle) and the TOTAL_* clock policies are states, left out.
VIOLATION_POLICIES: list[tuple[str, str, int]] = [
    ("power_cap", "NVML_PERF_POLICY_POWER", 0),
    ("thermal", "NVML_PERF_POLICY_THERMAL", 1),
    ("sync_boost", "NVML_PERF_POLICY_SYNC_BOOST", 2),
    ("board_limit", "NVML_PERF_POLICY_BOARD_LIMIT", 3),
    ("reliability", "NVML_PERF_POLICY_RELIABILITY", 5),
]

# nvml.h values, for fakes of the module that do not define the constants.
_NVML_CLOCK_SM, _NVML_CLOCK_MEM, _NVML_TEMPERATURE_GPU = 1, 2, 0


def clocks_event_mask(nvml: Any, handle: Any) -> int:
    """The current reasons bitmask; the older ``...ThrottleReasons`` call on old drivers."""
    try:
        return nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    except Exception as new_exc:  # AttributeError on old pynvml, FunctionNotFound on old drivers
        try:
            return nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        except AttributeError:
            raise new_exc from None


def gpu_context(nvml: Any, index: int, visible: str | None = None) -> dict[str, Any]:
    """Clocks, temperature, power draw (with ``power_source``) and clocks-event reasons
    (``throttle_reasons``, every bit set, decoded) of CUDA device ``index`` now.

    ``nvml`` is the pynvml module (None imports it) or a fake; NVML is opened and closed
    around the reads (NVML counts the pairs, so an open meter is unaffected). ``visible``:
    how CUDA indices map to NVML's (trainperf.measure.energy_nvml.nvml_handle).
    """
    out: dict[str, Any] = {
        "index": index,
        "sm_clock_mhz": None,
        "mem_clock_mhz": None,
        "temperature_c": None,
        "power_w": None,
        "power_source": None,
        "throttle_reasons": None,
        "throttle_reasons_mask": None,
        "violation_ns": None,
        "absent": {},
    }
    keys = [k for k in out if k not in ("index", "absent")]
    try:
        nvml = open_nvml(nvml)
    except NvmlUnavailable as exc:
        out["absent"] = dict.fromkeys(keys, str(exc))
        return out
    try:
        try:
            handle = nvml_handle(nvml, index, visible)
        except Exception as exc:
            out["absent"] = dict.fromkeys(keys, f"no NVML handle for cuda:{index}: {exc}")
            return out
        sm = getattr(nvml, "NVML_CLOCK_SM", _NVML_CLOCK_SM)
        mem = getattr(nvml, "NVML_CLOCK_MEM", _NVML_CLOCK_MEM)
        temp = getattr(nvml, "NVML_TEMPERATURE_GPU", _NVML_TEMPERATURE_GPU)
        power = power_probe(nvml, handle)
        probes: dict[str, tuple[str, Callable[[], Any]]] = {
            "sm_clock_mhz": (
                "nvmlDeviceGetClockInfo",
                lambda: nvml.nvmlDeviceGetClockInfo(handle, sm),
            ),
            "mem_clock_mhz": (
                "nvmlDeviceGetClockInfo",
                lambda: nvml.nvmlDeviceGetClockInfo(handle, mem),
            ),
            "temperature_c": (
                "nvmlDeviceGetTemperature",
                lambda: nvml.nvmlDeviceGetTemperature(handle, temp),
            ),
            "power_w": (f"power reading {power.source}", power.read_w),
            "throttle_reasons_mask": (
                "nvmlDeviceGetCurrentClocksEventReasons",
                lambda: clocks_event_mask(nvml, handle),
            ),
            "violation_ns": (
                "nvmlDeviceGetViolationStatus",
                lambda: violation_ns(nvml, handle),
            ),
        }
        for key, (call, probe) in probes.items():
            try:
                out[key] = probe()
            except Exception as exc:
                out["absent"][key] = f"{call} failed: {exc}"
        if out["power_w"] is None:
            out["absent"]["power_source"] = out["absent"]["power_w"]
        else:
            out["power_source"] = power.source
        if out["throttle_reasons_mask"] is None:
            out["absent"]["throttle_reasons"] = out["absent"]["throttle_reasons_mask"]
        else:
            out["throttle_reasons"] = decode_throttle_reasons(out["throttle_reasons_mask"], nvml)
    finally:
        close_nvml(nvml)
    return out


def violation_ns(nvml: Any, handle: Any) -> dict[str, int]:
    """Cumulative violation time (ns) per policy of ``VIOLATION_POLICIES`` that the GPU
    reports; raises when it reports none (NotSupported on consumer GPUs and MIG)."""
    out, errors = {}, []
    for name, constant, default in VIOLATION_POLICIES:
        try:
            status = nvml.nvmlDeviceGetViolationStatus(handle, getattr(nvml, constant, default))
        except Exception as exc:
            errors.append(f"{name}: {exc}")
            continue
        out[name] = int(status.violationTime)
    if not out:
        raise RuntimeError("; ".join(errors))
    return out


class WindowSampler:
    """SM clock, power and clocks-event reasons of some GPUs, sampled during a window.

    The edges of a measured window fall right after a synchronize, when the GPU is idle:
    clocks and power read there are idle values and a power-cap or thermal slowdown in
    between is missed. This thread reads them every ``interval_s`` while the steps run
    (NVML calls release the GIL; the thread sleeps on an ``Event`` in between) and
    ``end()`` summarizes each GPU's samples. Power is read as ``power_probe`` chooses
    once per GPU at ``begin`` (the instantaneous field where the driver has it).
    ``nvml`` is the pynvml module (None imports it) or a fake; ``visible``: how CUDA indices
    map to NVML's (trainperf.measure.energy_nvml.nvml_handle).
    """

    def __init__(
        self, nvml: Any, indices: list[int], interval_s: float = 0.1, visible: str | None = None
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self._nvml, self.indices, self.interval_s = nvml, list(indices), interval_s
        self._visible = visible
        self._handles: dict[int, Any] = {}
        self._power: dict[int, PowerProbe] = {}
        self._absent: dict[int, str] = {}
        self._samples: dict[int, list[tuple[Any, Any, Any]]] = {}
        self._errors: dict[tuple[int, str], str] = {}  # (index, quantity) -> first failure
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._open = False

    def begin(self) -> None:
        self._samples, self._handles, self._absent, self._power = {}, {}, {}, {}
        self._errors = {}
        try:
            self._nvml = open_nvml(self._nvml)
        except NvmlUnavailable as exc:
            self._absent = dict.fromkeys(self.indices, str(exc))
            return
        self._open = True
        for index in self.indices:
            try:
                self._handles[index] = nvml_handle(self._nvml, index, self._visible)
            except Exception as exc:
                self._absent[index] = f"no NVML handle for cuda:{index}: {exc}"
                continue
            self._power[index] = power_probe(self._nvml, self._handles[index])
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpu-window", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        """One reading of every GPU; a value NVML cannot give is kept as None."""
        nvml = self._nvml
        sm = getattr(nvml, "NVML_CLOCK_SM", _NVML_CLOCK_SM)
        for index, handle in self._handles.items():
            clock = self._read(
                index, "sm_clock", lambda h=handle: nvml.nvmlDeviceGetClockInfo(h, sm)
            )
            power = self._read(index, "power", self._power[index].read_w)
            mask = self._read(index, "reasons", lambda h=handle: clocks_event_mask(nvml, h))
            self._samples.setdefault(index, []).append((clock, power, mask))

    def _read(self, index: int, quantity: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as exc:  # a probe never crashes the case; the value stays absent
            self._errors.setdefault((index, quantity), f"{quantity} not read: {exc}")
            return None

    def end(self) -> dict[int, dict[str, Any]]:
        """Per CUDA index, over its samples: ``sm_clock_mhz_mean``; ``sm_clock_cv``
        (trainperf.measure.clock_events.clock_cv over the samples where the GPU was not
        idle); ``power_w_mean`` with ``power_source`` (and ``power_instant_absent_reason``
        when the instantaneous field was not used); ``clocks_event_shares`` (each reason
        seen: its share of the samples that read the reasons); ``samples`` and
        ``interval_s``. A value without samples is None with ``<key>_absent_reason``; a
        GPU NVML cannot read has only ``absent``. A window shorter than ``interval_s``
        gets one sample, taken now."""
        self.close(shutdown=False)
        if self._open and not self._samples:
            self.sample()
        out = {i: self._summary(i, self._samples.get(i, [])) for i in self._handles}
        out |= {i: {"absent": reason} for i, reason in self._absent.items()}
        self.close()
        return out

    def _summary(self, index: int, rows: list[tuple[Any, Any, Any]]) -> dict[str, Any]:
        reasons = [
            decode_throttle_reasons(m, self._nvml) if m is not None else None for _, _, m in rows
        ]
        busy = [
            c
            for (c, _, _), r in zip(rows, reasons, strict=True)
            if c is not None and IDLE not in (r or [])
        ]
        power = self._power[index]
        out: dict[str, Any] = {
            "sm_clock_mhz_mean": _mean([c for c, _, _ in rows]),
            "sm_clock_cv": clock_cv(busy),
            "power_w_mean": _mean([p for _, p, _ in rows]),
            "power_source": power.source,
            "clocks_event_shares": reason_shares([r for r in reasons if r is not None]),
            "samples": len(rows),
            "interval_s": self.interval_s,
        }
        if power.instant_absent_reason is not None:
            out["power_instant_absent_reason"] = power.instant_absent_reason
        whys = {
            "sm_clock_mhz_mean": self._errors.get((index, "sm_clock"), "no sample"),
            "sm_clock_cv": self._errors.get(
                (index, "sm_clock"), f"{len(busy)} busy SM clock samples, fewer than 2"
            ),
            "power_w_mean": self._errors.get((index, "power"), "no sample"),
            "clocks_event_shares": self._errors.get((index, "reasons"), "no sample"),
        }
        out |= {f"{k}_absent_reason": why for k, why in whys.items() if out[k] is None}
        return out

    def close(self, shutdown: bool = True) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if shutdown and self._open:
            self._open = False
            close_nvml(self._nvml)


def _mean(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def cpu_context(
    thermal_root: str | os.PathLike[str] = "/sys/class/thermal",
    cpu_freq: Callable[[], Any] = psutil.cpu_freq,
) -> dict[str, Any]:
    """Current CPU frequency (psutil) and the temperatures of the thermal zones."""
    out: dict[str, Any] = {
        "cpu_freq_mhz": None,
        "cpu_freq_max_mhz": None,
        "thermal_zones": None,
        "absent": {},
    }
    try:
        freq = cpu_freq()
    except Exception as exc:
        freq, reason = None, f"psutil.cpu_freq failed: {exc}"
    else:
        reason = "psutil.cpu_freq gives nothing on this machine"
    # psutil reports 0 for a frequency it does not know: that is absent, not 0 MHz.
    for key, attr in (("cpu_freq_mhz", "current"), ("cpu_freq_max_mhz", "max")):
        value = getattr(freq, attr, None) if freq is not None else None
        if value:
            out[key] = float(value)
        else:
            out["absent"][key] = reason if freq is None else f"psutil.cpu_freq reports no {attr}"
    zones, zone_reason = _thermal_zones(Path(thermal_root))
    if zones:
        out["thermal_zones"] = zones
    else:
        out["absent"]["thermal_zones"] = zone_reason
    return out


def _thermal_zones(root: Path) -> tuple[list[dict[str, Any]], str | None]:
    try:
        names = sorted(n for n in os.listdir(root) if n.startswith("thermal_zone"))
    except OSError:
        names = []
    if not names:
        return [], f"no thermal zones under {root}"
    zones, failures = [], []
    for name in names:
        try:
            millidegrees = int((root / name / "temp").read_text().strip())
        except (OSError, ValueError) as exc:
            failures.append(f"{root / name / 'temp'}: {exc}")
            continue
        try:
            kind = (root / name / "type").read_text().strip()
        except OSError:
            kind = None
        zones.append({"zone": name, "type": kind, "temp_c": millidegrees / 1000.0})
    return zones, ("thermal zones not readable: " + "; ".join(failures)) if not zones else None
