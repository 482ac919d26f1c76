"""GPT-2 small in Flax NNX, the mirror of trainperf.models.gpt2 (124,439,808 parameters).

The sizes are the PyTorch module's ``GPT2Config``: token and position embeddings (positions
0..L-1 sliced from the table) and dropout, twelve pre-LayerNorm blocks of causal attention
(fused qkv) and a tanh-GELU MLP, a final LayerNorm, and an output layer that is the token
embedding itself (``nnx.Embed.attend``: one parameter, counted once, as torch's tie).
Initialisation N(0, 0.02), zero biases, and the GPT-2 paper's 0.02 / sqrt(2 x layers) for
the two projections that write into the residual stream.

Dropout 0.1 on the embeddings, on the attention probabilities and on each sublayer's
output, as the PyTorch module.
"""

from __future__ import annotations

import math
from typing import Any

import jax
from flax import nnx

from trainperf.models.flax_zoo.layers import Attention
from trainperf.models.gpt2 import GPT2Config
from trainperf.models.spec import SizeError

NORMAL = nnx.initializers.normal(0.02)
ZEROS = nnx.initializers.zeros_init()


def _linear(
    in_features: int, out_features: int, std: float = 0.02, *, dtype: Any, rngs: nnx.Rngs
) -> nnx.Linear:
    init = nnx.initializers.normal(std)
    return nnx.Linear(
        in_features, out_features, dtype=dtype, kernel_init=init, bias_init=ZEROS, rngs=rngs
    )


def _layer_norm(config: GPT2Config, *, dtype: Any, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(config.hidden, epsilon=config.ln_eps, dtype=dtype, rngs=rngs)


def _residual_std(config: GPT2Config) -> float:
    # GPT-2 paper, section 2.3: 1/sqrt(N) for N residual additions (two per block).
    return 0.02 / math.sqrt(2 * config.layers)


class CausalSelfAttention(nnx.Module):
    """Multi-head attention in which each token sees only itself and the tokens before it."""

    def __init__(self, config: GPT2Config, *, dtype: Any, rngs: nnx.Rngs) -> None:
        self.qkv = _linear(config.hidden, 3 * config.hidden, dtype=dtype, rngs=rngs)
        self.attention = Attention(config.heads, config.dropout, is_causal=True, rngs=rngs)
        residual = _residual_std(config)
        self.proj = _linear(config.hidden, config.hidden, residual, dtype=dtype, rngs=rngs)
        self.dropout = nnx.Dropout(config.dropout, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.dropout(self.proj(self.attention(self.qkv(x))))


class MLP(nnx.Module):
    def __init__(self, config: GPT2Config, *, dtype: Any, rngs: nnx.Rngs) -> None:
        width = 4 * config.hidden
        self.up = _linear(config.hidden, width, dtype=dtype, rngs=rngs)
        self.down = _linear(width, config.hidden, _residual_std(config), dtype=dtype, rngs=rngs)
        self.dropout = nnx.Dropout(config.dropout, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        # GPT-2 was trained with the tanh approximation of GELU (HF's "gelu_new").
        return self.dropout(self.down(jax.nn.gelu(self.up(x), approximate=True)))


class Block(nnx.Module):
    """Pre-LayerNorm block: each sublayer reads a normalised copy; the residual adds raw."""

    def __init__(self, config: GPT2Config, *, dtype: Any, rngs: nnx.Rngs) -> None:
        self.ln_1 = _layer_norm(config, dtype=dtype, rngs=rngs)
        self.attention = CausalSelfAttention(config, dtype=dtype, rngs=rngs)
        self.ln_2 = _layer_norm(config, dtype=dtype, rngs=rngs)
        self.mlp = MLP(config, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2LMHeadModel(nnx.Module):
    """Token ids (B, L) -> next-token logits (B, L, vocab)."""

    def __init__(self, dropout: float = 0.1, *, dtype: Any, rngs: nnx.Rngs) -> None:
        config = GPT2Config(dropout=dropout)
        self.max_positions = config.max_positions
        self.wte = nnx.Embed(
            config.vocab_size, config.hidden, dtype=dtype, embedding_init=NORMAL, rngs=rngs
        )
        self.wpe = nnx.Embed(
            config.max_positions, config.hidden, dtype=dtype, embedding_init=NORMAL, rngs=rngs
        )
        self.dropout = nnx.Dropout(config.dropout, rngs=rngs)
        self.blocks = nnx.Sequential(
            *(Block(config, dtype=dtype, rngs=rngs) for _ in range(config.layers))
        )
        self.ln_f = _layer_norm(config, dtype=dtype, rngs=rngs)

    def __call__(self, ids: jax.Array) -> jax.Array:
        seq_len = ids.shape[-1]
        if seq_len > self.max_positions:
            raise SizeError(f"seq_len {seq_len} exceeds GPT-2's {self.max_positions} positions")
        x, positions = self.wte(ids), self.wpe.embedding[:seq_len]
        x = self.dropout(x + positions.astype(x.dtype))
        return self.wte.attend(self.ln_f(self.blocks(x)))


MODELS = {"gpt2-small": GPT2LMHeadModel}
