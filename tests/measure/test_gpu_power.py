"""A GPU's power reading and what it means (trainperf.measure.gpu_power), against a fake
of pynvml that returns pynvml's own field-value structures."""

import pynvml
import pytest

from trainperf.measure.gpu_power import (
    POWER_INSTANT,
    POWER_USAGE_AVERAGED,
    POWER_USAGE_INSTANT,
    POWER_USAGE_UNKNOWN,
    instant_power_w,
    power_probe,
)


def field_values(mw, status=pynvml.NVML_SUCCESS, value_type=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT):
    """What ``nvmlDeviceGetFieldValues(handle, [NVML_FI_DEV_POWER_INSTANT])`` returns."""
    values = (pynvml.c_nvmlFieldValue_t * 1)()
    values[0].fieldId = pynvml.NVML_FI_DEV_POWER_INSTANT
    values[0].nvmlReturn = status
    values[0].valueType = value_type
    member = {
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    }[value_type]
    setattr(values[0].value, member, mw)
    return values


class FakeNvml:
    """The pynvml calls of a power reading: ``instant_mw`` None means the driver answers
    the field with NotSupported; ``capability`` None means it cannot tell it."""

    NVML_FI_DEV_POWER_INSTANT = pynvml.NVML_FI_DEV_POWER_INSTANT
    NVML_SUCCESS = pynvml.NVML_SUCCESS
    NVMLError = pynvml.NVMLError

    def __init__(self, instant_mw=None, usage_mw=400_000, capability=(9, 0)):
        self.instant_mw, self.usage_mw, self.capability = instant_mw, usage_mw, capability

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        assert list(field_ids) == [pynvml.NVML_FI_DEV_POWER_INSTANT]
        if self.instant_mw is None:
            return field_values(0, status=pynvml.NVML_ERROR_NOT_SUPPORTED)
        return field_values(self.instant_mw)

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.usage_mw

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        if self.capability is None:
            raise pynvml.NVMLError_NotSupported()
        return self.capability


def test_the_instantaneous_field_is_used_where_the_driver_has_it():
    nvml = FakeNvml(instant_mw=650_500)
    probe = power_probe(nvml, "h")
    assert probe.source == POWER_INSTANT and probe.instant_absent_reason is None
    assert probe.read_w() == pytest.approx(650.5)  # the field, not the 400 W average
    nvml.instant_mw = 700_000
    assert probe.read_w() == pytest.approx(700.0)


def test_the_value_is_read_from_the_member_its_type_names():
    nvml = FakeNvml()
    nvml.nvmlDeviceGetFieldValues = lambda handle, ids: field_values(
        5_000_000_000, value_type=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    )
    assert instant_power_w(nvml, "h") == pytest.approx(5_000_000.0)


def test_a_field_error_falls_back_to_the_power_usage_labelled_as_averaged():
    probe = power_probe(FakeNvml(instant_mw=None, capability=(9, 0)), "h")  # an H100
    assert probe.source == POWER_USAGE_AVERAGED == "1 s average (nvmlDeviceGetPowerUsage)"
    assert probe.read_w() == pytest.approx(400.0)
    assert "Not Supported" in probe.instant_absent_reason
    with pytest.raises(pynvml.NVMLError_NotSupported):
        instant_power_w(FakeNvml(instant_mw=None), "h")


def test_the_power_usage_label_follows_the_architecture():
    # NVML: a 1 s average on Ampere and later except GA100 (8.0), instantaneous before.
    for capability, label in (
        ((8, 6), POWER_USAGE_AVERAGED),
        ((10, 0), POWER_USAGE_AVERAGED),
        ((8, 0), POWER_USAGE_INSTANT),
        ((7, 0), POWER_USAGE_INSTANT),
        (None, POWER_USAGE_UNKNOWN),
    ):
        assert power_probe(FakeNvml(capability=capability), "h").source == label


def test_an_old_pynvml_without_field_values_falls_back():
    class Old:
        def nvmlDeviceGetPowerUsage(self, handle):
            return 250_000

    probe = power_probe(Old(), "h")
    assert probe.source == POWER_USAGE_UNKNOWN and probe.read_w() == pytest.approx(250.0)
    assert "NVML_FI_DEV_POWER_INSTANT failed" in probe.instant_absent_reason
