"""The per-GPU checks of ``trainperf doctor`` (``GPU_CHECKS``), and what every GPU check
shares: the call that turns an NVML error into ``Unreadable`` (the check is then absent
with the reason), the ``Reading`` a check returns and the ``Kind`` that registers it.

trainperf.doctor.gpu runs them for each GPU CUDA may use; docs/doctor.md lists each
check, its NVML call and NVIDIA's guidance. Nothing here changes a setting.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainperf.doctor.checks import FAIL, OK, WARN
from trainperf.measure.clock_events import IDLE, POWER_CAP, SLOWDOWNS, decode_throttle_reasons
from trainperf.measure.gpu_context import clocks_event_mask
from trainperf.system.gpu import nvlink_states

# nvml.h values, for fakes of the module that do not define the constants.
NVML_DEFAULTS = {
    "NVML_CLOCK_SM": 1,
    "NVML_CLOCK_MEM": 2,
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN": 1,
    "NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS": 0,
    "NVML_ERROR_GPU_IS_LOST": 15,
}
# A GPU at rest within this many degrees of its slowdown threshold reaches it within
# minutes of training (a training load heats a GPU by tens of degrees over its idle
# temperature); without a threshold, this temperature at rest counts as hot.
HOT_MARGIN_C = 20
HOT_AT_REST_C = 70


class Unreadable(Exception):
    """An NVML call this GPU, driver or binding cannot answer; ``str()`` says why."""


def nvml_const(nvml: Any, name: str) -> int:
    """A constant of the module, or its nvml.h value for a fake that lacks it."""
    return getattr(nvml, name, NVML_DEFAULTS[name])


def call_nvml(nvml: Any, name: str, *args: Any) -> Any:
    """``nvml.<name>(*args)``; raises ``Unreadable`` (with why) when it cannot answer."""
    function = getattr(nvml, name, None)
    if function is None:
        raise Unreadable(f"{name}: not in this NVML binding")
    try:
        return function(*args)
    except Exception as exc:  # NVMLError_NotSupported, NoPermission, FunctionNotFound...
        raise Unreadable(f"{name}: {exc or type(exc).__name__}") from exc


def text(value: Any) -> str:
    """NVML strings are bytes in old bindings."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _on(flag: bool) -> str:
    return "on" if flag else "off"


@dataclass(frozen=True)
class Gpu:
    """One GPU as CUDA numbers it: ``handle`` is what CUDA uses (the GPU, or its MIG
    instance), ``device`` the whole GPU, ``target`` nvidia-smi's ``-i`` for it."""

    nvml: Any
    index: int
    handle: Any
    device: Any
    mig_slice: bool
    target: str

    def call(self, name: str, *args: Any) -> Any:
        return call_nvml(self.nvml, name, self.device, *args)


@dataclass(frozen=True)
class Reading:
    """What a check saw: its status, in words, the fix and the JSON-able value."""

    status: str
    seen: str
    fix: str | None = None
    value: Any = None


@dataclass(frozen=True)
class Kind:
    """A kind of check: how to read it, why it matters, whether its value is a condition."""

    read: Callable[..., Reading]
    why: str
    condition: bool = False


# ------------------------------------------------------------------------ per GPU


def _persistence(gpu: Gpu) -> Reading:
    on = bool(gpu.call("nvmlDeviceGetPersistenceMode"))
    if on:
        return Reading(OK, "persistence mode on", value=True)
    return Reading(
        WARN,
        "persistence mode off: the driver unloads the GPU's state whenever no process holds it",
        f"sudo nvidia-smi{gpu.target} -pm 1",
        False,
    )


def _reasons(gpu: Gpu) -> list[str]:
    try:
        mask = clocks_event_mask(gpu.nvml, gpu.device)
    except Exception as exc:
        raise Unreadable(f"nvmlDeviceGetCurrentClocksEventReasons: {exc}") from exc
    return decode_throttle_reasons(int(mask), gpu.nvml)


