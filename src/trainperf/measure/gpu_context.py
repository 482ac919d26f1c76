"""Conditions a case ran under: clocks, temperature, power and throttling, read at its edges.

``gpu_context`` and ``cpu_context`` return plain dicts (stored with the result). A value
the machine cannot give is None, with the reason under ``absent[<key>]``. Units are in
the keys: ``_mhz``, ``_c`` (degrees Celsius), ``_w``.

A GPU that slows its clocks for power or heat during a case runs slower than it can;
``throttled(start, end)`` names the reasons present at either edge so the caller can flag
the case. ``gpu_idle`` and ``applications_clocks_setting`` are left out there: they are
states, not slowdowns (an idle GPU at the start edge is normal).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from trainperf.measure.energy_nvml import nvml_handle

# Bits of nvmlClocksEventReasons (nvml.h): our name, the pynvml constant names (new, old),
# and the nvml.h value used when the module has neither.
THROTTLE_REASONS: list[tuple[str, tuple[str, ...], int]] = [
    ("gpu_idle", ("nvmlClocksEventReasonGpuIdle", "nvmlClocksThrottleReasonGpuIdle"), 0x1),
    (
        "applications_clocks_setting",
        (
            "nvmlClocksEventReasonApplicationsClocksSetting",
            "nvmlClocksThrottleReasonApplicationsClocksSetting",
        ),
        0x2,
    ),
    (
        "sw_power_cap",
        ("nvmlClocksEventReasonSwPowerCap", "nvmlClocksThrottleReasonSwPowerCap"),
        0x4,
    ),
    ("hw_slowdown", ("nvmlClocksEventReasonHwSlowdown", "nvmlClocksThrottleReasonHwSlowdown"), 0x8),
    ("sync_boost", ("nvmlClocksEventReasonSyncBoost", "nvmlClocksThrottleReasonSyncBoost"), 0x10),
    (
        "sw_thermal_slowdown",
        ("nvmlClocksEventReasonSwThermalSlowdown", "nvmlClocksThrottleReasonSwThermalSlowdown"),
        0x20,
    ),
    (
        "hw_thermal_slowdown",
        ("nvmlClocksEventReasonHwThermalSlowdown", "nvmlClocksThrottleReasonHwThermalSlowdown"),
        0x40,
    ),
    (
        "hw_power_brake_slowdown",
        (
            "nvmlClocksEventReasonHwPowerBrakeSlowdown",
            "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
        ),
        0x80,
    ),
    (
        "display_clock_setting",
        (
            "nvmlClocksEventReasonDisplayClockSetting",
            "nvmlClocksThrottleReasonDisplayClockSetting",
        ),
        0x100,
    ),
    ("board_limit", ("nvmlClocksThrottleReasonBoardLimit",), 0x200),
    ("reliability", ("nvmlClocksThrottleReasonReliability",), 0x400),
]

NOT_SLOWDOWNS = frozenset({"gpu_idle", "applications_clocks_setting"})

# nvml.h values, for fakes of the module that do not define the constants.
_NVML_CLOCK_SM, _NVML_CLOCK_MEM, _NVML_TEMPERATURE_GPU = 1, 2, 0


def decode_throttle_reasons(mask: int, nvml: Any = None) -> list[str]:
    """Names of the bits set in a clocks-event bitmask; unknown bits as ``unknown_0x..``."""
    names = []
    known = 0
    for name, constants, default in THROTTLE_REASONS:
        bit = next((getattr(nvml, c) for c in constants if hasattr(nvml, c)), default)
        known |= bit
        if mask & bit:
            names.append(name)
    rest = mask & ~known
    names += [f"unknown_{1 << i:#x}" for i in range(rest.bit_length()) if rest >> i & 1]
    return names


def _clocks_event_mask(nvml: Any, handle: Any) -> int:
    """The current reasons bitmask; the older ``...ThrottleReasons`` call on old drivers."""
    try:
        return nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    except Exception as new_exc:  # AttributeError on old pynvml, FunctionNotFound on old drivers
        try:
            return nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        except AttributeError:
            raise new_exc from None


def gpu_context(nvml: Any, index: int) -> dict[str, Any]:
    """Clocks, temperature, power draw and throttle reasons of CUDA device ``index`` now.

    ``nvml`` is the pynvml module (None imports it) or a fake; NVML is initialized and
    shut down around the reads (NVML counts the pairs, so an open meter is unaffected).
    """
    out: dict[str, Any] = {
        "index": index,
        "sm_clock_mhz": None,
        "mem_clock_mhz": None,
        "temperature_c": None,
        "power_w": None,
        "throttle_reasons": None,
        "throttle_reasons_mask": None,
        "absent": {},
    }
    keys = [k for k in out if k not in ("index", "absent")]
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception as exc:
        out["absent"] = dict.fromkeys(keys, f"NVML not available: {exc}")
        return out
    try:
        try:
            handle = nvml_handle(nvml, index)
        except Exception as exc:
            out["absent"] = dict.fromkeys(keys, f"no NVML handle for cuda:{index}: {exc}")
            return out
        sm = getattr(nvml, "NVML_CLOCK_SM", _NVML_CLOCK_SM)
        mem = getattr(nvml, "NVML_CLOCK_MEM", _NVML_CLOCK_MEM)
        temp = getattr(nvml, "NVML_TEMPERATURE_GPU", _NVML_TEMPERATURE_GPU)
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
            # milliwatts
            "power_w": (
                "nvmlDeviceGetPowerUsage",
                lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            ),
            "throttle_reasons_mask": (
                "nvmlDeviceGetCurrentClocksEventReasons",
                lambda: _clocks_event_mask(nvml, handle),
            ),
        }
        for key, (call, probe) in probes.items():
            try:
                out[key] = probe()
            except Exception as exc:
                out["absent"][key] = f"{call} failed: {exc}"
        if out["throttle_reasons_mask"] is None:
            out["absent"]["throttle_reasons"] = out["absent"]["throttle_reasons_mask"]
        else:
            out["throttle_reasons"] = decode_throttle_reasons(out["throttle_reasons_mask"], nvml)
    finally:
        nvml.nvmlShutdown()
    return out


def throttled(start: dict[str, Any], end: dict[str, Any]) -> list[str]:
    """Slowdown reasons present at the start or the end of a case (empty when none or
    when throttling could not be read; ``absent`` in the contexts says which)."""
    seen: list[str] = []
    for context in (start, end):
        for reason in context.get("throttle_reasons") or []:
            if reason not in NOT_SLOWDOWNS and reason not in seen:
                seen.append(reason)
    return seen


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
