"""PyTorch's layer semantics in JAX, for the Flax zoo to mirror trainperf.models exactly.

Images are NHWC (JAX's native layout); every function here reproduces the output shape and
the values of the torch layer it names on that layout:

- ``conv``/``linear``: ``nnx.Conv``/``nnx.Linear`` with torch's symmetric integer padding;
  ``torch_default_init`` is torch's default initialisation of both (kaiming-uniform with
  a = sqrt(5): U(+-1/sqrt(fan_in)) for weights and biases);
- ``max_pool``/``avg_pool``: ``nn.MaxPool2d``/``nn.AvgPool2d`` with ``ceil_mode``: the
  output size is torch's ``floor((H + 2p - k + (s - 1 if ceil)) / s) + 1``, less one when
  the last window would start in the right padding; the extra windows of ceil mode see the
  input's edge only (max pads with -inf; the average divides by the elements the window
  holds, torch's divisor when the padding is 0);
- ``adaptive_avg_pool``: ``nn.AdaptiveAvgPool2d``, output cell i averaging input rows
  floor(i H / n) .. ceil((i + 1) H / n) - 1 (torch's windows; for H < n they overlap and
  replicate the map). Written as two small averaging matrices (height, then width), exact
  for every input size; XLA counts their matmuls, a few kFLOPs per image;
- ``local_response_norm``: ``nn.LocalResponseNorm`` across channels,
  b_c = a_c / (k + alpha / n * sum_{c' = c - n//2}^{c + (n-1)//2} a_{c'}^2) ** beta,
  with zeros beyond the first and last channel (torch pads the same way);
- ``Attention``: torch's ``scaled_dot_product_attention`` on a fused qkv projection, with
  dropout on the probabilities in training, through ``nnx.dot_product_attention``: without
  dropout it calls ``jax.nn.dot_product_attention``, whose default implementation is XLA's
  in jax 0.10 (no fused kernel is picked by itself); with dropout it computes the
  probabilities explicitly, as torch's math backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

Initializer = Callable[..., jax.Array]


def torch_default_init(fan_in: int) -> dict[str, Initializer]:
    """``kernel_init`` and ``bias_init`` of torch's default for a layer of ``fan_in`` inputs:
    weights of variance 1 / (3 fan_in) and biases, both uniform in +-1/sqrt(fan_in)."""
    bound = 1 / math.sqrt(fan_in)
    return {
        "kernel_init": nnx.initializers.variance_scaling(1 / 3, "fan_in", "uniform"),
        "bias_init": _uniform_bias(bound),
    }


def _uniform_bias(bound: float) -> Initializer:
    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def conv(
    in_ch: int,
    out_ch: int,
    kernel: int,
    *,
    stride: int = 1,
    padding: int = 0,
    use_bias: bool = True,
    dtype: Any,
    rngs: nnx.Rngs,
    **init: Initializer,
) -> nnx.Conv:
    """``nn.Conv2d(in_ch, out_ch, kernel, stride, padding, bias=use_bias)`` on NHWC;
    ``init`` holds kernel_init/bias_init (torch's default when absent)."""
    init = init or torch_default_init(in_ch * kernel * kernel)
    return nnx.Conv(
        in_ch,
        out_ch,
        (kernel, kernel),
        strides=stride,
        padding=((padding, padding), (padding, padding)),
        use_bias=use_bias,
        dtype=dtype,
        rngs=rngs,
        **init,
    )


def linear(
    in_features: int, out_features: int, *, dtype: Any, rngs: nnx.Rngs, **init: Initializer
) -> nnx.Linear:
    """``nn.Linear``; ``init`` holds kernel_init/bias_init (torch's default when absent)."""
    init = init or torch_default_init(in_features)
    return nnx.Linear(in_features, out_features, dtype=dtype, rngs=rngs, **init)


def pooled_size(size: int, kernel: int, stride: int, padding: int, ceil_mode: bool) -> int:
    """torch's output size of a pooling (``pooling_output_shape`` in ATen)."""
    out = (size + 2 * padding - kernel + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    if out < 1:
        raise ValueError(f"a {kernel}x{kernel} pooling leaves nothing of a {size}x{size} map")
    return out


def _pool_padding(
    size: int, kernel: int, stride: int, padding: int, ceil_mode: bool
) -> tuple[int, int]:
    out = pooled_size(size, kernel, stride, padding, ceil_mode)
    # Ceil mode's last window may run past the right padding: pad up to its end.
    return padding, max(padding, (out - 1) * stride + kernel - size - padding)


def _window(
    x: jax.Array, kernel: int, stride: int, padding: int, ceil_mode: bool
) -> dict[str, Any]:
    height, width = (_pool_padding(n, kernel, stride, padding, ceil_mode) for n in x.shape[1:3])
    return {
        "window_dimensions": (1, kernel, kernel, 1),
        "window_strides": (1, stride, stride, 1),
        "padding": ((0, 0), height, width, (0, 0)),
    }


def max_pool(
    x: jax.Array, kernel: int, stride: int, padding: int = 0, ceil_mode: bool = False
) -> jax.Array:
    """``nn.MaxPool2d(kernel, stride, padding, ceil_mode=ceil_mode)`` on NHWC."""
    window = _window(x, kernel, stride, padding, ceil_mode)
    # A Python scalar identity, so jax sees the max monoid and can differentiate it (an
    # array initial value makes a generic, non-differentiable reduce_window).
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, **window)


def avg_pool(x: jax.Array, kernel: int, stride: int, ceil_mode: bool = False) -> jax.Array:
    """``nn.AvgPool2d(kernel, stride, ceil_mode=ceil_mode)`` (no padding) on NHWC."""
    window = _window(x, kernel, stride, 0, ceil_mode)
    sums = jax.lax.reduce_window(x, 0.0, jax.lax.add, **window)

    def counts(size: int, out: int) -> np.ndarray:
        starts = np.arange(out) * stride
        return np.minimum(starts + kernel, size) - starts

    rows = counts(x.shape[1], sums.shape[1])
    cols = counts(x.shape[2], sums.shape[2])
    return sums / jnp.asarray(np.outer(rows, cols)[:, :, None], x.dtype)


def _averaging_matrix(size: int, out: int) -> np.ndarray:
    """(out, size) rows that average torch's adaptive windows."""
    matrix = np.zeros((out, size))
    for i in range(out):
        start, end = (i * size) // out, -((-(i + 1) * size) // out)
        matrix[i, start:end] = 1 / (end - start)
    return matrix


def adaptive_avg_pool(x: jax.Array, out: int) -> jax.Array:
    """``nn.AdaptiveAvgPool2d(out)`` on NHWC (the identity when the map is already out x out)."""
    height, width = x.shape[1:3]
    if (height, width) == (out, out):
        return x
    rows = jnp.asarray(_averaging_matrix(height, out), x.dtype)
    cols = jnp.asarray(_averaging_matrix(width, out), x.dtype)
    x = jnp.einsum("ih,bhwc->biwc", rows, x)
    return jnp.einsum("jw,biwc->bijc", cols, x)


def local_response_norm(
    x: jax.Array, size: int, alpha: float, beta: float, k: float = 1.0
) -> jax.Array:
    """``nn.LocalResponseNorm(size, alpha, beta, k)`` across the channels of NHWC."""
    squares = jnp.pad(x * x, ((0, 0), (0, 0), (0, 0), (size // 2, (size - 1) // 2)))
    channels = x.shape[-1]
    window = sum(squares[..., i : i + channels] for i in range(size))
    return x / (k + alpha / size * window) ** beta


class Attention(nnx.Module):
    """torch's ``F.scaled_dot_product_attention(q, k, v, dropout_p, is_causal)`` on a fused
    projection: (B, L, 3 d) -> (B, L, d), the last axis holding q, k, v in that order, each
    split into ``heads`` heads (torch's ``qkv.view(B, L, 3, heads, d // heads)``).

    In training mode the probabilities get dropout at ``rate``, a mask drawn per element as
    torch's; ``deterministic`` (set by ``model.eval()``, as on ``nnx.Dropout``) turns it off.
    """

    def __init__(self, heads: int, rate: float, *, is_causal: bool, rngs: nnx.Rngs) -> None:
        self.heads = heads
        self.rate = rate
        self.is_causal = is_causal
        self.deterministic = False
        self.rngs = rngs.dropout.fork()

    def __call__(self, qkv: jax.Array) -> jax.Array:
        batch, seq_len, width = qkv.shape
        heads = qkv.reshape(batch, seq_len, 3, self.heads, width // (3 * self.heads))
        q, k, v = jnp.unstack(heads, axis=2)
        dropout = not self.deterministic and self.rate > 0
        context = nnx.dot_product_attention(
            q,
            k,
            v,
            dropout_rate=self.rate if dropout else 0.0,
            dropout_rng=self.rngs() if dropout else None,
            broadcast_dropout=False,
            deterministic=not dropout,
            is_causal=self.is_causal,
        )
        return context.reshape(batch, seq_len, width // 3)
