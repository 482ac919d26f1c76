"""Compute time of one device per batch (``trainperf.predict.model``, module doc 1): a measured
throughput, a measured batch curve, or the per-op roofline at the catalog's rates."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

from trainperf.core.limits import (
    ACHIEVED_FRACTION_MIN,
    THROUGHPUT_MAX,
    THROUGHPUT_MIN,
)
from trainperf.models.spec import ModelSpec
from trainperf.predict.attention_kernels import (
    DEFAULT_ATTENTION_KERNEL,
    REFERENCE_TOKENS,
    attention_kernel_named,
)
from trainperf.predict.inputs import (
    FORWARD_SHARE,
    NOTHING_MEASURED,
    Measured,
    PredictError,
    Prepared,
    available_precisions,
)
from trainperf.predict.memory import ACTIVATION_BYTES
from trainperf.predict.roofline import (
    OpProfile,
    RooflineTime,
    op_profile,
    roofline_seconds_per_sample,
)
from trainperf.predict.terms import BatchCurve

# Fraction of the data-sheet DRAM bandwidth that streaming kernels (element-wise ops,
# normalization, pooling) reach. Assumption: STREAM-like copy and triad kernels on NVIDIA
# data-centre GPUs reach about 0.8-0.9 of the data sheet; the lower end is taken because
# framework kernels are less regular than STREAM.
MEMORY_FRACTION = 0.8

# A CPU's step has a part that does not shrink with the batch. PaddlePaddle with MKL-DNN v0.11
# on a 2-socket Xeon Gold 6148 trains VGG-19 at 28.46, 29.83 and 30.44 img/s, ResNet-50 at
# 81.69, 82.35 and 84.08, GoogLeNet at 250.46, 264.83 and 269.50, at batch 64, 128 and 256
# (PaddlePaddle, benchmark/IntelOptimizedPaddle.md, the page the node's default efficiency
# comes from). t(B) = a + b·B fitted to each (terms.fit_batch_curve) puts the fixed part a
# at 6.1, 2.3 and 6.8 samples' worth of b, the points within 0.8% of the lines; the median
# is the default shape of every CPU's step without a measured curve (``Compute.seconds``),
# extrapolated below batch 64. tests/predict/test_batch_curve.py refits it from these numbers.
CPU_FIXED_SAMPLES = 6.1
CPU_CURVE_SOURCE = "PaddlePaddle MKL-DNN on 2 x Xeon Gold 6148, batch 64-256"

# Bytes per parameter of one optimizer step in torch's foreach implementations (the default on
# CUDA; fp32 weights and state), counted kernel by kernel (``predict.fsdp`` module doc 1b,
# ``predict.model`` module doc 3; on one H100 and one CPU core checked in docs/predict.md).
# AdamW: weight decay p ·= 1 − lr·λ (read and write p: 8), m lerped toward g (read m and g,
# write m: 12), v ·= β2 (8), v += (1 − β2)·g² (read v and g, write v: 12), s = √v (8),
# s /= √(1 − β2^t) (8), s += ε (8), p −= lr/(1 − β1^t) · m/s (read p, m and s, write p: 16):
# 80. SGD with momentum: buf ·= μ (8), buf += g (12), p −= lr·buf (12): 32. LARS
# (trainperf's own per-tensor trust ratios): not counted.
OPTIMIZER_STEP_BYTES = {"adamw": 80, "sgd": 32}


def optimizer_step_s(optimizer: str, params: float, rate: float | None) -> float | None:
    """Seconds of one step of ``optimizer`` over ``params`` parameters streamed at ``rate``
    bytes/s; None where the optimizer's bytes or the rate are not known."""
    step = OPTIMIZER_STEP_BYTES.get(optimizer)
    if step is None or not rate:
        return None
    return step * params / rate