def _clocks(gpu: Gpu) -> Reading:
    ids = {
        "sm": nvml_const(gpu.nvml, "NVML_CLOCK_SM"),
        "mem": nvml_const(gpu.nvml, "NVML_CLOCK_MEM"),
    }
    seen, unread = [], []
    applications = defaults = user = root_only = None
    try:
        applications = {k: gpu.call("nvmlDeviceGetApplicationsClock", c) for k, c in ids.items()}
        defaults = {k: gpu.call("nvmlDeviceGetDefaultApplicationsClock", c) for k, c in ids.items()}
    except Unreadable as exc:
        applications = defaults = None
        unread.append(str(exc))
    try:
        user = "applications_clocks_setting" in _reasons(gpu)
    except Unreadable as exc:
        unread.append(str(exc))
    if applications is None and user is None:
        raise Unreadable("; ".join(unread))
    api = nvml_const(gpu.nvml, "NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS")
    try:
        root_only = bool(gpu.call("nvmlDeviceGetAPIRestriction", api))
    except Unreadable as exc:
        unread.append(str(exc))
    changed = applications is not None and applications != defaults
    if applications is not None and defaults is not None:
        text = f"applications clocks SM {applications['sm']} / memory {applications['mem']} MHz"
        seen.append(
            f"{text}, default {defaults['sm']} / {defaults['mem']} MHz"
            if changed
            else f"{text} (the default)"
        )
    if user:
        seen.append(
            "a user-defined clock limit is active (applications clocks, or clocks locked with"
            " nvidia-smi -lgc/-lmc, whose range NVML cannot read)"
        )
    elif user is not None:
        seen.append("no user-defined clock limit active")
    if root_only is not None:
        seen.append("only root may set them" if root_only else "any user may set them")
    if unread:
        seen.append(f"not read: {'; '.join(unread)}")
    fix = None
    if changed:
        fix = f"sudo nvidia-smi{gpu.target} -rac"
    elif user:
        fix = f"sudo nvidia-smi{gpu.target} -rgc && sudo nvidia-smi{gpu.target} -rmc"
    value = {
        "applications_mhz": applications,
        "default_applications_mhz": defaults,
        "user_defined_clocks": user,
        "root_only": root_only,
    }
    return Reading(WARN if changed or user else OK, "; ".join(seen), fix, value)


def _pcie_link(gpu: Gpu) -> Reading:
    width = gpu.call("nvmlDeviceGetCurrPcieLinkWidth")
    max_width = gpu.call("nvmlDeviceGetMaxPcieLinkWidth")
    generation = gpu.call("nvmlDeviceGetCurrPcieLinkGeneration")
    max_generation = gpu.call("nvmlDeviceGetMaxPcieLinkGeneration")
    try:
        gpu_max = gpu.call("nvmlDeviceGetGpuMaxPcieLinkGeneration")
    except Unreadable:
        gpu_max = None  # older drivers: the link's maximum is all NVML tells
    value = {
        "max_generation": max_generation,
        "gpu_max_generation": gpu_max,
        "max_width": max_width,
        "width": width,
    }
    seen = [f"PCIe Gen{generation} x{width} now, link up to Gen{max_generation} x{max_width}"]
    if generation < max_generation:
        seen.append("a lower generation at rest is normal: the link slows down when idle")
    fixes = []
    if width < max_width:
        seen.append(f"the link trained at x{width} of x{max_width}")
        fixes.append(f"reseat the card or use an x{max_width} slot")
    if gpu_max is not None and gpu_max > max_generation:
        seen.append(
            f"the GPU does Gen{gpu_max}, the slot or the BIOS holds it to Gen{max_generation}"
        )
        fixes.append(f"set the slot's PCIe speed to Auto or Gen{gpu_max} in the BIOS")
    if not fixes:
        return Reading(OK, "; ".join(seen), value=value)
    fix = "; ".join(fixes) + f" (nvidia-smi{gpu.target} -q -d PCIE shows the link)"
    return Reading(WARN, "; ".join(seen), fix, value)


def _ecc(gpu: Gpu) -> Reading:
    current, pending = (bool(mode) for mode in gpu.call("nvmlDeviceGetEccMode"))
    value = {"enabled": current, "pending": pending}
    if current == pending:
        return Reading(OK, f"ECC {_on(current)}", value=value)
    return Reading(
        WARN,
        f"ECC {_on(current)} now, {_on(pending)} after the next GPU reset or reboot",
        f"sudo nvidia-smi{gpu.target} -r (apply it now) or sudo nvidia-smi{gpu.target}"
        f" -e {int(current)} (cancel it)",
        value,
    )


