"""A GPU's power draw from NVML, with what the number means.

``nvmlDeviceGetPowerUsage`` (milliwatts) is not the same reading on every GPU. NVML's
reference (nvml.h, nvmlDeviceGetPowerUsage): "On Ampere (except GA100) or newer GPUs, the
API returns power averaged over 1 sec interval. On GA100 and older architectures,
instantaneous power is returned." A mean of such one-second averages sampled through a
measured window is smeared across its edges: the idle second before the window and the
load of the second after the steps end both leak into it. The field value
``NVML_FI_DEV_POWER_INSTANT`` (186, read with ``nvmlDeviceGetFieldValues``; nvml.h:
"Current GPU power, supported on all architectures") is the instantaneous power on the
drivers recent enough to have it, so it is read first; where it errors the reading
falls back to ``nvmlDeviceGetPowerUsage`` and says which it is (``POWER_*`` labels), told
from the compute capability (GA100 is 8.0, the other Ampere chips 8.6 and up).

Energy does not come from here: it comes from the total-energy counter
(trainperf.measure.energy_nvml), which integrates in the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

POWER_INSTANT = "instant (NVML_FI_DEV_POWER_INSTANT)"
POWER_USAGE_AVERAGED = "1 s average (nvmlDeviceGetPowerUsage)"
POWER_USAGE_INSTANT = "instant (nvmlDeviceGetPowerUsage, a GPU before Ampere or GA100)"
POWER_USAGE_UNKNOWN = (
    "nvmlDeviceGetPowerUsage: a 1 s average on Ampere and later (GA100 excepted), "
    "instantaneous before; compute capability unknown"
)

# nvml.h values, for fakes of the module that do not define the constants.
_NVML_FI_DEV_POWER_INSTANT, _NVML_SUCCESS = 186, 0
# nvmlValueType_t -> the member of the nvmlValue_t union that holds the value.
_VALUE_MEMBERS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


@dataclass(frozen=True)
class PowerProbe:
    """How one GPU's power is read: ``read_w()`` (watts; raises when NVML fails) and what
    the reading is (``source``); ``instant_absent_reason`` says why the instantaneous
    field was not used (None when it was)."""

    read_w: Callable[[], float]
    source: str
    instant_absent_reason: str | None = None


def instant_power_w(nvml: Any, handle: Any) -> float:
    """``NVML_FI_DEV_POWER_INSTANT`` in watts; raises when the driver does not give it.

    ``nvmlDeviceGetFieldValues`` succeeds as a call and reports each field's own status in
    its ``nvmlReturn``; the value's type (``valueType``) varies with the driver.
    """
    field_id = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", _NVML_FI_DEV_POWER_INSTANT)
    (value,) = nvml.nvmlDeviceGetFieldValues(handle, [field_id])
    status = value.nvmlReturn
    if status != getattr(nvml, "NVML_SUCCESS", _NVML_SUCCESS):
        error = getattr(nvml, "NVMLError", None)
        raise error(status) if error is not None else RuntimeError(f"NVML error {status}")
    member = _VALUE_MEMBERS.get(value.valueType)
    if member is None:
        raise ValueError(f"unexpected NVML value type {value.valueType}")
    return getattr(value.value, member) / 1000.0  # milliwatts


def power_probe(nvml: Any, handle: Any) -> PowerProbe:
    """The best power reading this GPU gives: the instantaneous field if one read of it
    works, else ``nvmlDeviceGetPowerUsage`` labelled with what it means on this GPU."""
    try:
        instant_power_w(nvml, handle)
    except Exception as exc:  # an old driver: FunctionNotFound, NotSupported, AttributeError
        reason = f"NVML_FI_DEV_POWER_INSTANT failed: {exc}"
    else:
        return PowerProbe(lambda: instant_power_w(nvml, handle), POWER_INSTANT)
    return PowerProbe(
        lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,  # milliwatts
        power_usage_meaning(nvml, handle),
        reason,
    )


def power_usage_meaning(nvml: Any, handle: Any) -> str:
    """What ``nvmlDeviceGetPowerUsage`` returns on this GPU (module doc)."""
    try:
        capability = tuple(nvml.nvmlDeviceGetCudaComputeCapability(handle))
    except Exception:
        return POWER_USAGE_UNKNOWN
    return POWER_USAGE_AVERAGED if capability > (8, 0) else POWER_USAGE_INSTANT
