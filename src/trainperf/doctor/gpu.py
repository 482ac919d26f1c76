"""The GPU checks of ``trainperf doctor``: each GPU that CUDA may use, read through NVML.

One check per kind of trainperf.doctor.gpu_device.GPU_CHECKS per GPU, named
``gpu<i>.<kind>`` with ``i`` CUDA's ordinal, and two for the machine (``MACHINE_CHECKS``:
``gpu.driver``, ``gpu.visible_devices``). Without NVML (a CPU machine, a container
without the driver) every kind is one ``gpu.<kind>`` line, absent with the reason. An
NVML call that a GPU, driver or binding cannot answer (Not Supported, Insufficient
Permissions, Function Not Found) makes that check absent, never the others. Nothing here
creates a CUDA context or changes a setting; docs/doctor.md lists each check.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from trainperf.core.limits import ascii_digits
from trainperf.doctor.checks import FAIL, OK, WARN, Check, absent
from trainperf.doctor.gpu_device import (
    GPU_CHECKS,
    NVML_DEFAULTS,
    Gpu,
    Kind,
    Reading,
    Unreadable,
    call_nvml,
    text,
)
from trainperf.measure.energy_nvml import NvmlUnavailable, close_nvml, open_nvml
from trainperf.system.gpu import visible_handles

__all__ = ["GPU_CHECKS", "MACHINE_CHECKS", "gpu_checks"]


def _torch_cuda() -> str | None:
    """The CUDA runtime torch was built with (None for a CPU build); imports torch, whose
    import creates no CUDA context."""
    import torch

    return torch.version.cuda


def _driver(nvml: Any, environ: Mapping[str, str]) -> Reading:
    version = int(call_nvml(nvml, "nvmlSystemGetCudaDriverVersion"))  # e.g. 12040
    driver_cuda = (version // 1000, version % 1000 // 10)
    try:
        driver = text(call_nvml(nvml, "nvmlSystemGetDriverVersion"))
    except Unreadable:
        driver = None
    runtime = _torch_cuda()
    shown = f"{driver_cuda[0]}.{driver_cuda[1]}"
    value = {"driver": driver, "driver_cuda": shown, "torch_cuda": runtime}
    seen = f"driver {driver or '?'} supports CUDA {shown}"
    if runtime is None:
        return Reading(
            WARN,
            f"{seen}; torch is a CPU build: trainperf cannot use these GPUs",
            "install a CUDA build of torch (https://pytorch.org/get-started/locally/)",
            value,
        )
    major, minor = (int(part) for part in runtime.split(".")[:2])
    fix = f"install a driver for CUDA {runtime} or newer, or a torch build for CUDA {shown}"
    if driver_cuda[0] < major:
        return Reading(
            FAIL, f"{seen}, older than torch's CUDA {runtime}: CUDA cannot start", fix, value
        )
    if driver_cuda < (major, minor):
        seen += (
            f", older than torch's CUDA {runtime}: it runs under minor-version compatibility,"
            " but kernels that need a newer driver (PTX compiled at load time) fail"
        )
        return Reading(WARN, seen, fix, value)
    return Reading(OK, f"{seen}, torch's runtime is CUDA {runtime}", value=value)


def _nvml_uuids(nvml: Any, count: int, mig: bool) -> list[str]:
    """Every GPU's UUID ("GPU-..."), and its MIG instances' ("MIG-...") when ``mig``."""
    uuids = []
    for index in range(count):
        handle = call_nvml(nvml, "nvmlDeviceGetHandleByIndex", index)
        uuids.append(text(call_nvml(nvml, "nvmlDeviceGetUUID", handle)))
        if not mig:
            continue
        try:
            slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        except Exception:  # no MIG on this GPU
            continue
        for slot in range(slots):
            try:
                instance = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                uuids.append(text(nvml.nvmlDeviceGetUUID(instance)))
            except Exception:  # an empty slot
                continue
    return uuids


def _known(entry: str, count: int, uuids: list[str]) -> bool:
    if ascii_digits(entry):  # CUDA reads indices in digits 0-9
        return int(entry) < count
    # "MIG-GPU-<uuid>/<gi>/<ci>" (drivers before R470) names its GPU by UUID
    name = entry.split("/")[0].removeprefix("MIG-") if entry.startswith("MIG-GPU-") else entry
    # CUDA takes a unique prefix of a UUID
    return bool(name) and sum(uuid.startswith(name) for uuid in uuids) == 1


def _visible_devices(nvml: Any, environ: Mapping[str, str]) -> Reading:
    count = int(call_nvml(nvml, "nvmlDeviceGetCount"))
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    value = {"cuda_visible_devices": visible, "nvml_gpus": count}
    if visible is None:
        return Reading(
            OK, f"CUDA_VISIBLE_DEVICES unset: CUDA may use all {count} GPUs", value=value
        )
    entries = [entry.strip() for entry in visible.split(",")]
    if not any(entries):
        return Reading(
            WARN,
            f"CUDA_VISIBLE_DEVICES is empty: CUDA sees none of the {count} GPUs",
            "unset CUDA_VISIBLE_DEVICES",
            value,
        )
    needs_uuids = any(not ascii_digits(entry) for entry in entries)
    try:
        uuids = _nvml_uuids(nvml, count, any(e.startswith("MIG-") for e in entries))
    except Unreadable as exc:
        if needs_uuids:
            return Reading(
                OK, f"CUDA_VISIBLE_DEVICES={visible}; UUIDs not checked: {exc}", value=value
            )
        uuids = []
    unknown = [entry for entry in entries if not _known(entry, count, uuids)]
    if not unknown:
        return Reading(
            OK, f"CUDA_VISIBLE_DEVICES={visible}: every id is a GPU NVML sees", value=value
        )
    return Reading(
        FAIL,
        f"CUDA_VISIBLE_DEVICES={visible}: NVML has no GPU {', '.join(map(repr, unknown))} (of"
        f" {count}); CUDA ignores that id and every one after it",
        "nvidia-smi -L (lists each GPU's index and UUID), then export CUDA_VISIBLE_DEVICES"
        " with those",
        value,
    )


MACHINE_CHECKS: dict[str, Kind] = {
    "driver": Kind(
        _driver,
        "a driver older than torch's CUDA runtime cannot run its kernels, or only some",
        condition=True,
    ),
    "visible_devices": Kind(
        _visible_devices,
        "CUDA_VISIBLE_DEVICES picks the GPUs a case runs on; an id NVML does not know hides"
        " the GPUs listed after it",
    ),
}


# ------------------------------------------------------------------------ all together


def gpu_checks(*, nvml: Any = None, environ: Mapping[str, str] = os.environ) -> list[Check]:
    """The GPU checks (module doc). ``nvml``: pynvml by default, or a fake of it."""
    try:
        nvml = open_nvml(nvml)
    except NvmlUnavailable as exc:  # a CPU-only machine: every line absent, with why
        return _absent_kinds({**MACHINE_CHECKS, **GPU_CHECKS}, f"no NVML: {exc.__cause__ or exc}")
    try:
        checks = [_checked(f"gpu.{k}", kind, nvml, environ) for k, kind in MACHINE_CHECKS.items()]
        try:
            gpus = _gpus(nvml, environ)
        except Exception as exc:
            return checks + _absent_kinds(GPU_CHECKS, f"CUDA's GPUs not found in NVML: {exc}")
        if not gpus:
            return checks + _absent_kinds(GPU_CHECKS, "NVML sees no GPU that CUDA may use")
        for gpu in gpus:
            checks += [_checked(f"gpu{gpu.index}.{k}", c, gpu) for k, c in GPU_CHECKS.items()]
        return checks
    finally:
        close_nvml(nvml)


def _checked(name: str, kind: Kind, *args: Any) -> Check:
    try:
        reading = kind.read(*args)
    except Unreadable as exc:
        cause = exc.__cause__
        if getattr(cause, "value", None) == NVML_DEFAULTS["NVML_ERROR_GPU_IS_LOST"]:
            seen = f"the GPU is lost (fell off the bus or stopped answering): {exc}"
            return Check(name, FAIL, seen, kind.why, "reboot; the kernel log (dmesg) says why")
        return absent(name, str(exc), kind.why, condition=kind.condition)
    return Check(
        name, reading.status, reading.seen, kind.why, reading.fix, reading.value, kind.condition
    )


def _absent_kinds(kinds: Mapping[str, Kind], reason: str) -> list[Check]:
    return [
        absent(f"gpu.{k}", reason, kind.why, condition=kind.condition) for k, kind in kinds.items()
    ]


def _gpus(nvml: Any, environ: Mapping[str, str]) -> list[Gpu]:
    """The GPUs CUDA may use, in CUDA's order: by CUDA's UUIDs when this process already
    initialised CUDA, else from CUDA_VISIBLE_DEVICES (the doctor initialises nothing)."""
    torch = sys.modules.get("torch")
    ask_cuda = torch is not None and torch.cuda.is_initialized()
    gpus = []
    for index, handle in enumerate(visible_handles(nvml, environ, ask_cuda=ask_cuda)):
        device, mig_slice = handle, False
        try:
            if nvml.nvmlDeviceIsMigDeviceHandle(handle):
                device = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
                mig_slice = True
        except Exception:  # a driver or binding without MIG: a whole GPU
            pass
        gpus.append(Gpu(nvml, index, handle, device, mig_slice, _target(nvml, device)))
    return gpus


def _target(nvml: Any, device: Any) -> str:
    """nvidia-smi's ``-i`` for a GPU: NVML's index (not CUDA's), else its UUID."""
    try:
        return f" -i {int(nvml.nvmlDeviceGetIndex(device))}"
    except Exception:
        try:
            return f" -i {text(nvml.nvmlDeviceGetUUID(device))}"
        except Exception:
            return ""
