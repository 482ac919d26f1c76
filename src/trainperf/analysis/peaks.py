"""Data-sheet peak FLOP/s of devices, for model FLOP utilization (MFU).

MFU = achieved model FLOP/s / peak FLOP/s of the device at the case's precision, where the
achieved rate counts the model's training FLOPs (torch.utils.flop_counter) per sample times
samples per second. Peaks are dense (no sparsity), from the vendors' data sheets as
collected in shared/reference/hardware.md. A device is matched by its exact CUDA name
pattern; an unknown device gets no peak (MFU absent, with the reason), never a neighbour's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TERA = 1e12


@dataclass(frozen=True)
class DevicePeak:
    label: str
    name_pattern: str  # regex matched against the full CUDA device name
    tflops: dict[str, float]  # precision -> dense TFLOP/s
    source: str


_DATASHEET = "vendor data sheet, dense (shared/reference/hardware.md)"

# fp32: the CUDA-core FP32 rate; tf32: tensor-core TF32; fp16/bf16: tensor-core rates
# (P100 has no tensor cores: its FP16 rate is the packed-half rate).
PEAKS: tuple[DevicePeak, ...] = (
    DevicePeak(
        "H200 SXM",
        r"^NVIDIA H200$",
        {"fp32": 67, "tf32": 495, "fp16": 989, "bf16": 989},
        _DATASHEET,
    ),
    DevicePeak(
        "H100 SXM5",
        r"^NVIDIA H100 80GB HBM3$",
        {"fp32": 67, "tf32": 495, "fp16": 989, "bf16": 989},
        _DATASHEET,
    ),
    DevicePeak(
        "A100 SXM4",
        r"^NVIDIA A100-SXM4-(40|80)GB$",
        {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312},
        _DATASHEET,
    ),
    DevicePeak(
        "V100 SXM2", r"^Tesla V100-SXM2-(16|32)GB$", {"fp32": 15.7, "fp16": 125}, _DATASHEET
    ),
    DevicePeak("V100 PCIe", r"^Tesla V100-PCIE-(16|32)GB$", {"fp32": 14, "fp16": 112}, _DATASHEET),
    DevicePeak("P100 SXM2", r"^Tesla P100-SXM2-16GB$", {"fp32": 10.6, "fp16": 21.2}, _DATASHEET),
    DevicePeak(
        "P100 PCIe 16 GB", r"^Tesla P100-PCIE-16GB$", {"fp32": 9.3, "fp16": 18.7}, _DATASHEET
    ),
    DevicePeak("P40", r"^Tesla P40$", {"fp32": 12}, _DATASHEET),
    DevicePeak(
        "RTX 2080 Ti", r"^(NVIDIA )?GeForce RTX 2080 Ti$", {"fp32": 13.4, "fp16": 107}, _DATASHEET
    ),
)


@dataclass(frozen=True)
class PeakLookup:
    """A peak in FLOP/s with its source, or None with the reason it is absent."""

    flops_per_s: float | None
    source: str | None = None
    absent_reason: str | None = None


def peak_flops(device_name: str, precision: str) -> PeakLookup:
    """The data-sheet peak of ``device_name`` at ``precision``, or why there is none."""
    for peak in PEAKS:
        if re.match(peak.name_pattern, device_name):
            if precision in peak.tflops:
                return PeakLookup(peak.tflops[precision] * TERA, f"{peak.label}: {peak.source}")
            return PeakLookup(
                None, absent_reason=f"{peak.label} has no {precision} peak in the table"
            )
    return PeakLookup(None, absent_reason=f"no data-sheet peak known for device '{device_name}'")
