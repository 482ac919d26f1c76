"""The training peak FLOP/s of a measured device, for model FLOP utilization (MFU).

MFU = achieved model FLOP/s / (peak FLOP/s of the device at the case's precision x
devices), where the achieved rate counts the model's training FLOPs
(torch.utils.flop_counter) per sample times samples per second.

The peak is the hardware catalog's (``trainperf.predict.catalog``), the one table the
predictor also computes with, so a device has one peak per precision everywhere: the dense
rate a training step's arithmetic runs at (16-bit tensor-core math with FP32 accumulation,
not a GeForce data sheet's FP16-accumulate headline; see the comment at the top of
catalog.yaml). A device is found by the exact name CUDA reports, listed in its catalog
entry's ``cuda_names``; an unknown device gets no peak (MFU absent, with the reason), never
a neighbour's.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf.predict.catalog import Catalog
from trainperf.predict.catalog_file import load_catalog


@dataclass(frozen=True)
class PeakLookup:
    """A peak in FLOP/s with its source, or None with the reason it is absent."""

    flops_per_s: float | None
    source: str | None = None
    absent_reason: str | None = None


def peak_flops(device_name: str, precision: str, catalog: Catalog | None = None) -> PeakLookup:
    """The training peak of the device CUDA calls ``device_name`` at ``precision``, from
    ``catalog`` (the shipped one by default), or why there is none."""
    catalog = catalog or load_catalog()
    device = catalog.device_named(device_name)
    if device is None:
        return PeakLookup(
            None,
            absent_reason=f"no training peak known for device '{device_name}' "
            "(no device of the hardware catalog has this CUDA name)",
        )
    flops = device.peak_flops(precision)
    if flops is None:
        return PeakLookup(
            None, absent_reason=f"{device.name} has no {precision} peak in the hardware catalog"
        )
    source = device.sources[f"peak_tflops.{precision}"]
    return PeakLookup(flops, f"{device.name} (catalog {device.id}): {source}")