def _retired_memory(gpu: Gpu) -> Reading:
    rows = pages = None
    unread = []
    try:
        correctable, uncorrectable, pending, failure = gpu.call("nvmlDeviceGetRemappedRows")
        rows = {
            "correctable": correctable,
            "uncorrectable": uncorrectable,
            "pending": bool(pending),
            "failure": bool(failure),
        }
    except Unreadable as exc:
        unread.append(str(exc))
    try:
        pages = bool(gpu.call("nvmlDeviceGetRetiredPagesPendingStatus"))
    except Unreadable as exc:  # Ampere and later remap rows instead of retiring pages
        unread.append(str(exc))
    if rows is None and pages is None:
        raise Unreadable("; ".join(unread))
    value = {"remapped_rows": rows, "retired_pages_pending": pages}
    seen = []
    if rows is not None:
        seen.append(
            f"rows remapped: {rows['correctable']} correctable, {rows['uncorrectable']}"
            f" uncorrectable, {'a remap pending' if rows['pending'] else 'none pending'}"
        )
        if rows["failure"]:
            seen.append("a row remap failed")
    if pages is not None:
        seen.append("a page retirement pending" if pages else "no page retirement pending")
    if unread:
        seen.append(f"not read: {'; '.join(unread)}")
    if rows is not None and rows["failure"]:
        fix = f"nvidia-smi{gpu.target} -q -d ROW_REMAPPER; the GPU needs service by its vendor"
        return Reading(FAIL, "; ".join(seen), fix, value)
    if pages or (rows is not None and rows["pending"]):
        return Reading(FAIL, "; ".join(seen), f"sudo nvidia-smi{gpu.target} -r (or reboot)", value)
    return Reading(OK, "; ".join(seen), value=value)


def _processes(gpu: Gpu) -> Reading:
    found: dict[int, Any] = {}
    unread = []
    for call in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            processes = call_nvml(gpu.nvml, call, gpu.handle)  # a MIG instance: its own
        except Unreadable as exc:
            unread.append(str(exc))
            continue
        for process in processes:
            if process.pid != os.getpid():
                found.setdefault(int(process.pid), process)
    if len(unread) == 2:
        raise Unreadable("; ".join(unread))
    others = []
    for pid, process in sorted(found.items()):
        try:
            name = text(gpu.nvml.nvmlSystemGetProcessName(pid))
        except Exception:  # another user's process, or one in another PID namespace
            name = None
        memory = getattr(process, "usedGpuMemory", None)
        others.append({"pid": pid, "name": name, "used_memory_bytes": memory})
    note = f"; not read: {'; '.join(unread)}" if unread else ""
    if not others:
        return Reading(OK, f"no other process holds this GPU{note}", value=[])
    shown = [_process(p) for p in others[:5]]
    more = f", +{len(others) - 5} more" if len(others) > 5 else ""
    pids = " ".join(str(p["pid"]) for p in others)
    return Reading(
        FAIL,
        f"{len(others)} other process(es) on this GPU: {', '.join(shown)}{more}{note}",
        f"nvidia-smi{gpu.target} --query-compute-apps=pid,process_name,used_memory"
        f" --format=csv, then stop them: kill {pids}",
        others,
    )


def _process(process: dict[str, Any]) -> str:
    memory = process["used_memory_bytes"]
    held = "" if memory is None else f", {memory / 2**30:.1f} GiB"
    return f"pid {process['pid']} ({process['name'] or '?'}{held})"


def _clock_events(gpu: Gpu) -> Reading:
    reasons = _reasons(gpu)
    held = [r for r in reasons if r in SLOWDOWNS or r == POWER_CAP]
    seen = f"clocks-event reasons at rest: {', '.join(reasons) or 'none'}"
    if not held:
        idle = " (idle: clocks down because nothing runs)" if IDLE in reasons else ""
        return Reading(OK, seen + idle, value=reasons)
    return Reading(
        WARN,
        f"{seen}: {', '.join(held)} hold the clocks down with nothing running",
        f"check cooling and the power supply (nvidia-smi{gpu.target} -q -d PERFORMANCE)",
        reasons,
    )