@dataclass(frozen=True)
class Compute:
    """Seconds of forward + backward on one device per batch, and where they come from:
    a measured throughput X (t = B / X) or the roofline of ``trainperf.predict.roofline``."""

    source: str
    throughput: float | None = None
    roofline: Callable[..., RooflineTime] | None = None  # called with batch=B
    curve: BatchCurve | None = None
    # The default shape of a CPU's step (CPU_FIXED_SAMPLES): a fixed part worth
    # ``fixed_samples`` samples, the time exact at ``reference_batch`` (where the throughput
    # was measured, or the catalog's efficiency derived).
    fixed_samples: float = 0.0
    reference_batch: int | None = None

    def seconds(self, batch: int) -> float:
        if self.curve is not None:
            return self.curve.seconds(batch)
        if self.roofline is None:
            time = batch / self.throughput
        else:
            time = batch * self.roofline(batch=batch).seconds_per_sample
        return time * self.shape_factor(batch)

    def shape_factor(self, batch: int) -> float:
        """t(B) ∝ B + k with k = fixed_samples, 1 at the reference batch B_r: the time at B is
        the rate's B·t(B_r)/B_r times (B + k)/B · B_r/(B_r + k)."""
        if not self.fixed_samples or self.reference_batch is None:
            return 1.0
        k, reference = self.fixed_samples, self.reference_batch
        return (batch + k) / batch * reference / (reference + k)

    def batch_dependence(self) -> str:
        """How the time grows with the batch, in the words of the assumptions."""
        if self.curve is not None:
            return "a fixed part per step, the rest per sample"
        shape = ""
        if self.fixed_samples and self.reference_batch is not None:
            shape = (
                f", and a fixed part worth {self.fixed_samples:g} samples per step (a CPU's "
                f"default curve: {CPU_CURVE_SOURCE}), exact at batch {self.reference_batch}"
            )
        if self.roofline is None:
            return ("samples at the measured rate" if shape else "time linear in the batch") + shape
        return "weights move once per step, activations once per sample" + shape

    def memory_bound_share(self, batch: int) -> float | None:
        """The share of the step in memory-bound ops (roofline only)."""
        return None if self.roofline is None else self.roofline(batch=batch).memory_bound_share

    def forward_share(self, batch: int) -> float:
        """The forward's share of forward + backward: the priced ops' (the roofline's forward
        and loss against its whole step) where the step is priced op by op, else the FLOP
        rule FORWARD_SHARE (a measured step has no split). The recomputation of activation
        checkpointing re-runs that forward. Where they differ: a backward that skips the
        first layer's input gradient (the forward's share is above a third), a fused
        attention kernel whose backward runs at its own rate, memory-bound ops whose
        backward moves other bytes than their forward."""
        if self.roofline is None:
            return FORWARD_SHARE
        return self.roofline(batch=batch).forward_share

    def forward_words(self, batch: int) -> str:
        """How forward + backward are split, in the words of the assumptions."""
        if self.roofline is None:
            return "forward:backward = 1:2 (their FLOPs: a measured step has no split)"
        return (
            f"forward {self.forward_share(batch):.1%} of forward + backward at batch {batch} "
            "(its ops priced)"
        )

    def class_share(self, batch: int, kind: str) -> float | None:
        """The share of the step in ops of class ``kind`` (``roofline.op_class``; roofline
        only)."""
        if self.roofline is None:
            return None
        time = self.roofline(batch=batch)
        total = time.seconds_per_sample
        return time.class_seconds.get(kind, 0.0) / total if total else 0.0


def winograd_applies(device: Any, precision: str) -> bool:
    """cuDNN computes 3×3 stride-1 convolutions with Winograd transforms when it runs them
    on CUDA cores (fp32); on tensor cores (tf32, fp16, bf16) it mostly uses implicit GEMM,
    so direct FLOPs stand. CPUs: not assumed (oneDNN's Winograd is opt-in)."""
    return getattr(device, "kind", "gpu") == "gpu" and precision == "fp32"


