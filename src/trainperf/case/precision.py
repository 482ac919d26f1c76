"""The numeric precisions a case trains in, and the float32 math each implies: one
definition for the case, the CLI and both frameworks.

Kept in a module without torch so that the CLI can offer the choice without importing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

Precision = Literal["fp32", "tf32", "fp16", "bf16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)

# What the JAX backend trains in (trainperf.jax.step): fp16 would need loss scaling, which
# neither jax nor optax provides (jmp, which did, is archived), so it is not offered.
JAX_PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16")

# Float32 math, the one rule of both frameworks (trainperf.step.training_step.set_fp32_math,
# trainperf.jax.step): float32 matmuls and convolutions run on TF32 tensor cores only in a
# tf32 case, and IEEE float32 in every other (fp32, and what stays float32 around the
# fp16/bf16 compute of a mixed-precision case). Without it the frameworks differ by default:
# PyTorch runs cuDNN convolutions in TF32 and cuBLAS matmuls in IEEE, XLA both in TF32 on
# GPUs of compute capability 8.0 and later.
Fp32Math = Literal["ieee", "tf32"]

# What every worker's environment holds so that the case's precision alone decides that
# math: NVIDIA's PyTorch containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, which "forces TF32
# enablement, overrides set_float32_matmul_precision" (PyTorch, CUDA environment variables).
FP32_MATH_ENV = {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0"}
# NVIDIA's own switch: 0 turns TF32 off inside cuBLAS and cuDNN, not in the kernels that a
# framework generates itself (XLA's and Triton's matmuls), so a TF32 request is then not known
# to have run either way.
NVIDIA_TF32_OVERRIDE = "NVIDIA_TF32_OVERRIDE"


def fp32_math(precision: str) -> Fp32Math:
    """The float32 math of a case trained in ``precision``."""
    return "tf32" if precision == "tf32" else "ieee"


def fp32_math_record(
    matmul: str | None,
    conv: str | None,
    device_type: str,
    environ: Mapping[str, str],
    unknown: str = "the framework does not say",
) -> dict[str, Any]:
    """``fp32_matmul`` and ``fp32_conv`` of a result: the math its float32 matmuls and
    convolutions ran in ("ieee", "tf32", or "bf16" where oneDNN was set to it), as the
    framework was set. None, with ``<key>_absent_reason``, for a mode the caller could not
    read (``unknown`` says why) and for "tf32" on a GPU whose environment holds
    NVIDIA_TF32_OVERRIDE=0 (see above)."""
    record: dict[str, Any] = {}
    override = device_type == "cuda" and environ.get(NVIDIA_TF32_OVERRIDE) == "0"
    for key, mode in (("fp32_matmul", matmul), ("fp32_conv", conv)):
        record[key] = mode
        if mode is None:
            record[f"{key}_absent_reason"] = unknown
        elif mode == "tf32" and override:
            record[key] = None
            record[f"{key}_absent_reason"] = (
                "NVIDIA_TF32_OVERRIDE=0 turns TF32 off in cuBLAS and cuDNN but not in kernels "
                "the framework generates itself: which math ran is not known"
            )
    return record
