"""How fast a fused attention kernel runs against the device's catalog rate, by sequence length.

A device's ``attention_efficiency`` in the catalog is the fraction of peak that
FlashAttention-2 reaches in a training step's forward + backward at ``REFERENCE_TOKENS``
tokens (causal, head dimension 128): SDPA's flash kernel, which trainperf's runs take on
A100-class GPUs. On Hopper PyTorch may pick cuDNN's fused attention instead
(``trainperf.models.attention``; the result records which ran); no source here gives its
speed by length, so it is priced as FlashAttention-2.
The same kernel is faster on longer sequences (more work per launched tile), and other
frameworks ran other kernels: MosaicML's llm-foundry trained its published MPT runs with
``attn_impl: triton``, a FlashAttention written in Triton that reaches less than half of
FlashAttention-2's rate. Each kernel here is its forward + backward speed at six sequence
lengths relative to FlashAttention-2 at ``REFERENCE_TOKENS``, on the same GPU; the rate of
a step's attention is then

    attention fraction = device.attention_efficiency × relative(kernel, sequence length),

interpolated linearly in log2(length) between the measured lengths, the ends held beyond.

Source of every number: the FlashAttention-2 release's benchmark figure (Dao, arXiv:2307.08691,
Fig. 4(d); Dao-AILab/flash-attention ``assets/flash2_a100_fwd_bwd_benchmark.png``, commit
4f285b35, 2023-07-17): A100 80 GB SXM4, causal, head dimension 128, forward + backward,
TFLOP/s at 512, 1k, 2k, 4k, 8k and 16k tokens. "FlashAttention Triton" there is the kernel of
``flash_attn/flash_attn_triton.py`` (the benchmark's import), which llm-foundry copied
(``llmfoundry/models/layers/flash_attn_triton.py``: "Copied from
https://github.com/HazyResearch/flash-attention/blob/eff9fe6.../flash_attn_triton.py").
The same relative speeds are assumed on other GPUs. The H100 figure of the same release
(``flash2_h100_fwd_bwd_benchmark.png``, (d)) bears out FlashAttention-2's curve there: 163, 221,
265, 294, 308 and 328 TFLOP/s, 0.62 to 1.24 of its 2k rate, where the A100's is 0.64 to 1.22.
It has no Triton bar; its FlashAttention (1) bar, which the Triton kernel matches on the
A100 (68 against 69 TFLOP/s at 2k), runs at 0.41 of FlashAttention-2 at 2k, where the
relative rate below is 0.44.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from trainperf.predict.inputs import PredictError

REFERENCE_TOKENS = 2048  # the catalog's attention_efficiency is FlashAttention-2's here
FIGURE_TOKENS = (512, 1024, 2048, 4096, 8192, 16384)
_FIGURE_LOG2 = tuple(math.log2(t) for t in FIGURE_TOKENS)


@dataclass(frozen=True)
class AttentionKernel:
    """A fused attention kernel's forward + backward TFLOP/s at ``FIGURE_TOKENS``, as the
    figure gives them, and its speed relative to FlashAttention-2 at 2,048 tokens."""

    id: str
    name: str
    tflops: tuple[float, ...]  # at FIGURE_TOKENS, on the figure's A100
    reference_tflops: float = 155.0  # FlashAttention-2 at REFERENCE_TOKENS on the same A100

    def relative(self, tokens: int) -> float:
        """Its speed at a sequence of ``tokens`` over FlashAttention-2's at 2,048."""
        x = math.log2(max(FIGURE_TOKENS[0], min(tokens, FIGURE_TOKENS[-1])))
        i = max(1, bisect.bisect_left(_FIGURE_LOG2, x))  # x lies in [points i-1, i]
        share = (x - _FIGURE_LOG2[i - 1]) / (_FIGURE_LOG2[i] - _FIGURE_LOG2[i - 1])
        value = self.tflops[i - 1] + share * (self.tflops[i] - self.tflops[i - 1])
        return value / self.reference_tflops


ATTENTION_KERNELS = {
    kernel.id: kernel
    for kernel in (
        AttentionKernel(
            "flash-attention-2",
            "FlashAttention-2, PyTorch SDPA's flash kernel",
            (99, 133, 155, 173, 182, 189),
        ),
        AttentionKernel(
            "flash-attention-triton",
            "FlashAttention in Triton, llm-foundry's attn_impl triton",
            (50, 61, 68, 74, 78, 80),
        ),
    )
}
DEFAULT_ATTENTION_KERNEL = "flash-attention-2"


def attention_kernel_named(kernel_id: str) -> AttentionKernel:
    """The kernel ``kernel_id``; PredictError naming the allowed ones when unknown."""
    if kernel_id not in ATTENTION_KERNELS:
        raise PredictError(
            f"unknown attention kernel '{kernel_id}': allowed {', '.join(ATTENTION_KERNELS)}"
        )
    return ATTENTION_KERNELS[kernel_id]