def compute_rate(
    spec: ModelSpec,
    device: Any,
    precision: str,
    measured: Measured = NOTHING_MEASURED,
    size: int | None = None,
    winograd: bool | None = None,
    profile: OpProfile | None = None,
    kernels: bool = False,
    batch_size: int | None = None,
    attention_kernel: str = DEFAULT_ATTENTION_KERNEL,
) -> Compute:
    """t_compute: B/X from a measured throughput X, else the per-op roofline

        t = Σ_ops max(F_i / (peak · f), Q_i / (bandwidth · m))

    with f the achieved fraction of peak of compute-bound ops (given, or the catalog's
    default for the device and precision) and m = MEMORY_FRACTION; ``winograd`` divides
    the FLOPs of 3×3 stride-1 convolutions by 2.25 (None: ``winograd_applies``).
    ``profile``: the ops to price (default ``op_profile(spec, size)``). ``kernels``: when
    nothing was measured and the catalog knows the device's kernel rates
    (``Device.kernel_fractions``), each op's FLOPs go at its own kernel's rate (GEMMs at the
    GEMM fraction, fused attention at the attention kernel's) instead of one whole-step f:
    the operator model of an LLM step, whose MFU then follows each GPU's balance of compute,
    attention and memory bandwidth. The catalog's attention rate is FlashAttention-2's at
    2,048 tokens; ``attention_kernel``'s speed at ``size`` tokens relative to it scales it
    (``trainperf.predict.attention_kernels``).

    A CPU without a measured curve takes the default shape of its step (CPU_FIXED_SAMPLES),
    exact where its rate holds: at the batch a throughput was measured at
    (``measured.throughput_batch``, else ``batch_size``, the batch it is given for), the
    catalog's ``efficiency_batch`` for its default fraction, or the throughput's batch for
    a fraction solved from it (a fraction given without one gets no shape).
    """
    name = getattr(device, "id", "the device")
    allowed = available_precisions(device)
    if allowed and precision not in allowed:
        raise PredictError(f"{name} has no {precision} peak: allowed {', '.join(allowed)}")
    single_device_throughput = measured.single_device_throughput
    if single_device_throughput is not None:
        if not THROUGHPUT_MIN <= single_device_throughput <= THROUGHPUT_MAX:
            raise PredictError(
                f"single-device throughput must be from {THROUGHPUT_MIN:g} to "
                f"{THROUGHPUT_MAX:g} samples/s, got {single_device_throughput}"
            )
        return Compute(
            f"one device trains {single_device_throughput:g} samples/s",
            throughput=single_device_throughput,
            **_cpu_shape(device, measured.throughput_batch or batch_size),
        )
    if (curve := measured.batch_curve) is not None:
        batches = ", ".join(str(b) for b in curve.batches)
        return Compute(
            f"one device's step {curve.fixed_s * 1e3:.3g} ms + {curve.per_sample_s * 1e3:.3g} "
            f"ms per sample, fitted to batches {batches} ({curve.source})",
            curve=curve,
        )
    peak = device.peak_flops(precision)
    if not peak:
        raise PredictError(
            f"{name} has no {precision} peak FLOP/s: give a single-device throughput instead"
        )
    fraction, source = measured.achieved_fraction, ""
    per_kernel = None
    if fraction is None and kernels and hasattr(device, "kernel_fractions"):
        per_kernel = device.kernel_fractions(precision)
    kernel_note = ""
    if per_kernel is not None:
        kernel = attention_kernel_named(attention_kernel)
        length = size or REFERENCE_TOKENS
        relative = kernel.relative(length)
        per_kernel = per_kernel | {"attention": per_kernel["attention"] * relative}
        kernel_note = (
            f" ({kernel.name}, at {length:,} tokens {relative:.2f}× the catalog's rate at "
            f"{REFERENCE_TOKENS:,})"
        )
    if fraction is None:
        fraction, source = device.efficiency(precision), " (the catalog's default)"
    if fraction is None:
        raise PredictError(
            f"{name} has no default achieved fraction at {precision}: give one, "
            "or a single-device throughput"
        )
    if not ACHIEVED_FRACTION_MIN <= fraction <= 1:
        raise PredictError(
            f"achieved fraction must be from {ACHIEVED_FRACTION_MIN:g} to 1, got {fraction}"
        )
    bandwidth = getattr(device, "memory_bytes_per_s", None)
    if not bandwidth:
        raise PredictError(f"{name} has no memory bandwidth: give a single-device throughput")
    if winograd is None:
        winograd = winograd_applies(device, precision)
    profile = profile or op_profile(spec, size)
    # A part held below the power its peaks hold at (Device.power_limit_throughput,
    # measured end to end on that part) runs every op that much slower: its clock falls.
    throttle = getattr(device, "power_limit_throughput", None) or 1.0
    # One pricing per batch: a prediction asks it for the time, the forward's share and the
    # shares of memory-bound ops and GEMMs of the same batch, row after row.
    roofline = lru_cache(maxsize=64)(
        partial(
            roofline_seconds_per_sample,
            profile,
            peak * throttle,
            bandwidth * throttle,
            compute_fraction=fraction,
            memory_fraction=MEMORY_FRACTION,
            activation_bytes=ACTIVATION_BYTES[precision],
            winograd=winograd,
            class_fractions=per_kernel,
        )
    )
    flops = profile.flops_per_sample()
    rates = f"at {fraction:.1%}{source}"
    if per_kernel is not None:
        rates = (
            f"GEMMs at {per_kernel['gemm']:.1%} and fused attention at "
            f"{per_kernel['attention']:.1%}{kernel_note} (the catalog's kernel rates), "
            f"the rest at {fraction:.1%}{source}"
        )
    # The catalog's fraction holds at its efficiency_batch, one solved from a throughput
    # (--calibrate) at that throughput's batch; a fraction given alone has no batch.
    reference = (
        getattr(device, "efficiency_batch", None)
        if measured.achieved_fraction is None
        else measured.throughput_batch
    )
    shape = _cpu_shape(device, reference)
    return Compute(
        f"roofline per op: {flops / 1e9:.3g} GFLOP/sample {rates} of "
        f"{peak / 1e12:.4g} TFLOP/s {precision} peak, bytes at {MEMORY_FRACTION:.0%} of "
        f"{bandwidth / 1e9:.4g} GB/s"
        + (", Winograd 3×3 convolutions" if winograd else "")
        + _power_limit_words(device, throttle),
        roofline=roofline,
        **shape,
    )


