"""Which ``scaled_dot_product_attention`` kernel runs, and the attention call of the zoo.

PyTorch picks one of its SDPA kernels per call, from the device, the dtype of q/k/v, the
options and the GPU generation (``torch.nn.attention.SDPBackend``):

- ``flash`` (FlashAttention-2): CUDA GPUs of compute capability 8.0 or newer, fp16 and
  bf16 only; takes grouped-query attention (``enable_gqa``: fewer key/value heads than
  query heads) as it is; on a CPU, ``_scaled_dot_product_flash_attention_for_cpu`` (every
  float dtype, GQA too) runs unless dropout is asked for;
- ``efficient`` (xFormers' memory-efficient kernel): any CUDA GPU and float dtype, fp32
  and TF32 included, but no GQA: the key/value heads must match the query heads;
- ``cudnn``: cuDNN's fused attention (Hopper), when PyTorch prefers it;
- ``math``: the reference composition of matmuls and a softmax, which materialises the
  whole L×L attention matrix per head: a Llama 3 8B layer at 8,192 tokens asks for
  ~137 GB. It is what runs when no fused kernel takes the call: fp32/TF32 grouped-query
  attention on a GPU (flash refuses fp32, efficient refuses GQA), dropout on a CPU.

``kernel_for`` says which fused kernel a call will get, and ``attend`` makes the call so
that one exists in every precision: grouped key/value heads are repeated to the query
heads (``repeat_interleave``, as torchtitan's ``repeat_kv`` does) only when the kernel
that will run cannot take them grouped. The memory predictor prices the same choice
(trainperf.predict.memory), and ``AttentionWatch`` records the kernel that actually ran
in each result (``attention_backend``), read from the operators dispatched: a kernel chosen
by PyTorch, not assumed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

FLASH_MIN_CAPABILITY = (8, 0)
SIXTEEN_BIT = (torch.float16, torch.bfloat16)
# aten operator -> kernel name (attention_backend)
KERNEL_OPS = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_attention_math": "math",
}
TAKES_GROUPED_HEADS = ("flash", "math")


def kernel_for(
    device_type: str,
    dtype: torch.dtype,
    *,
    dropout: bool = False,
    capability: tuple[int, int] | None = None,
) -> str:
    """The fused kernel PyTorch gives an attention call with equal heads (module doc):
    ``flash``, ``efficient`` or ``math`` when none applies."""
    if device_type == "cuda":
        if dtype in SIXTEEN_BIT and capability is not None and capability >= FLASH_MIN_CAPABILITY:
            return "flash"
        return "efficient"
    if device_type == "cpu":
        return "math" if dropout else "flash"
    return "math"


@dataclass(frozen=True)
class AttentionPlan:
    """Where attention will run, as far as the kernel choice depends on it: a device type,
    16-bit inputs (fp16/bf16 autocast) or not, and a GPU's compute capability. What the
    memory predictor knows of a machine it cannot run on."""

    device_type: str
    sixteen_bit: bool = False
    capability: tuple[int, int] | None = None

    def kernel(self, dropout: bool = False) -> str:
        dtype = torch.bfloat16 if self.sixteen_bit else torch.float32
        return kernel_for(self.device_type, dtype, dropout=dropout, capability=self.capability)

    def takes_grouped_heads(self, dropout: bool = False) -> bool:
        """Whether the kernel gets grouped key/value heads as they are (else repeated)."""
        return self.kernel(dropout) in TAKES_GROUPED_HEADS


def _capability(device: torch.device) -> tuple[int, int] | None:
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> torch.Tensor:
    """``scaled_dot_product_attention`` of (B, heads, L, d) queries and (B, kv_heads, L, d)
    keys and values, so that a fused kernel takes it (module doc)."""
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if heads == kv_heads:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    plan = AttentionPlan(q.device.type, q.dtype in SIXTEEN_BIT, _capability(q.device))
    if plan.takes_grouped_heads(dropout=dropout_p > 0):
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=is_causal, enable_gqa=True
        )
    repeat = heads // kv_heads
    k, v = k.repeat_interleave(repeat, dim=-3), v.repeat_interleave(repeat, dim=-3)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)


class _Kernels(TorchDispatchMode):
    """The SDPA kernels dispatched while it is on."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = KERNEL_OPS.get(func._overloadpacket.__name__)
        if name is not None:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


class AttentionWatch(TorchFunctionMode):
    """Records the kernel each ``scaled_dot_product_attention`` call ran (``kernels``):
    the fused operator dispatched under it, or ``math`` when none was (the math path is a
    composite that dispatches matmuls and a softmax). Only the attention calls are looked
    into; everything else passes through untouched."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        with _Kernels() as dispatched:
            out = func(*args, **kwargs)
        self.kernels.append(dispatched.seen[0] if dispatched.seen else "math")
        return out

    def metrics(self) -> dict[str, Any]:
        """``attention_backend``: the kernels that ran, comma-separated (one, normally);
        nothing when the model made no attention call."""
        if not self.kernels:
            return {}
        return {"attention_backend": ", ".join(dict.fromkeys(self.kernels))}


def watched(step: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """Run ``step()`` under an ``AttentionWatch``: (what it returned, its metrics)."""
    with AttentionWatch() as watch:
        out = step()
    return out, watch.metrics()