def _temperature(gpu: Gpu) -> Reading:
    celsius = gpu.call("nvmlDeviceGetTemperature", nvml_const(gpu.nvml, "NVML_TEMPERATURE_GPU"))
    threshold = nvml_const(gpu.nvml, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN")
    try:
        slowdown = gpu.call("nvmlDeviceGetTemperatureThreshold", threshold) or None
    except Unreadable:
        slowdown = None
    value = {"temperature_c": celsius, "slowdown_c": slowdown}
    if slowdown is not None:
        hot = celsius >= slowdown - HOT_MARGIN_C
        seen = f"{celsius} °C at rest, slowdown at {slowdown} °C"
    else:
        hot = celsius >= HOT_AT_REST_C
        seen = f"{celsius} °C at rest (no slowdown threshold readable; {HOT_AT_REST_C} °C is hot)"
    if not hot:
        return Reading(OK, seen, value=value)
    fix = f"check fans and airflow, let it cool (nvidia-smi{gpu.target} -q -d TEMPERATURE)"
    return Reading(WARN, f"{seen}: hot before any work", fix, value)


def _power_limit(gpu: Gpu) -> Reading:
    enforced = gpu.call("nvmlDeviceGetEnforcedPowerLimit") / 1000
    default = gpu.call("nvmlDeviceGetPowerManagementDefaultLimit") / 1000
    value = {"enforced_w": enforced, "default_w": default}
    if enforced < default:
        return Reading(
            WARN,
            f"power limit {enforced:g} W, below the default {default:g} W",
            f"sudo nvidia-smi{gpu.target} -pl {default:g}",
            value,
        )
    side = "above" if enforced > default else "at"
    return Reading(OK, f"power limit {enforced:g} W, {side} the default {default:g} W", value=value)


def _nvlink(gpu: Gpu) -> Reading:
    states, why_not = nvlink_states(gpu.nvml, gpu.device)
    if not states:
        raise Unreadable(f"nvmlDeviceGetNvLinkState: {why_not}")
    up = sum(states.values())
    down = [link for link, active in states.items() if not active]
    value = {"links": len(states), "up": up}
    if not up:
        seen = (
            f"no NVLink active ({len(states)} links inactive): a PCIe card without a bridge,"
            " or every link down (nvidia-smi nvlink -s tells)"
        )
        return Reading(OK, seen, value=value)
    if not down:
        return Reading(OK, f"all {up} NVLinks up", value=value)
    return Reading(
        WARN,
        f"{len(down)} of {len(states)} NVLinks down (links {', '.join(map(str, down))})",
        f"nvidia-smi nvlink{gpu.target} -s; reset the GPU (sudo nvidia-smi{gpu.target} -r)"
        " or have the board serviced",
        value,
    )


def _mig(gpu: Gpu) -> Reading:
    current, pending = (bool(mode) for mode in gpu.call("nvmlDeviceGetMigMode"))
    value = {"enabled": current, "pending": pending, "instance": gpu.mig_slice}
    fix = f"sudo nvidia-smi{gpu.target} -mig 0 (then reset the GPU)"
    if gpu.mig_slice:
        seen = f"cuda:{gpu.index} is a MIG instance: a slice of the GPU, not the whole GPU"
        return Reading(WARN, seen, fix, value)
    if current:
        return Reading(WARN, "MIG on: CUDA gets slices, not the whole GPU", fix, value)
    if pending:
        return Reading(WARN, "MIG off now, on after the next GPU reset", fix, value)
    return Reading(OK, "MIG off", value=value)


GPU_CHECKS: dict[str, Kind] = {
    "persistence": Kind(
        _persistence,
        "without persistence mode each process that opens the GPU waits for the driver to"
        " initialise it, and settings made while it was unloaded are lost",
        condition=True,
    ),
    "clocks": Kind(
        _clocks,
        "applications or locked clocks set the GPU's speed: a throughput measured under"
        " them is the setting's, not the GPU's as shipped",
        condition=True,
    ),
    "pcie_link": Kind(
        _pcie_link,
        "host-to-GPU copies, data loading and PCIe collectives run at the link's width and"
        " generation",
        condition=True,
    ),
    "ecc": Kind(
        _ecc,
        "ECC changes usable memory and memory bandwidth; a pending change makes numbers"
        " before and after a reset differ",
        condition=True,
    ),
    "retired_memory": Kind(
        _retired_memory,
        "a pending page retirement or row remap leaves faulty memory in use until the GPU is reset",
    ),
    "processes": Kind(
        _processes,
        "another process shares the GPU's SMs, memory and bandwidth: the throughput is not"
        " the machine's, and memory may run out",
    ),
    "clock_events": Kind(
        _clock_events,
        "a GPU slowed by heat or power with nothing running will be slower still under load",
    ),
    "temperature": Kind(
        _temperature,
        "a GPU hot at rest reaches its slowdown threshold soon after training starts",
    ),
    "power_limit": Kind(
        _power_limit,
        "a GPU under a training load runs at its power limit: a lower cap lowers its clocks",
        condition=True,
    ),
    "nvlink": Kind(
        _nvlink,
        "collectives between GPUs run over NVLink: a link down moves them onto fewer links"
        " or onto PCIe",
        condition=True,
    ),
    "mig": Kind(
        _mig,
        "a MIG instance has a fraction of the GPU's SMs and memory: its throughput is the slice's",
        condition=True,
    ),
}