def _power_limit_words(device: Any, throttle: float) -> str:
    """The power limit's slowdown in the words of the assumptions ('' where none)."""
    if throttle == 1.0:
        return ""
    limit = getattr(device, "tdp_w", None)
    at = f"at its {limit:g} W power limit" if limit else "at its power limit"
    return f", every op {at} at {throttle:.1%} of its full-power speed (the catalog's)"


def _cpu_shape(device: Any, reference_batch: int | None) -> dict[str, Any]:
    """Compute's default-shape fields for a CPU whose rate holds at ``reference_batch``."""
    if getattr(device, "kind", None) != "cpu" or not reference_batch:
        return {}
    return {"fixed_samples": CPU_FIXED_SAMPLES, "reference_batch": reference_batch}


def compute_curve(compute: Compute, prepared: Prepared, batch_size: int) -> list[dict]:
    """One device's compute time against its batch, as the rows take it (``--explain``): at
    1, 2, 4, ... up to the largest batch per device the prediction uses, and at each of
    those batches."""
    largest = max([batch_size, *prepared.batches.values()])
    batches = {2**k for k in range(largest.bit_length()) if 2**k <= largest}
    batches |= {batch_size, *prepared.batches.values()}
    return [
        {
            "device_batch": b,
            "compute_s": compute.seconds(b),
            "samples_per_s": b / compute.seconds(b),
        }
        for b in sorted(batches)
    ]


def baseline_inputs(compute: Compute, batch_size: int, baseline: dict) -> dict[str, Any]:
    """The inputs a prediction echoes last: compute per sample and the one-device row."""
    return {
        "compute_s_per_sample": compute.seconds(batch_size) / batch_size,
        "memory_bound_share": compute.memory_bound_share(batch_size),
        "baseline": {k: baseline[k] for k in ("device_batch", "samples_per_s", "step_s", "fits")},
    }
